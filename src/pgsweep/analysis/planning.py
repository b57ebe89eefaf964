"""What `pgsweep plan` says about the statistics of a plan before anything runs: how whole
plots are replicated and what that costs, the noise the plan is sized with (this
machine's recording, or a pilot's with `--noise-from`, carried to this plan's round
length), the smallest change each comparison detects with 80% power, and with a pilot the
rounds each target difference needs and the trade-off between trial length and rounds."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from ..core import printable
from ..errors import PgsweepError
from ..plan import Plan
from ..store import Results
from ..units import human_seconds

if TYPE_CHECKING:
    from ..spec import Experiment
    from ..verdict.noise import Noise
    from ..verdict.power import Planned

SUMMARY_OVER = 10  # more comparisons than this are summarised by kind


def replication_lines(plan: Plan, estimate: tuple[float, float]) -> list[str]:
    """How the plan treats whole-plot factors, what their replication costs, and how many
    independent replicates each factor's verdict rests on."""
    grouped = plan.grouped_factors()
    out = []
    if grouped:
        groups = len({c.group for c in plan.configurations})
        how = ("every round visits every configuration, shuffled; the clusters stay alive and "
               "the run switches between them" if plan.keep_alive else
               f"they cannot all stay alive ({plan.why_not_alive}): every round visits each "
               "group as one batch, in a fresh random order, rebuilding its cluster")  # fmt: skip
        out.append(f"{', '.join(grouped)} need a new cluster: {how}")
        n = plan.instances()
        when = ("once, for the whole run" if n == 1 else "at every visit" if not plan.keep_alive
                else "every round" if plan.rebuild_every == 1
                else f"every {plan.rebuild_every} rounds")  # fmt: skip
        share = f" of {human_seconds(sum(estimate))}" if estimate[1] else ""
        out.append(f"{groups} groups x {n} instance(s) per level, built {when}: "
                   f"{plan.builds()} cluster builds, ~{human_seconds(estimate[1])}"
                   + share)  # fmt: skip
    for f in plan.factors:
        n = plan.replicates(f.name)
        if f.name in grouped and n < 2:
            what = (
                "1 instance per level: no verdict across its levels, only what these "
                'builds differ by (rebuild = "per_round" or "auto" replicates them)'
            )
        elif f.name in grouped:
            what = f"{n} instances per level (its error includes the spread between them)"
        else:
            what = f"{n} independent replicates (rounds)"
        out.append(f"  {f.name}: {what}")
    return out


def assumed_noise(exp: Experiment, pilot: Path | None) -> Noise:
    """A pilot's noise (`--noise-from`), else this machine's recording for the workload."""
    from ..verdict import noise as nz

    if pilot is None:
        scripts = {str(s["workload"].script) for s in exp.configurations.values()}
        return nz.recorded(scripts.pop() if len(scripts) == 1 else "tpcb-like")
    store = Results(pilot)
    try:
        found = pilot_noise(store, str(pilot))
    finally:
        store.close()
    if found is None:
        raise PgsweepError(
            f"{pilot} has too few complete rounds to measure the noise",
            where=str(pilot), fix="use a results folder with at least 2 complete rounds",
        )  # fmt: skip
    return found


def pilot_noise(results: Results, name: str) -> Noise | None:
    """The residual SD of one trial's log TPS around its round and configuration in a
    finished run, its df, its round length, and its trials' residuals in run order (for
    the variogram that carries it to another round length)."""
    import numpy as np

    from ..store import TPS
    from ..verdict import fit
    from ..verdict import noise as nz
    from . import core

    rounds = list(range(1, results.experiment().rounds + 1))
    configs = core._load(results)
    obs = core._observations(configs, TPS, rounds, configs[0], True, [], 0)
    if obs is None:
        return None
    model = fit(obs)
    if model.sub.df < 1:
        return None
    index = {c.id: i for i, c in enumerate(configs)}
    trials = sorted(results.trials(), key=lambda t: t.ord)
    seq = np.array([math.log(t.tps) - model.sub.coef[index[t.config_id]]
                    if t.ok and t.tps else math.nan for t in trials])  # fmt: skip
    return nz.from_sequence(model.sub.sigma, model.sub.df, len(configs), seq,
                            f"the pilot {printable(name)}")  # fmt: skip


def baseline_index(exp: Experiment, plan: Plan) -> int:
    from ..spec import report_options

    wanted = report_options(exp.source.text).baseline
    for i, c in enumerate(plan.configurations):
        if all(str(c.levels.get(k)) == str(v) for k, v in wanted.items()):
            return i
    return 0


def sensitivity_lines(exp: Experiment, plan: Plan, noise: Noise) -> list[str]:
    """The smallest change each comparison detects with 80% power at the plan's (maximum)
    rounds, judged as the report will judge it."""
    from ..verdict import power

    n = len(plan.configurations)
    sigma, why = noise.at(n)
    every = plan.rebuild_every if plan.keep_alive else 1
    levels = [dict(c.levels) for c in plan.configurations]
    rows = power.design_sensitivity(levels, tuple(plan.grouped_factors()), plan.rounds, every,
                                    sigma, sigma_df=noise.df,
                                    baseline=baseline_index(exp, plan))  # fmt: skip
    at = f"at most {plan.rounds}" if plan.adaptive else f"{plan.rounds}"
    head = (f"noise: {noise.source}, {sigma:.1%} per trial at rounds of {n} trials"
            + (f" (carried from rounds of {noise.round_length})"
               if n != noise.round_length and not why else ""))  # fmt: skip
    out = [head, *([f"note: {why}"] if why else [])]
    if not rows:
        return [*out, "no comparison to size: one configuration, or fewer than 2 rounds"]
    if plan.grouped_factors():
        out.append(f"instances of one level assumed to differ by {power.ASSUMED_BUILD_SD:.0%} "
                   "(a guess: a replicated run's report measures it)")  # fmt: skip
    out.append(f"the smallest change each comparison detects with 80% power with {at} "
               "rounds (every verdict on TPS judged together at 5%):")  # fmt: skip
    return out + _detect_rows(rows, plan)


def _detect_rows(rows: list[Planned], plan: Plan) -> list[str]:
    def what(r: Planned) -> str:
        if r.error == "within-run only":
            return "no verdict (one build per level)"
        text = "none within +1000%" if r.detectable >= 10 else f"{r.detectable:.0%}"
        return text + (f" ({r.error}, {r.replicates} instances per level)"
                       if r.error in ("whole-plot", "split-plot") else "")  # fmt: skip

    if len(rows) <= SUMMARY_OVER:
        ids = [c.id for c in plan.configurations]
        return [f"  {ids[r.config]} ({r.label}) against the baseline: {what(r)}"
                if r.config is not None else f"  {r.kind} effect {r.label}: {what(r)}"
                for r in rows]  # fmt: skip
    out = []
    for kind, name in (("baseline", "configurations against the baseline"),
                       ("main", "main effects"), ("interaction", "interactions")):  # fmt: skip
        mine = [r for r in rows if r.kind == kind and r.error != "within-run only"]
        if mine:
            lo, hi = min(r.detectable for r in mine), max(r.detectable for r in mine)
            span = f"{lo:.0%}" if lo == hi else f"{lo:.0%}-{hi:.0%}"
            out.append(f"  {len(mine)} {name}: {span}")
    unrep = sum(r.error == "within-run only" for r in rows)
    if unrep:
        out.append(f"  {unrep} comparisons across levels built once: no verdict")
    return out


def pilot_lines(noise: Noise, plan: Plan, pilot: Path) -> list[str]:
    """`--noise-from`: the rounds each target difference needs against the baseline, and the
    machine time of the plan's rounds spent on other trial lengths."""
    from ..verdict import power
    from .trial_length import length_noise, trade_off

    n = len(plan.configurations)
    sigma, _ = noise.at(n)
    df = noise.df
    out = []
    for target in (0.02, 0.03, 0.05, 0.10):
        need = power.rounds_needed(sigma, target, n, sigma_df=df, max_rounds=200)
        text = f"{need} rounds" if need else "more than 200 rounds"
        out.append(f"  to detect {target:.0%}: {text}")
    store = Results(pilot)
    try:
        split = length_noise(store, noise.sigma, int(df or 0))
    finally:
        store.close()
    if split is None:
        return out
    scale = (sigma / noise.sigma) ** 2 if noise.sigma > 0 else 1.0
    split = replace(split, between=split.between * scale, per_second=split.per_second * scale)
    out.append(f"the machine time of {plan.rounds} rounds of the pilot's {split.trial_s:g} s "
               f"trials ({split.overhead_s:.0f} s of overhead each) spent on other trial "
               f"lengths; of its {sigma:.1%} noise per trial, {math.sqrt(split.between):.1%} "
               "does not shrink with the window (a rough split from one pilot):")  # fmt: skip
    out += [f"  {s:>4d} s trials x {fit:>3d} rounds: detects {detect:.1%}"
            for s, fit, detect in trade_off(split, n, plan.rounds)]  # fmt: skip
    return out


def adaptive_lines(plan: Plan) -> list[str]:
    ad = plan.adaptive
    if ad is None:
        return []
    out = [f"adaptive rounds: futility asks about a change of {ad.interest:.0%} ([repeat] "
           "interest)"]  # fmt: skip
    if ad.why_max:
        out.append(f"max_rounds {ad.max_rounds}: {ad.why_max}")
    return out


def lines(exp: Experiment, plan: Plan, pilot: Path | None) -> list[str]:
    noise = assumed_noise(exp, pilot)
    out = adaptive_lines(plan) + sensitivity_lines(exp, plan, noise)
    if pilot is not None:
        out += pilot_lines(noise, plan, pilot)
    return out
