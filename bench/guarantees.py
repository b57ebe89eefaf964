#!/usr/bin/env python3
"""bench/guarantees: one table of what pgsweep's verdicts guarantee, design by design.

THIS VERSION RUNS ON THE CODE BEFORE ISSUE 23 (its figures are the "before" column of
the issue's note): every design is judged the way that code judges it.

Whole experiments are simulated over the noise recorded on this machine
(tests/data/noise: 60 back-to-back 10 s pgbench runs of one unchanged configuration,
tpcb-like and select-only), extended by a moving-block bootstrap (blocks of 8 runs, which
keeps the lag-1 autocorrelation of 0.63 inside blocks). Trials take the noise in the order
the real planner (pgsweep.plan.make_plan) runs them; cluster builds get a log-normal level
of SD `spread`. Columns:

- false "different": share of A/A experiments (nothing differs) with any "different"
  verdict in the report (every family printed for TPS), with its Monte-Carlo SE;
- +10% / +20%: power: share of experiments where a true change of that size on one
  configuration is called "faster" (gate rows: a true slowdown of that size fails the gate);
- rounds: mean rounds run (A/A);
- optimistic: share of A/A experiments whose line "differences above X% would have been
  detected with 80% power" names an X the design does not in fact detect with 80% power
  (X below the change found 80% of the time, by simulation of the same design).

Run: .venv/bin/python bench/guarantees.py [--reps N] [--workers N]
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse
import dataclasses
import math
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pgsweep import compare as cmp
from pgsweep import verdict as sm
from pgsweep.verdict import sequential as sq
from pgsweep.verdict import simulate as V

NOISE = Path(__file__).resolve().parents[1] / "tests" / "data" / "noise"
SRC = {w: V.sources(NOISE, w) for w in ("tpcb", "select")}


@dataclass
class Outcome:
    different: bool  # any "different" (gate rows: the gate failed)
    detected: bool  # the changed configuration called faster (gate rows: gate failed)
    rounds: int
    sensitivity: float | None  # the printed "differences above X%" of the watched contrast


Runner = Callable[[np.random.Generator, float], Outcome]


def _watched(fams: list[sm.Family], config: int | None, factor: str | None) -> sm.Contrast:
    for f in fams:
        for c in f.contrasts:
            if config is not None and c.config == config:
                return c
            if factor is not None and c.kind == "main" and c.terms[0][0] == factor:
                return c
    raise LookupError


def fixed(design: V.Design, rounds: int, noise: str, config: int | None = 1,
          factor: str | None = None) -> Runner:  # fmt: skip
    """The report's two families at alpha each (the code before issue 23)."""
    src = SRC[noise]["boot"]
    target = list(range(len(V.experiment(design, 1, src, np.random.default_rng(0)).levels)))

    def run(rng: np.random.Generator, effect: float) -> Outcome:
        eff = _effect(design, target, config, factor, effect)
        obs = V.experiment(design, rounds, src, rng, eff)
        model = sm.fit(obs)
        fams = [sm.baseline_family(model)]
        if obs.levels[0]:
            fams.append(sm.effects_family(model))
        c = _watched(fams, config, factor)
        diff = any(x.decision == "different" for f in fams for x in f.contrasts)
        hit = c.decision == "different" and c.ratio > 1
        return Outcome(diff, hit, rounds, c.detectable if c.decision != "different" else None)

    return run


def _effect(design: V.Design, configs: list[int], config: int | None, factor: str | None,
            effect: float) -> dict[int, float]:  # fmt: skip
    if effect == 1.0:
        return {}
    if config is not None:
        return {config: effect}
    levels = [dict(zip([n for n, _, _ in design.factors], combo, strict=True))
              for combo in _combos(design)]  # fmt: skip
    first = design.factors[[n for n, _, _ in design.factors].index(factor)][1][0]
    return {i: effect for i in configs if levels[i][factor] != first}


def _combos(design: V.Design) -> list[tuple[object, ...]]:
    import itertools

    return list(itertools.product(*(lv for _, lv, _ in design.factors)))


def adaptive(design: V.Design, max_rounds: int, noise: str, decide: str = "baseline") -> Runner:
    """rounds = "auto" as the run and report did it: precision 2%, futility about the
    precision (no experiment file could set another interest)."""
    src = SRC[noise]["boot"]
    plan = sq.make_plan(max_rounds, 3)

    def run(rng: np.random.Generator, effect: float) -> Outcome:
        eff = {1: effect} if effect != 1.0 else {}
        obs = V.experiment(design, max_rounds, src, rng, eff)
        decided: dict[str, sm.Contrast] = {}
        for r in plan.looks:
            look = sq.decide_at_look(plan, obs.first_rounds(r), decide, 0.02, None, decided)
            decided = look.decided
            if look.stop:
                break
        model = sm.fit(obs.first_rounds(look.rounds))
        level = sq.look_level(plan, look.index)
        fams = [sm.baseline_family(model, level), sm.effects_family(model, level)]
        chosen = look.contrasts()
        other = fams[1] if decide == "baseline" else fams[0]
        diff = any(c.decision == "different" for c in [*chosen, *other.contrasts])
        hit = any(c.config == 1 and c.decision == "different" and c.ratio > 1
                  for c in [*chosen, *fams[0].contrasts])  # fmt: skip
        return Outcome(diff, hit, look.rounds, None)

    return run


def sessions(per_session: int, noise: str, source: str = "boot") -> Runner:
    """`compare BEFORE AFTER`: two back-to-back sessions of one configuration (Welch on
    log TPS between the sessions, as compare did)."""
    src = SRC[noise][source]

    def run(rng: np.random.Generator, effect: float) -> Outcome:
        x = src(2 * per_session, rng)
        before, after = list(x[:per_session]), list(x[per_session:] * effect)
        row = cmp._row({}, before, after, 0.05, 1, None)
        diff = row.decision in ("faster", "slower")
        return Outcome(diff, row.decision == "faster", per_session, None)

    return run


def compare_gate(per_session: int, noise: str, threshold: float = 0.03) -> Runner:
    src = SRC[noise]["boot"]

    def run(rng: np.random.Generator, effect: float) -> Outcome:
        x = src(2 * per_session, rng)
        slow = 2 - effect  # gate rows: the change is a slowdown of that size (-10%, -20%)
        row = cmp._row({}, list(x[:per_session]), list(x[per_session:] * slow), 0.05, 1,
                       threshold)  # fmt: skip
        return Outcome(row.slower_beyond_threshold, row.slower_beyond_threshold, per_session,
                       None)  # fmt: skip

    return run


def against_gate(design: V.Design, rounds: int, noise: str, threshold: float = 0.03) -> Runner:
    """`run --against` then `report --fail-if-slower`: the main effect of run.against
    (its simultaneous interval's upper end below 1 - threshold)."""
    src = SRC[noise]["boot"]
    factor = design.factors[0][0]

    def run(rng: np.random.Generator, effect: float) -> Outcome:
        eff = {1: 2 - effect} if effect != 1.0 else {}
        obs = V.experiment(design, rounds, src, rng, eff)
        c = _watched([sm.effects_family(sm.fit(obs))], None, factor)
        fail = c.high < 1 - threshold
        return Outcome(fail, fail, rounds, None)

    return run


# ---- the table ------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    label: str
    noise: str
    runner: Callable[[], Runner]
    optimism: bool = False  # a fixed design whose printed sensitivity is checked
    gate: bool = False


def spread(design: V.Design, sd: float, rebuild: str) -> V.Design:
    return dataclasses.replace(design, build_sd=sd, rebuild=rebuild,
                               name=f"{design.name} {rebuild} {sd:.0%}")  # fmt: skip


CLUSTER = V.Design("cluster factor", (("scale", (10, 50), True),))
SPLIT = V.Design("2x2 split", (("scale", (10, 50), True), ("b", (1, 2), False)))


def rows() -> list[Row]:
    out: list[Row] = []
    for noise in ("tpcb", "select"):
        out += [
            Row("1 cheap factor, 2 levels, 5 rounds", noise, lambda n=noise: fixed(V.TWO, 5, n),
                True),
            Row("1 cheap factor, 2 levels, 10 rounds", noise,
                lambda n=noise: fixed(V.TWO, 10, n), True),
            Row("1 cheap factor, default (3 rounds)", noise, lambda n=noise: fixed(V.TWO, 3, n),
                True),
            Row("2x2 factorial, 6 rounds", noise, lambda n=noise: fixed(V.TWO_BY_TWO, 6, n), True),
            Row("3x4 factorial, 5 rounds", noise,
                lambda n=noise: fixed(V.THREE_BY_FOUR, 5, n), True),
        ]  # fmt: skip
    for sd in (0.0, 0.01, 0.03):
        for how in ("once", "per_round"):
            d = spread(CLUSTER, sd, how)
            out.append(Row(f"cluster factor, {how}, spread {sd:.0%}, 6 rounds", "tpcb",
                           lambda d=d: fixed(d, 6, "tpcb", None, "scale"), True))  # fmt: skip
    d = spread(SPLIT, 0.03, "once")
    out.append(Row("2x2 split, once, spread 3%, 6 rounds", "tpcb",
                   lambda d=d: fixed(d, 6, "tpcb", None, "scale")))  # fmt: skip
    for n in (5, 10):
        out.append(Row(f"compare, 1 session each side, {n} trials", "tpcb",
                       lambda n=n: sessions(n, "tpcb")))  # fmt: skip
        out.append(Row(f"compare, 1 session each side, {n} trials (rec)", "tpcb",
                       lambda n=n: sessions(n, "tpcb", "rec")))  # fmt: skip
    ag = V.Design("against", (("run.against", ("before", "after"), False),))
    agc = V.Design("against, cluster change", (("run.against", ("before", "after"), True),),
                   build_sd=0.03)  # fmt: skip
    out.append(Row("--against, cheap change, 5 rounds", "tpcb",
                   lambda: fixed(ag, 5, "tpcb", None, "run.against"), True))  # fmt: skip
    out.append(Row("--against, cluster change (3%), 5 rounds", "tpcb",
                   lambda: fixed(agc, 5, "tpcb", None, "run.against"), True))  # fmt: skip
    out.append(Row("gate 3%: --against, 5 rounds", "tpcb", lambda: against_gate(ag, 5, "tpcb"),
                   gate=True))  # fmt: skip
    out.append(Row("gate 3%: compare, 5 trials each", "tpcb", lambda: compare_gate(5, "tpcb"),
                   gate=True))  # fmt: skip
    out.append(Row("gate 3%: compare, 10 trials each", "tpcb", lambda: compare_gate(10, "tpcb"),
                   gate=True))  # fmt: skip
    for design, decide in ((V.TWO, "baseline"), (V.TWO_BY_TWO, "effects"),
                           (V.THREE_BY_FOUR, "baseline")):  # fmt: skip
        for noise in ("tpcb", "select"):
            out.append(Row(f"adaptive {design.name}, {decide}, max 10", noise,
                           lambda d=design, n=noise, k=decide: adaptive(d, 10, n, k)))  # fmt: skip
    return out


def cell(args: tuple[int, float, int, int]) -> list[Outcome]:
    index, effect, reps, seed = args
    runner = rows()[index].runner()
    return [runner(rng, effect) for rng in V.seeds(seed + index, reps)]


POWER_GRID = (1.02, 1.04, 1.07, 1.10, 1.15, 1.2, 1.3, 1.45, 1.7, 2.1, 3.0, 6.0)


def d80(curve: dict[float, float]) -> float:
    """The change found with 80% power, by interpolation in log change."""
    xs = sorted(curve)
    for a, b in zip(xs, xs[1:], strict=False):
        if curve[a] < 0.8 <= curve[b]:
            w = (0.8 - curve[a]) / (curve[b] - curve[a])
            return math.expm1(math.log(a) + w * (math.log(b) - math.log(a)))
    return math.inf if curve[xs[-1]] < 0.8 else xs[0] - 1


def table(reps: int, power_reps: int, workers: int, seed: int) -> list[str]:
    all_rows = rows()
    jobs: dict[tuple[int, float], tuple[int, float, int, int]] = {}
    for i, row in enumerate(all_rows):
        jobs[(i, 1.0)] = (i, 1.0, reps, seed)
        for e in (1.10, 1.20):
            jobs[(i, e)] = (i, e, power_reps, seed + 7)
        if row.optimism:
            for e in POWER_GRID:
                jobs[(i, e)] = (i, e, power_reps, seed + 7)
    with ProcessPoolExecutor(workers) as pool:
        done = dict(zip(jobs, pool.map(cell, jobs.values()), strict=True))
    false = 'false "different"'
    head = (f"{'design':46} {'noise':6} {false:>18} {'+10%':>6} {'+20%':>6} "
            f"{'rounds':>6} {'optimistic':>10}")  # fmt: skip
    lines = [head, "-" * len(head)]
    for i, row in enumerate(all_rows):
        aa = done[(i, 1.0)]
        p = sum(o.different for o in aa) / len(aa)
        se = math.sqrt(max(p * (1 - p), 1e-12) / len(aa))
        power = [sum(o.detected for o in done[(i, e)]) / power_reps for e in (1.10, 1.20)]
        rounds = float(np.mean([o.rounds for o in aa]))
        opt = "-"
        if row.optimism:
            curve = {e: sum(o.detected for o in done[(i, e)]) / power_reps for e in POWER_GRID}
            true80 = d80(curve)
            printed = [o.sensitivity for o in aa if o.sensitivity is not None]
            opt = f"{np.mean([x < true80 for x in printed]):.0%}" if printed else "-"
        lines.append(f"{row.label:46} {row.noise:6} {p:>9.1%} ± {se:5.1%} {power[0]:>6.0%} "
                     f"{power[1]:>6.0%} {rounds:>6.2f} {opt:>10}")  # fmt: skip
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=2000, help="A/A experiments per row")
    ap.add_argument("--power-reps", type=int, default=400, help="experiments per power cell")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=2311)
    args = ap.parse_args()
    t0 = time.time()
    print(f"bench/guarantees: {args.reps} A/A and {args.power_reps} power experiments per "
          f"row, seed {args.seed}, tests/data/noise (moving-block bootstrap; rec = "
          "contiguous stretches of the recording)")  # fmt: skip
    for line in table(args.reps, args.power_reps, args.workers, args.seed):
        print(line)
    print(f"(total {time.time() - t0:.0f} s)")


if __name__ == "__main__":
    main()
