"""Whole experiments simulated over recorded noise, for the unit tests
(tests/unit/test_simulations.py) and bench/verdicts.py, which runs the same simulations
with more repetitions and prints the report. Noise comes from a recording of one
unchanged configuration (a folder of CSV files given by the caller, such as
tests/data/noise), so any difference between "configurations" is noise unless an effect
is injected. Trials take the noise in the order a real plan runs them (pgsweep.plan); a
series is extended by a moving-block bootstrap ("boot"), an AR(1) plus random walk with
the recording's SD and autocorrelation ("synth"), or used as contiguous stretches
("rec"); each cluster build gets a log-normal level. The runners count verdicts: false
or true "different" with fixed rounds, with adaptive looks, at the printed sensitivity,
and per contrast with a cluster (whole-plot) factor."""

from __future__ import annotations

import csv
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy import signal

from ..core import Cost
from ..plan import PlanFactor, make_plan
from .families import Contrast, Family, report_families
from .model import Observations, fit
from .sequential import SequentialPlan, decide_at_look

Source = Callable[[int, np.random.Generator], np.ndarray]


def load(folder: Path, workload: str, column: str = "tps") -> np.ndarray:
    """One column of a recording, `folder`/`workload`.csv, in time order."""
    with open(folder / f"{workload}.csv", newline="") as f:
        return np.array([float(r[column]) for r in csv.DictReader(f)])


def recorded(series: np.ndarray) -> Source:
    def draw(n: int, rng: np.random.Generator) -> np.ndarray:
        if n > len(series):
            raise ValueError(f"{n} trials need more than the {len(series)} recorded runs")
        start = int(rng.integers(0, len(series) - n + 1))
        return series[start : start + n].copy()

    return draw


def bootstrap(series: np.ndarray, block: int = 8) -> Source:
    def draw(n: int, rng: np.random.Generator) -> np.ndarray:
        starts = rng.integers(0, len(series) - block + 1, size=n // block + 1)
        return np.concatenate([series[s : s + block] for s in starts])[:n]

    return draw


def synthetic(series: np.ndarray, drift: float = 0.5) -> Source:
    logs = np.log(series)
    d = logs - logs.mean()
    phi = float(np.sum(d[:-1] * d[1:]) / np.sum(d * d))
    sd = float(logs.std(ddof=1))
    step = drift * sd / math.sqrt(len(series))

    def draw(n: int, rng: np.random.Generator) -> np.ndarray:
        e = rng.normal(0, sd * math.sqrt(1 - phi**2), n)
        e[0] = rng.normal(0, sd)
        x = signal.lfilter([1.0], [1.0, -phi], e)  # x[i] = phi x[i-1] + e[i]
        walk = np.cumsum(rng.normal(0, step, n))
        values: np.ndarray = np.exp(logs.mean() + x + walk - walk[0])
        return values

    return draw


def sources(folder: Path, workload: str, column: str = "tps") -> dict[str, Source]:
    s = load(folder, workload, column)
    return {"boot": bootstrap(s), "synth": synthetic(s), "rec": recorded(s)}


@dataclass(frozen=True)
class Design:
    name: str
    factors: tuple[tuple[str, tuple[Any, ...], bool], ...]  # name, levels, cluster factor
    rebuild: str | int = "per_round"  # as make_plan takes it: "once", "per_round", N rounds
    build_sd: float = 0.03  # instances of one level differ by this (log-normal SD)
    keep_alive: bool = True  # False: one group at a time, as batches

    def whole_plot(self) -> tuple[str, ...]:
        return tuple(n for n, _, wp in self.factors if wp)


TWO = Design("2 configs", (("a", ("off", "on"), False),))
TWO_BY_TWO = Design("2x2", (("a", ("x", "y"), False), ("b", (1, 2), False)))
THREE_BY_FOUR = Design("3x4", (("a", ("x", "y", "z"), False), ("b", (1, 2, 3, 4), False)))
SPLIT = Design("2x2 split", (("scale", (10, 50), True), ("b", (1, 2), False)), "per_round")
SPLIT_ONCE = Design("2x2 split, built once", SPLIT.factors, "once")
CLUSTERS = Design("2 clusters", (("scale", (10, 50), True),), "per_round")
CLUSTERS_ONCE = Design("2 clusters, built once", CLUSTERS.factors, "once")


def experiment(design: Design, rounds: int, source: Source, rng: np.random.Generator,
               effect: dict[int, float] | None = None, decimals: int | None = None
               ) -> Observations:  # fmt: skip
    """One simulated experiment: trials in plan order take consecutive noise values."""
    factors = [PlanFactor(n, lv, Cost.CLUSTER if wp else Cost.NOTHING)
               for n, lv, wp in design.factors]  # fmt: skip
    plan = make_plan(factors, rounds, int(rng.integers(2**31)), design.rebuild,
                     design.keep_alive)  # fmt: skip
    index = {c.id: i for i, c in enumerate(plan.configurations)}
    noise = source(len(plan.trials), rng)
    values = np.empty((len(plan.configurations), rounds))
    builds: dict[tuple[int, ...], float] = {}
    for t in plan.trials:
        i = index[t.config]
        key = (plan.configurations[i].group, plan.period(t.round))  # one instance
        level = builds.setdefault(key, float(rng.normal(0, design.build_sd)))
        wp = math.exp(level) if design.whole_plot() else 1.0
        values[i, t.round - 1] = noise[t.order - 1] * wp * (effect or {}).get(i, 1.0)
    if decimals is not None:
        values = np.round(values, decimals)
    levels = [dict(c.levels) for c in plan.configurations]
    every = plan.rebuild_every if plan.keep_alive else 1
    return Observations(values, levels, 0, True, design.whole_plot(), every)


def seeds(seed: int, reps: int) -> Iterator[np.random.Generator]:
    for s in np.random.SeedSequence(seed).spawn(reps):
        yield np.random.default_rng(s)


def fixed(design: Design, rounds: int, source: Source, reps: int, seed: int,
          effect: dict[int, float] | None = None,
          also: Mapping[str, Callable[[Observations], bool]] | None = None
          ) -> dict[str, float]:  # fmt: skip
    """Share of experiments with any "different" verdict, per family and in the report
    (both families, judged together as the report does), and ("paired") with pooling
    refused; `also` judges the same experiments by other methods, by name."""
    others = dict(also or {})
    n = {"baseline": 0, "effects": 0, "report": 0, **dict.fromkeys(others, 0), "paired": 0}
    for rng in seeds(seed, reps):
        obs = experiment(design, rounds, source, rng, effect)
        model = fit(obs)
        n["paired"] += not model.pooled
        fams = report_families(model)
        hit = [any(c.decision == "different" for c in f.contrasts) for f in fams]
        n["baseline"] += hit[0]
        n["effects"] += hit[1]
        n["report"] += any(hit)
        for name, different in others.items():
            n[name] += different(obs)
    return {k: v / reps for k, v in n.items()}


def adaptive(design: Design, plan: SequentialPlan, source: Source, reps: int, seed: int,
             decide: str = "baseline", effect: dict[int, float] | None = None,
             precision: float = 0.02, interest: float = 0.10) -> dict[str, Any]:  # fmt: skip
    """Looks at every planned round, decisions carried from look to look; counts the
    experiments with any "different" (at any look), the rounds used and why they stopped."""
    found, detected, used, reasons = 0, 0, [], []
    for rng in seeds(seed, reps):
        obs = experiment(design, plan.max_rounds, source, rng, effect)
        decided: dict[str, Contrast] = {}
        for r in plan.looks:
            look = decide_at_look(plan, obs.first_rounds(r), decide, precision, interest,
                                     decided)  # fmt: skip
            decided = look.decided
            if look.stop:
                break
        diff = [c for c in look.contrasts() if c.decision == "different"]
        found += bool(diff)
        detected += any(c.config in (effect or {}) and c.ratio > 1 for c in diff)
        used.append(look.rounds)
        reasons.append(look.reason.split(":")[0])
    return {"different": found / reps, "detected": detected / reps,
            "rounds": float(np.mean(used)), "used": used, "reasons": reasons}  # fmt: skip


def power_at_printed(design: Design, rounds: int, source: Source, reps: int, seed: int,
                     config: int = 1) -> dict[str, float]:  # fmt: skip
    """Take the sensitivity printed for `config` against the baseline in an A/A experiment,
    inject exactly that change into (a) a fresh experiment, (b) the same noise, and count
    how often it is called different (in the right direction)."""
    printed, fresh, same = [], 0, 0
    for rng in seeds(seed, reps):
        state = int(rng.integers(2**62))
        aa = experiment(design, rounds, source, np.random.default_rng(state))
        c = _pick(report_families(fit(aa))[0], config)
        printed.append(c.detectable)
        bump = {config: 1 + c.detectable}
        for name, s in (("fresh", state + 1), ("same", state)):
            obs = experiment(design, rounds, source, np.random.default_rng(s), bump)
            hit = _pick(report_families(fit(obs))[0], config)
            ok = hit.decision == "different" and hit.ratio > 1
            fresh, same = (fresh + ok, same) if name == "fresh" else (fresh, same + ok)
    return {"printed": float(np.median(printed)), "fresh": fresh / reps, "same": same / reps}


def _pick(family: Family, config: int) -> Contrast:
    return next(c for c in family.contrasts if c.config == config)


def whole_plot(design: Design, rounds: int, source: Source, reps: int, seed: int
               ) -> dict[str, Any]:  # fmt: skip
    """A/A on a design with a cluster factor: how often each effect is called different,
    with the error term and replicates the model gave it."""
    hits: dict[str, int] = {}
    info: dict[str, tuple[str, int]] = {}
    for rng in seeds(seed, reps):
        fam = report_families(fit(experiment(design, rounds, source, rng)))[1]
        for c in fam.contrasts:
            hits[c.label] = hits.get(c.label, 0) + (c.decision == "different")
            info[c.label] = (c.error, c.replicates)
    return {k: (v / reps, *info[k]) for k, v in hits.items()}


def fleet(design: Design, rounds: int, groups: int, source: Source, reps: int, seed: int,
          offset_sd: float = 0.10, noise_spread: float = 0.0,
          effect: dict[tuple[int, int], float] | None = None,
          fact_of_group: tuple[str, ...] = ()) -> dict[str, float]:  # fmt: skip
    """A/A (or A/B with `effect`: (configuration, group from 0) -> ratio) over a fleet: the
    plan sharded over `groups` host groups; each group draws its own noise stream (its own
    machine), moved by a log-normal offset of SD `offset_sd` and, with `noise_spread`, its
    noise scaled by exp(N(0, noise_spread)). Counts experiments with any "different" in
    the report's families, with the configuration x group test saying "differs", with a
    group named as disagreeing, and ("naive") with a t test on all trials of the first two
    configurations that ignores rounds and groups. With `fact_of_group` (group from 0 ->
    its value of a host fact), also ("fact") the configuration x fact test saying
    "depends"."""
    from scipy import stats as sps

    from .facts import fact_tests
    from .groups import interaction

    factors = [PlanFactor(n, lv, Cost.CLUSTER if wp else Cost.NOTHING)
               for n, lv, wp in design.factors]  # fmt: skip
    n = {"report": 0, "baseline": 0, "interaction": 0, "named": 0, "naive": 0, "fact": 0}
    facts = {f"g{g + 1}": {"fact": v} for g, v in enumerate(fact_of_group)}
    for rng in seeds(seed, reps):
        plan = make_plan(factors, rounds, int(rng.integers(2**31)), design.rebuild,
                         design.keep_alive, shards=groups)  # fmt: skip
        index = {c.id: i for i, c in enumerate(plan.configurations)}
        values = np.empty((len(plan.configurations), rounds))
        group_of = [""] * rounds
        for g in range(groups):
            mine = plan.shard_trials(g + 1)
            logs = np.log(source(len(mine), rng))
            scale = math.exp(rng.normal(0, noise_spread)) if noise_spread else 1.0
            logs = logs.mean() + scale * (logs - logs.mean()) + rng.normal(0, offset_sd)
            for t, v in zip(mine, logs, strict=True):
                i = index[t.config]
                values[i, t.round - 1] = math.exp(v) * (effect or {}).get((i, g), 1.0)
                group_of[t.round - 1] = f"g{g + 1}"
        levels = [dict(c.levels) for c in plan.configurations]
        obs = Observations(values, levels, 0, True, design.whole_plot(), plan.rebuild_every,
                           tuple(plan.period(r) for r in range(1, rounds + 1)))  # fmt: skip
        fams = report_families(fit(obs))
        hit = [any(c.decision == "different" for c in f.contrasts) for f in fams]
        n["baseline"] += hit[0]
        n["report"] += any(hit)
        test = interaction(obs, group_of)
        n["interaction"] += test.differs
        n["named"] += bool(test.disagree)
        n["naive"] += float(sps.ttest_ind(values[0], values[1]).pvalue) < 0.05
        if facts:
            n["fact"] += any(t.depends for t in fact_tests(obs, group_of, facts))
    return {k: v / reps for k, v in n.items()}
