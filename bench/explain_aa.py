#!/usr/bin/env python3
"""bench/explain_aa: does an explain panel (analysis.explain) call figures "different" that
did not change?

Input: a real A/A run (two configurations that differ in nothing that matters: by
default tests/data/explain/aa, `server.statement_timeout = ["0", "1h"]`, tpcb-like at
scale 1, 12 rounds of 3 s trials on this 2-core VM), every explain figure collected.
Each simulated experiment draws K of its rounds at random and, in each drawn round,
swaps the two configurations' labels with probability 1/2 (any difference is noise), then
judges the panel exactly as a report does (analysis.explain.judge: the verdicts' model,
Bonferroni over the panel's m figures). Printed per K:

- panel: share of experiments whose panel shows any "different" (target <= 5%);
- rows: share of all judged rows called "different" (per figure, target <= 5%/m);
- m: the mean family size;
- power: share of experiments that call "different" a real change injected into one
  figure of one configuration: client backends' CPU / tx x 1.5, and client backends'
  time on CPU +25 points of session time.

Run: .venv/bin/python bench/explain_aa.py [--reps N] [--folder DIR]
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # the machine's cores run benchmarks

import argparse
import time
from pathlib import Path

import numpy as np

from pgsweep.analysis.explain import Design, judge
from pgsweep.analysis.explain_data import Metric, per_trial
from pgsweep.store import Results

AA = Path(__file__).resolve().parents[1] / "tests" / "data" / "explain" / "aa"
Table = dict[str, dict[str, dict[int, float]]]


def load(folder: Path) -> tuple[Table, dict[str, Metric], Design, list[int]]:
    with Results(folder) as results:
        values, known = per_trial(results)
        where = {t.id: (t.config_id, t.round) for t in results.trials(ok_only=True)}
        design = Design({c.id: c.levels for c in results.configurations()})
    table: Table = {k: {} for k in known}
    for tid, per in values.items():
        cid, r = where[tid]
        for k, v in per.items():
            table[k].setdefault(cid, {})[r] = v
    return table, known, design, sorted({r for _, r in where.values()})


def draw(table: Table, rounds: list[int], k: int,
         rng: np.random.Generator) -> tuple[Table, list[int]]:  # fmt: skip
    """K rounds at random, the labels of the two configurations swapped in about half."""
    chosen = sorted(rng.choice(rounds, size=k, replace=False).tolist())
    swap = {r: bool(rng.integers(2)) for r in chosen}
    out: Table = {}
    for key, by in table.items():
        a, b = by.get("c01", {}), by.get("c02", {})
        out[key] = {"c01": {}, "c02": {}}
        for r in chosen:
            x, y = (b, a) if swap[r] else (a, b)
            if r in x:
                out[key]["c01"][r] = x[r]
            if r in y:
                out[key]["c02"][r] = y[r]
    return out, chosen


def inject(table: Table, key: str, change: float, share: bool) -> Table:
    out = dict(table)
    by = {c: dict(v) for c, v in table[key].items()}
    by["c02"] = {r: (min(v + change, 1.0) if share else v * change) for r, v in by["c02"].items()}
    out[key] = by
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=400)
    ap.add_argument("--seed", type=int, default=20261126)
    ap.add_argument("--folder", type=Path, default=AA)
    args = ap.parse_args()
    started = time.time()
    table, known, design, rounds = load(args.folder)
    print(f"bench/explain_aa: {args.folder}, {len(rounds)} rounds, {len(known)} explain figures "
          f"recorded; seed {args.seed}, {args.reps} simulated experiments per row")
    print(f"{'rounds K':<10}{'panel':>8}{'rows':>8}{'m':>6}{'power CPU x1.5':>16}"
          f"{'power on-CPU +25pt':>20}")
    wal, cpu = "cpu.client backend.cpu_us", "wait.client backend.CPU:CPU"
    for k in (3, 4, 6, 8):
        if k > len(rounds):
            continue
        rng = np.random.default_rng(args.seed + k)
        any_diff = rows_diff = rows_all = family = hit_wal = hit_cpu = 0
        for _ in range(args.reps):
            t, chosen = draw(table, rounds, k, rng)
            rows, m = judge(design, t, known, "c02", "c01", chosen, 0.05)
            called = [r for r in rows if r.decision == "different"]
            any_diff += bool(called)
            rows_diff += len(called)
            rows_all += len(rows)
            family += m
            for key, change, share, counter in ((wal, 1.5, False, "wal"),
                                                (cpu, 0.25, True, "cpu")):  # fmt: skip
                if key not in t:
                    continue
                got, _ = judge(design, inject(t, key, change, share), known, "c02", "c01",
                               chosen, 0.05)  # fmt: skip
                hit = any(r.metric.key == key and r.decision == "different" for r in got)
                if counter == "wal":
                    hit_wal += hit
                else:
                    hit_cpu += hit
        n = args.reps
        print(f"{k:<10}{any_diff / n:>8.1%}{rows_diff / max(rows_all, 1):>8.2%}"
              f"{family / n:>6.1f}{hit_wal / n:>16.1%}{hit_cpu / n:>20.1%}")
    print(f"({time.time() - started:.0f} s)")


if __name__ == "__main__":
    main()
