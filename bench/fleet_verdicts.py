#!/usr/bin/env python3
"""bench/fleet_verdicts: do the verdicts of a sharded run (host groups as blocks) lie?

Whole fleet experiments simulated over the noise recorded on this machine
(tests/data/noise, 60 x 10 s runs of one unchanged configuration; "boot" = moving-block
bootstrap, "synth" = AR(1) + random walk, as bench/verdicts.py). The plan is sharded over
G host groups (pgsweep.plan: each group runs complete, contiguous rounds); each group
draws its own noise stream (its own machine), moved by a simulated host-to-host offset
(log-normal, SD `offset`) and, in the "spread" rows, its noise level scaled by a factor
exp(N(0, 0.3)) (machines unlike in noise as well as in speed).

Printed per cell (share of simulated experiments):
- report: any false "different" among the report's verdicts (target <= 5%);
- x group: the configuration x group test says "the effect differs between groups"
  (target <= 5%), and "named": it names a group that disagrees;
- naive: a t test on all trials of two configurations, rounds and groups ignored.
Then power with a real +10% change on every group (report and naive), and with +25% on
group 1 only (x group, named); then the configuration x fact test (verdict/facts).

Run: .venv/bin/python bench/fleet_verdicts.py [--reps N]
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # the machine's cores run benchmarks

import argparse
import time
from pathlib import Path

import numpy as np

from pgsweep.verdict.simulate import TWO, TWO_BY_TWO, Design, fleet, load, sources

NOISE = Path(__file__).resolve().parents[1] / "tests" / "data" / "noise"


def row(label: str, r: dict[str, float], keys: tuple[str, ...]) -> str:
    return f"{label:<38}" + "".join(f"{r[k]:>10.1%}" for k in keys)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=20261125)
    args = ap.parse_args()
    start = time.time()
    print(f"bench/fleet_verdicts: seed {args.seed}, {args.reps} simulated experiments per cell")
    for wl in ("tpcb", "select"):
        s = np.log(load(NOISE, wl))
        print(f"  {wl}: SD of log TPS {s.std(ddof=1):.1%}")
    keys = ("report", "interaction", "named", "naive")
    print("\n1. A/A: share of experiments with a false finding (target <= 5%)")
    print(f"{'design, groups x rounds, noise, offset':<38}" + "".join(f"{k:>10}" for k in
                                                                     ("report", "x group",
                                                                      "named", "naive")))
    cells: list[tuple[Design, int, int]] = [(TWO, 2, 6), (TWO, 3, 6), (TWO, 3, 9),
                                            (TWO_BY_TWO, 3, 6)]  # fmt: skip
    for wl in ("tpcb", "select"):
        src = sources(NOISE, wl)
        for design, groups, rounds in cells:
            for name in ("boot", "synth"):
                for offset in (0.0, 0.05, 0.30):
                    r = fleet(design, rounds, groups, src[name], args.reps, args.seed,
                              offset_sd=offset)  # fmt: skip
                    label = f"{design.name}, {groups}x{rounds // groups}, {wl} {name}, {offset:.0%}"
                    print(row(label, r, keys))
            r = fleet(design, rounds, groups, src["boot"], args.reps, args.seed, offset_sd=0.3,
                      noise_spread=0.3)  # fmt: skip
            print(row(f"{design.name}, {groups}x{rounds // groups}, {wl} boot, 30%, spread", r,
                      keys))  # fmt: skip
    print("\n2. Power: +10% on every group (report, naive); +25% on group 1 only (x group, "
          "named), 30% offsets")  # fmt: skip
    for wl in ("tpcb", "select"):
        src = sources(NOISE, wl)
        for groups, rounds in ((3, 6), (3, 9)):
            every = {(1, g): 1.10 for g in range(groups)}
            a = fleet(TWO, rounds, groups, src["boot"], args.reps, args.seed, 0.3, effect=every)
            one = fleet(TWO, rounds, groups, src["boot"], args.reps, args.seed, 0.3,
                        effect={(1, 0): 1.25})  # fmt: skip
            print(f"2 configs, {groups}x{rounds // groups}, {wl} boot: report {a['report']:.1%}, "
                  f"naive {a['naive']:.1%}; x group {one['interaction']:.1%}, named "
                  f"{one['named']:.1%}")  # fmt: skip
    print("\n3. A host fact as a factor (verdict/facts): configuration x fact, two values of "
          "two groups each (4x2), 30% offsets: false \"depends\" under A/A; with +30% on one "
          "value's groups; with +30% on one machine only (not the fact's doing)")  # fmt: skip
    halves = ("a", "a", "b", "b")
    for wl in ("tpcb", "select"):
        for name, src_ in sources(NOISE, wl).items():
            aa = fleet(TWO, 8, 4, src_, args.reps, args.seed, 0.3, fact_of_group=halves)
            on = fleet(TWO, 8, 4, src_, args.reps, args.seed, 0.3, fact_of_group=halves,
                       effect={(1, 2): 1.3, (1, 3): 1.3})  # fmt: skip
            one = fleet(TWO, 8, 4, src_, args.reps, args.seed, 0.3, fact_of_group=halves,
                        effect={(1, 2): 1.3})  # fmt: skip
            print(f"{wl} {name}: A/A {aa['fact']:.1%}; on the fact {on['fact']:.1%}; one "
                  f"machine {one['fact']:.1%}")  # fmt: skip
    print(f"\n{time.time() - start:.0f} s")


if __name__ == "__main__":
    main()
