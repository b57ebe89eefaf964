#!/usr/bin/env python3
"""bench/guarantees: one table of what pgsweep's verdicts guarantee, design by design.

Whole experiments are simulated over the noise recorded on this machine
(tests/data/noise: 60 back-to-back 10 s pgbench runs of one unchanged configuration,
tpcb-like and select-only), extended by a moving-block bootstrap (blocks of 8 runs, which
keeps the lag-1 autocorrelation of 0.63 inside blocks); "rec" rows take contiguous
stretches of the recording itself (few distinct stretches: indicative). Trials take the
noise in the order the real planner (pgsweep.plan.make_plan) runs them, rebuild schedule
and batch order included; every instance of a whole-plot level gets a log-normal level of
SD `spread`. Each experiment is judged by the real verdict code: the report's families
on one budget (verdict.report_families), the adaptive looks (verdict.sequential), the
sessions of `compare` (compare._row), the gates' one-sided bound
(verdict.sessions.one_sided_bound). Columns:

- false "different": share of A/A experiments (nothing differs) with any "different"
  verdict among the report's verdicts on TPS (gate rows: the gate failed), with its
  Monte-Carlo SE;
- +10% / +20%: power: share of experiments where a true change of that size (on the
  configuration, level or side shown) is called "faster" (gate rows: a true slowdown of
  10% / 20% fails the gate); "-" where the design gives no verdict;
- rounds: mean rounds run (A/A; sessions: trials per session);
- optimistic: share of A/A experiments whose line "differences above X% would have been
  detected with 80% power" names an X the design does not detect with 80% power (X below
  the change found in 80% of experiments of the same design, by simulation).

A second table sets adaptive rounds beside fixed designs: power at the adaptive run's mean
rounds (interpolated), and the rounds a fixed design needs for the adaptive power.

Run: .venv/bin/python bench/guarantees.py [--reps N] [--power-reps N] [--workers N]
(about 25 minutes on 2 cores at the defaults; --reps 200 --power-reps 100 for a look).
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse
import dataclasses
import itertools
import math
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np

from pgsweep import verdict as sm
from pgsweep.analysis import compare as cmp
from pgsweep.spec.rounds import LOOKS_COST
from pgsweep.verdict import noise as nz
from pgsweep.verdict import power as pw
from pgsweep.verdict import sequential as sq
from pgsweep.verdict import sessions as ss
from pgsweep.verdict import simulate as V

NOISE = Path(__file__).resolve().parents[1] / "tests" / "data" / "noise"
SRC = {w: V.sources(NOISE, w) for w in ("tpcb", "select")}
WORKLOAD = {"tpcb": "tpcb-like", "select": "select-only"}


@dataclass
class Outcome:
    different: bool  # any "different" (gate rows: the gate failed)
    detected: bool  # the change called faster (gate rows: the gate failed)
    rounds: int
    sensitivity: float | None  # the printed "differences above X%" of the watched contrast
    verdict: bool = True  # the watched comparison can be a verdict at all


Runner = Callable[[np.random.Generator, float], Outcome]


def _watched(fams: tuple[sm.Family, ...], config: int | None,
             factor: str | None) -> sm.Contrast:  # fmt: skip
    for f in fams:
        for c in f.contrasts:
            if config is not None and c.config == config:
                return c
            if factor is not None and c.kind == "main" and c.terms[0][0] == factor:
                return c
    raise LookupError


def _effect(design: V.Design, config: int | None, factor: str | None,
            effect: float) -> dict[int, float]:  # fmt: skip
    if effect == 1.0:
        return {}
    if config is not None:
        return {config: effect}
    names = [n for n, _, _ in design.factors]
    combos = list(itertools.product(*(lv for _, lv, _ in design.factors)))
    first = design.factors[names.index(str(factor))][1][0]
    return {i: effect for i, c in enumerate(combos) if c[names.index(str(factor))] != first}


def fixed(design: V.Design, rounds: int, noise: str, config: int | None = 1,
          factor: str | None = None, source: str = "boot") -> Runner:  # fmt: skip
    """A fixed number of rounds, judged as the report judges it."""
    src = SRC[noise][source]

    def run(rng: np.random.Generator, effect: float) -> Outcome:
        obs = V.experiment(design, rounds, src, rng, _effect(design, config, factor, effect))
        fams = sm.report_families(sm.fit(obs), effects=bool(obs.levels[0]))
        c = _watched(fams, config, factor)
        diff = any(x.decision == "different" for f in fams for x in f.contrasts)
        hit = c.decision == "different" and c.ratio > 1
        printed = c.detectable if c.decision in ("undecided", "equivalent") else None
        return Outcome(diff, hit, rounds, printed, c.decision != "unreplicated")

    return run


def default_max(design: V.Design, noise: str) -> int:
    """max_rounds as spec.rounds.settle_max_rounds sets it (no budget limit here)."""
    n = math.prod(len(lv) for _, lv, _ in design.factors)
    sigma, _ = nz.recorded(WORKLOAD[noise]).at(n)
    need = pw.rounds_needed(sigma, 0.10, n, max_rounds=50)
    return min(50, math.ceil(LOOKS_COST * need)) if need else 50


def adaptive(design: V.Design, max_rounds: int, noise: str, decide: str = "baseline",
             factor: str | None = None) -> Runner:  # fmt: skip
    """rounds = "auto" as the run and the report do it: a look after every round from 3,
    futility and the early stop about a 10% interest, the report's families at the last
    look's level with the decided contrasts kept. The change is on configuration 2, or on
    every configuration at the second level of `factor` (decide = "effects")."""
    src = SRC[noise]["boot"]
    plan = sq.make_plan(max_rounds, 3)
    config = None if factor else 1

    def run(rng: np.random.Generator, effect: float) -> Outcome:
        obs = V.experiment(design, max_rounds, src, rng, _effect(design, config, factor, effect))
        decided: dict[str, sm.Contrast] = {}
        for r in plan.looks:
            look = sq.decide_at_look(plan, obs.first_rounds(r), decide, 0.02, 0.10, decided)
            decided = look.decided
            if look.stop:
                break
        model = sm.fit(obs.first_rounds(look.rounds))
        fams = sm.report_families(model, sq.look_level(plan, look.index), 0.02,
                                  effects=bool(obs.levels[0]))  # fmt: skip
        kept = {c.label: c for c in look.contrasts()}
        every = [kept.get(c.label, c) for f in fams for c in f.contrasts]
        diff = any(c.decision == "different" for c in every)
        watched = _watched((sm.Family("", 0, "", True, None, every, []),), config, factor)
        hit = watched.decision == "different" and watched.ratio > 1
        return Outcome(diff, hit, look.rounds, None)

    return run


def sessions(per_session: int, noise: str, order: str, source: str = "boot") -> Runner:
    """`compare`: back-to-back sessions of one configuration in the `order` given (C a
    calibration session, B before, A after; each `per_session` trials), judged on session
    means as compare judges them (blocks in time: every B before every A)."""
    src = SRC[noise][source]
    blocked = order.rindex("B") < order.index("A")

    def run(rng: np.random.Generator, effect: float) -> Outcome:
        x = src(len(order) * per_session, rng).reshape(len(order), per_session)
        pick = {k: [list(x[i]) for i, o in enumerate(order) if o == k] for k in "CBA"}
        row = cmp._row({}, pick["B"], [[v * effect for v in s] for s in pick["A"]], pick["C"],
                       0.05, 1, None, blocked)  # fmt: skip
        diff = row.decision in ("faster", "slower")
        return Outcome(diff, row.decision == "faster", per_session, None,
                       row.decision != "drift not measured")  # fmt: skip

    return run


def compare_gate(per_session: int, noise: str, calibration: int,
                 threshold: float = 0.03) -> Runner:  # fmt: skip
    src = SRC[noise]["boot"]

    def run(rng: np.random.Generator, effect: float) -> Outcome:
        n = calibration + 2  # C..C B A
        x = src(n * per_session, rng).reshape(n, per_session)
        slow = 2 - effect  # gate rows: a slowdown of that size (-10%, -20%)
        row = cmp._row({}, [list(x[-2])], [list(x[-1] * slow)], [list(v) for v in x[:-2]],
                       0.05, 1, threshold)  # fmt: skip
        fail = row.slower_beyond_threshold
        return Outcome(fail, fail, per_session, None, row.decision != "drift not measured")

    return run


def against_gate(design: V.Design, rounds: int, noise: str, threshold: float = 0.03) -> Runner:
    """`run --against` then `report --fail-if-slower`: the main effect of run.against, its
    one-sided upper bound below 1 - threshold (compare.within_run_gate)."""
    src = SRC[noise]["boot"]
    factor = design.factors[0][0]

    def run(rng: np.random.Generator, effect: float) -> Outcome:
        obs = V.experiment(design, rounds, src, rng, {1: 2 - effect} if effect != 1.0 else {})
        c = _watched(sm.report_families(sm.fit(obs)), None, factor)
        fail = ss.one_sided_bound(c.ratio, c.se, c.df, 0.05, 1) < 1 - threshold
        return Outcome(fail, fail, rounds, None)

    return run


# ---- the table ------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    label: str
    noise: str
    runner: Callable[[], Runner]
    optimism: bool = False  # a fixed design whose printed sensitivity is checked
    # compared with fixed designs: design, noise, max rounds, the factor the change is on
    adaptive: tuple[V.Design, str, int, str | None] | None = None


def spread(design: V.Design, sd: float, rebuild: str | int, keep_alive: bool = True) -> V.Design:
    return dataclasses.replace(design, build_sd=sd, rebuild=rebuild, keep_alive=keep_alive)


CLUSTER = V.Design("cluster factor", (("scale", (10, 50), True),))
SPLIT = V.Design("2x2 split", (("scale", (10, 50), True), ("b", (1, 2), False)))
AGAINST = V.Design("against", (("run.against", ("before", "after"), False),))
AGAINST_CLUSTER = V.Design("against, cluster change", (("run.against", ("before", "after"),
                                                        True),))  # fmt: skip


def rows() -> list[Row]:
    out: list[Row] = []
    for noise in ("tpcb", "select"):
        for r in (3, 5, 10):
            out.append(Row(f"1 cheap factor, 2 levels, {r} rounds", noise,
                           lambda n=noise, r=r: fixed(V.TWO, r, n), True))  # fmt: skip
        m = default_max(V.TWO, noise)
        out.append(Row(f"1 cheap factor, default policy (auto, max {m})", noise,
                       lambda n=noise, m=m: adaptive(V.TWO, m, n),
                       adaptive=(V.TWO, noise, m, None)))  # fmt: skip
        out.append(Row("2x2 factorial, 6 rounds", noise,
                       lambda n=noise: fixed(V.TWO_BY_TWO, 6, n), True))  # fmt: skip
        out.append(Row("3x4 factorial, 5 rounds", noise,
                       lambda n=noise: fixed(V.THREE_BY_FOUR, 5, n), True))  # fmt: skip
    for how, keep, words in (("once", True, "built once"), (1, True, "rebuilt every round"),
                             (2, True, "rebuilt every 2 rounds"),
                             (1, False, "batches")):  # fmt: skip
        for sd in (0.0, 0.01, 0.03):
            d = spread(CLUSTER, sd, how, keep)
            out.append(Row(f"cluster factor, {words}, spread {sd:.0%}, 6 rds", "tpcb",
                           lambda d=d: fixed(d, 6, "tpcb", None, "scale"), True))  # fmt: skip
    for how, words in ((1, "rebuilt every round"), ("once", "built once")):
        d = spread(SPLIT, 0.03, how)
        out.append(Row(f"2x2 split, {words}, spread 3%, 6 rounds", "tpcb",
                       lambda d=d: fixed(d, 6, "tpcb", None, "scale")))  # fmt: skip
    for n in (5, 10):
        for source in ("boot", "rec"):
            tag = " (rec)" if source == "rec" else ""
            for order in ("BA", "BBAA", "BABA", "CCBA", "CCCBA"):
                out.append(Row(f"compare {order}, {n} trials{tag}", "tpcb",
                               partial(sessions, n, "tpcb", order, source)))  # fmt: skip
    out.append(Row("--against, cheap change, 5 rounds", "tpcb",
                   lambda: fixed(AGAINST, 5, "tpcb", None, "run.against"), True))  # fmt: skip
    for how, words in ((1, "default: rebuilt every round"), ("once", "built once")):
        d = spread(AGAINST_CLUSTER, 0.03, how)
        out.append(Row(f"--against, cluster change, {words}, 3%", "tpcb",
                       lambda d=d: fixed(d, 5, "tpcb", None, "run.against")))  # fmt: skip
    for r in (4, 5, 10):
        out.append(Row(f"gate 3%: --against, {r} rounds", "tpcb",
                       lambda r=r: against_gate(AGAINST, r, "tpcb")))  # fmt: skip
    out.append(Row("gate 3%: compare, 5 trials, no calibration", "tpcb",
                   lambda: compare_gate(5, "tpcb", 0)))  # fmt: skip
    out.append(Row("gate 3%: compare, 5 trials, calibration of 3", "tpcb",
                   lambda: compare_gate(5, "tpcb", 3)))  # fmt: skip
    for design, decide, factor in ((V.TWO, "baseline", None), (V.TWO_BY_TWO, "effects", "b"),
                                   (V.THREE_BY_FOUR, "baseline", None)):  # fmt: skip
        for noise in ("tpcb", "select"):
            out.append(Row(f"adaptive {design.name}, {decide}, max 10", noise,
                           lambda d=design, n=noise, k=decide, f=factor: adaptive(d, 10, n, k, f),
                           adaptive=(design, noise, 10, factor)))  # fmt: skip
    return out


def cell(args: tuple[int, float, int, int]) -> list[Outcome]:
    index, effect, reps, seed = args
    runner = rows()[index].runner()
    return [runner(rng, effect) for rng in V.seeds(seed + index, reps)]


def fixed_cell(args: tuple[V.Design, str, int, float, int, int, str | None]) -> float:
    """Power of a fixed design of `rounds` rounds (for the adaptive comparison)."""
    design, noise, rounds, effect, reps, seed, factor = args
    run = fixed(design, rounds, noise, None if factor else 1, factor)
    return sum(run(rng, effect).detected for rng in V.seeds(seed + rounds, reps)) / reps


POWER_GRID = (1.02, 1.04, 1.07, 1.10, 1.15, 1.2, 1.3, 1.45, 1.7, 2.1, 3.0, 6.0)
EFFECTS = (1.10, 1.20)


def d80(curve: dict[float, float]) -> float:
    """The change found with 80% power, by interpolation in log change."""
    xs = sorted(curve)
    for a, b in itertools.pairwise(xs):
        if curve[a] < 0.8 <= curve[b]:
            w = (0.8 - curve[a]) / (curve[b] - curve[a])
            return math.expm1(math.log(a) + w * (math.log(b) - math.log(a)))
    return math.inf if curve[xs[-1]] < 0.8 else xs[0] - 1


def _at(curve: dict[int, float], rounds: float) -> float:
    lo = min(max(math.floor(rounds), min(curve)), max(curve) - 1)
    return curve[lo] + (rounds - lo) * (curve[lo + 1] - curve[lo])


def _equal(curve: dict[int, float], power: float) -> float | None:
    """Fixed rounds (interpolated) whose power reaches `power`."""
    for r in sorted(curve)[1:]:
        if curve[r] >= power:
            below = curve[r - 1]
            return r - 1 + (power - below) / (curve[r] - below) if curve[r] > below else r
    return None


def table(reps: int, power_reps: int, workers: int, seed: int) -> list[str]:
    all_rows = rows()
    jobs: dict[tuple[int, float], tuple[int, float, int, int]] = {}
    curves: dict[tuple[str, str, int, float], tuple[V.Design, str, int, float, int, int,
                                                    str | None]] = {}  # fmt: skip
    for i, row in enumerate(all_rows):
        jobs[(i, 1.0)] = (i, 1.0, reps if row.adaptive is None else reps // 2, seed)
        for e in EFFECTS:
            jobs[(i, e)] = (i, e, power_reps, seed + 7)
        if row.optimism:
            for e in POWER_GRID:
                jobs[(i, e)] = (i, e, power_reps, seed + 7)
        if row.adaptive is not None:
            design, noise, top, factor = row.adaptive
            for e in EFFECTS:
                for r in range(2, top + 8):
                    curves[(design.name, noise, r, e)] = (design, noise, r, e, power_reps,
                                                         seed + 11, factor)  # fmt: skip
    with ProcessPoolExecutor(workers) as pool:
        done = dict(zip(jobs, pool.map(cell, jobs.values()), strict=True))
        fixed_power = dict(zip(curves, pool.map(fixed_cell, curves.values()), strict=True))
    false = 'false "different"'
    head = (f"{'design':56} {'noise':6} {false:>17} {'+10%':>5} {'+20%':>5} "
            f"{'rounds':>6} {'optimistic':>10}")  # fmt: skip
    lines = [head, "-" * len(head)]
    extra = []
    for i, row in enumerate(all_rows):
        aa = done[(i, 1.0)]
        p = sum(o.different for o in aa) / len(aa)
        se = math.sqrt(max(p * (1 - p), 1e-12) / len(aa))
        power = [sum(o.detected for o in done[(i, e)]) / power_reps for e in EFFECTS]
        shown = [f"{x:.0%}" if any(o.verdict for o in done[(i, e)]) else "-"
                 for x, e in zip(power, EFFECTS, strict=True)]  # fmt: skip
        rounds = float(np.mean([o.rounds for o in aa]))
        opt = "-"
        if row.optimism:
            curve = {e: sum(o.detected for o in done[(i, e)]) / power_reps for e in POWER_GRID}
            true80 = d80(curve)
            printed = [o.sensitivity for o in aa if o.sensitivity is not None]
            opt = f"{np.mean([x < true80 for x in printed]):.0%}" if printed else "-"
        lines.append(f"{row.label:56} {row.noise:6} {p:>8.1%} ± {se:4.1%} {shown[0]:>5} "
                     f"{shown[1]:>5} {rounds:>6.2f} {opt:>10}")  # fmt: skip
        if row.adaptive is not None:
            design, noise, _, _ = row.adaptive
            for e, pa in zip(EFFECTS, power, strict=True):
                curve = {r: v for (n, w, r, x), v in fixed_power.items()
                         if (n, w, x) == (design.name, noise, e)}  # fmt: skip
                mean = float(np.mean([o.rounds for o in done[(i, e)]]))
                equal = _equal(curve, pa)
                saved = f"{1 - mean / equal:.0%}" if equal else "-"
                at = _at(curve, mean)
                extra.append(f"{row.label:56} {noise:6} +{e - 1:.0%} {pa:>9.0%} {mean:>7.2f} "
                             f"{at:>9.0%} {equal or math.nan:>9.2f} {saved:>6}")  # fmt: skip
    head2 = (f"{'adaptive design':56} {'noise':6} {'true':>4} {'adaptive':>9} {'rounds':>7} "
             f"{'fixed@same':>9} {'fixed R=':>9} {'saved':>6}")  # fmt: skip
    return [*lines, "", "Adaptive rounds against fixed designs (same noise, same change): "
            "power, mean rounds run; a fixed design's power at those rounds; the rounds a "
            "fixed design needs for the adaptive power, and the rounds saved", head2,
            "-" * len(head2), *extra]  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=2000, help="A/A experiments per row")
    ap.add_argument("--power-reps", type=int, default=400, help="experiments per power cell")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=2311)
    args = ap.parse_args()
    t0 = time.time()
    print(f"bench/guarantees: {args.reps} A/A experiments per row ({args.reps // 2} adaptive), "
          f"{args.power_reps} per power cell, seed {args.seed}, tests/data/noise "
          "(moving-block bootstrap; rec = contiguous stretches of the recording)")  # fmt: skip
    for line in table(args.reps, args.power_reps, args.workers, args.seed):
        print(line)
    print(f"(total {time.time() - t0:.0f} s)")


if __name__ == "__main__":
    main()
