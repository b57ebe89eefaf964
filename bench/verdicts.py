#!/usr/bin/env python3
"""bench/verdicts: how often do pgsweep's verdicts lie, and how sensitive are they?

Whole experiments are simulated over noise recorded on this machine (tests/data/noise: 60
back-to-back 10 s runs of one unchanged configuration, tpcb-like and select-only), so any
difference between "configurations" is noise. Trials take the noise in the order a real
plan runs them (pgsweep.plan.make_plan: every round holds every configuration, shuffled
within the round; a cluster factor built once serves all rounds). 60 runs are too few for
many experiments, so the series are extended two ways:

- "boot": a moving-block bootstrap of the recorded values (blocks of 8 runs, random
  starts), which keeps the lag-1 autocorrelation (0.6 on tpcb) inside blocks;
- "synth": AR(1) on the log scale with the recording's lag-1 autocorrelation and SD, plus
  a random walk whose SD after 60 runs is half the series' SD: drift that the recording
  does not show, added on purpose;
- "rec": a random contiguous stretch of the recording itself (few distinct stretches, so
  these rates are not independent repetitions; shown for reference).

Cluster builds differ in ways one cluster's recording cannot show; where a design has a
cluster factor, each build gets a log-normal level with SD `build_sd` (3%).

The simulation engine (noise sources, designs, runners) is pgsweep.verdict.simulate, which
the unit tests (tests/unit/test_simulations.py) run with fewer repetitions; this script
adds the old method for comparison and prints the report.
Run: .venv/bin/python bench/verdicts.py [--reps N]
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # the machine's cores run benchmarks

import argparse
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats as sps

from pgsweep import verdict as sm
from pgsweep.verdict import sequential as sq
from pgsweep.verdict.simulate import (
    CLUSTERS,
    CLUSTERS_ONCE,
    SPLIT,
    SPLIT_ONCE,
    THREE_BY_FOUR,
    TWO,
    TWO_BY_TWO,
    Design,
    Source,
    adaptive,
    bootstrap,
    experiment,
    fixed,
    load,
    power_at_printed,
    seeds,
    sources,
    whole_plot,
)

NOISE = Path(__file__).resolve().parents[1] / "tests" / "data" / "noise"


# ---- the method this replaces, for contrast (stats.compare / analysis._effects) -------


def _t_p(d: np.ndarray) -> float:
    """Two-sided one-sample t p-value (scipy.stats.ttest_1samp, without its overhead)."""
    d = d[np.isfinite(d)]
    if len(d) < 2 or np.std(d) == 0:
        return 1.0 if len(d) < 2 or np.mean(d) == 0 else 0.0
    t = d.mean() / (d.std(ddof=1) / math.sqrt(len(d)))
    return float(2 * sps.t.sf(abs(t), len(d) - 1))


def _holm(ps: list[float]) -> list[float]:
    order = np.argsort(ps)
    out, running = [0.0] * len(ps), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(ps) - rank) * ps[i]))
        out[i] = running
    return out


def old_baseline_different(obs: sm.Observations) -> bool:
    """Per-pair paired t on within-round log ratios, Holm-adjusted p."""
    y = np.log(obs.values)
    ps = [_t_p(y[i] - y[obs.baseline]) for i in range(obs.n_configs) if i != obs.baseline]
    return min(_holm(ps)) < sm.ALPHA


def old_effects_different(obs: sm.Observations) -> bool:
    """Main effects (per-round log ratios averaged over the other factors) and, for every
    pair of factors, the first-two-levels interaction; each its own unadjusted t."""
    y = np.log(obs.values)
    fl = sm.factor_levels(obs)
    col = {f: np.array([lv[f] for lv in obs.levels], dtype=object) for f in fl}
    ps = []
    for f, levels in fl.items():
        ps += [_t_p(y[col[f] == lv].mean(axis=0) - y[col[f] == levels[0]].mean(axis=0))
               for lv in levels[1:]]  # fmt: skip
    names = list(fl)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            (a0, a1), (b0, b1) = fl[a][:2], fl[b][:2]

            def cell(va: Any, vb: Any, a: str = a, b: str = b) -> np.ndarray:
                return np.asarray(y[(col[a] == va) & (col[b] == vb)].mean(axis=0))

            ps.append(_t_p(cell(a1, b1) - cell(a0, b1) - cell(a1, b0) + cell(a0, b0)))
    return min(ps) < sm.ALPHA


OLD = {"old baseline": old_baseline_different, "old effects": old_effects_different}


# ---- the printed report -------------------------------------------------------------


def aggregate(series: np.ndarray, k: int) -> np.ndarray:
    """Trials k times as long: the mean TPS of k consecutive 10 s runs (the 3 s gaps
    between recorded runs are ignored)."""
    n = len(series) // k
    return np.asarray(series[: n * k].reshape(n, k).mean(axis=1))


def coverage(design: Design, rounds: int, source: Source, reps: int, seed: int,
             long_run: float) -> dict[str, float]:  # fmt: skip
    """Per-configuration 95% intervals in A/A experiments (log scale): the model's (this
    run's level: the mean of the rounds' levels) and the old t interval over the
    configuration's own trials; each against this run's level and the series' long-run
    mean."""
    hit = {"model/run": 0, "model/long": 0, "old t/run": 0, "old t/long": 0}
    n = 0
    for rng in seeds(seed, reps):
        obs = experiment(design, rounds, source, rng)
        y = np.log(obs.values)
        run = float(y.mean())
        for m, row in zip(sm.config_means(sm.fit(obs)), y, strict=True):
            lo, hi = math.log(m.low), math.log(m.high)
            half = float(sps.t.isf(0.025, rounds - 1)) * row.std(ddof=1) / math.sqrt(rounds)
            for name, (a, b) in (("model", (lo, hi)), ("old t", (row.mean() - half,
                                                                row.mean() + half))):  # fmt: skip
                hit[f"{name}/run"] += a <= run <= b
                hit[f"{name}/long"] += a <= long_run <= b
            n += 1
    return {k: v / n for k, v in hit.items()}


def zero_width(rounds: int, reps: int, seed: int) -> dict[str, float]:
    """select-only latency in whole microseconds (0.036-0.045 ms), A/A with 2 configs:
    how often the old paired-t interval has zero width, and the new false-"different"."""
    lat = bootstrap(load(NOISE, "select", "lat_ms"))
    zero, different, narrowest = 0, 0, math.inf
    for rng in seeds(seed, reps):
        obs = experiment(TWO, rounds, lat, rng, decimals=3)
        d = np.log(obs.values[1] / obs.values[0])
        zero += bool(np.std(d) == 0)
        c = sm.baseline_family(sm.fit(obs)).contrasts[0]
        different += c.decision == "different"
        narrowest = min(narrowest, c.high / c.low - 1)
    return {"old zero-width": zero / reps, "new different": different / reps,
            "new narrowest": narrowest}  # fmt: skip


def _row(*cells: object, widths: tuple[int, ...] = (26, 9, 9, 9, 9, 9, 9)) -> str:
    out = []
    for cell, w in zip(cells, widths, strict=False):
        text = f"{cell:.1%}" if isinstance(cell, float) and cell <= 1 else str(cell)
        out.append(text.ljust(w) if not out else text.rjust(w))
    return " ".join(out)


def report(reps: int, seed: int) -> None:
    t0 = time.time()
    noise = {w: sources(NOISE, w) for w in ("tpcb", "select")}
    print(f"bench/verdicts: seed {seed}, {reps} simulated experiments per cell unless noted")
    print("noise: tests/data/noise (60 x 10 s runs each); boot = moving-block bootstrap "
          "(blocks of 8), synth = AR(1) + random walk, rec = contiguous stretches")  # fmt: skip
    for w in ("tpcb", "select"):
        s = np.log(load(NOISE, w))
        d = s - s.mean()
        print(f"  {w}: SD of log TPS {s.std(ddof=1):.1%}, lag-1 autocorrelation "
              f"{np.sum(d[:-1] * d[1:]) / np.sum(d * d):.2f}")  # fmt: skip

    print('\n1. A/A, fixed rounds: share of experiments with any false "different"')
    print("   (target <= 5%; new = one model, one family each; old = paired t per pair + "
          "Holm, effects unadjusted)")  # fmt: skip
    print(_row("design, noise", "new base", "new eff", "old base", "old eff", "paired"))
    for design, rounds in ((TWO, 10), (TWO, 3), (TWO_BY_TWO, 6), (THREE_BY_FOUR, 5)):
        n = reps if design is not THREE_BY_FOUR else reps // 2
        for w, name in (("tpcb", "boot"), ("tpcb", "synth"), ("tpcb", "rec"),
                        ("select", "boot"), ("select", "synth")):  # fmt: skip
            r = fixed(design, rounds, noise[w][name], n, seed, also=OLD)
            print(_row(f"{design.name} x{rounds}, {w} {name}", r["baseline"], r["effects"],
                       r["old baseline"], r["old effects"], r["paired"]))  # fmt: skip
    print(f"   3 binomial SDs at 5%: {3 * math.sqrt(0.0475 / reps):.1%} ({reps} experiments), "
          f"{3 * math.sqrt(0.0475 / (reps // 2)):.1%} ({reps // 2}, the 3x4 rows); 'rec' rows "
          "reuse overlapping stretches of 60 runs")  # fmt: skip
    _adaptive_tables(noise, reps, seed)
    _power_tables(noise, reps, seed)
    _other_tables(noise, reps, seed)
    print(f"\n(total {time.time() - t0:.0f} s)")


def _adaptive_tables(noise: dict[str, dict[str, Source]], reps: int, seed: int) -> None:
    plan = sq.make_plan(10, 3)
    print("\n2. A/A, adaptive rounds (max 10, a look after every round from 3, O'Brien-"
          "Fleming\n   spending, futility about a 10% difference; decisions kept across "
          "looks)")  # fmt: skip
    wide = (32, 9, 9, 9, 9, 9)
    print(_row("design, decide, noise", "false", "rounds", "futile", "fut. at", "max", widths=wide))
    for design, decide in ((TWO, "baseline"), (TWO_BY_TWO, "baseline"), (TWO_BY_TWO, "effects"),
                           (THREE_BY_FOUR, "baseline"), (THREE_BY_FOUR, "effects")):  # fmt: skip
        n = reps // 2 if design is not THREE_BY_FOUR else reps // 4
        for w in ("tpcb", "select"):
            r = adaptive(design, plan, noise[w]["boot"], n, seed, decide,
                         interest=0.10)  # fmt: skip
            fut = [u for u, why in zip(r["used"], r["reasons"], strict=True) if why == "futility"]
            stop = f"{np.median(fut):.0f}" if fut else "-"
            top = sum(u == plan.max_rounds for u in r["used"]) / n
            print(_row(f"{design.name}, {decide}, {w}", r["different"], f"{r['rounds']:.2f}",
                       len(fut) / n, stop, top, widths=wide))  # fmt: skip
    r = adaptive(TWO_BY_TWO, plan, noise["tpcb"]["boot"], reps // 2, seed, "effects",
                 interest=100.0)  # fmt: skip
    print(_row("2x2, effects, tpcb, no futility", r["different"], f"{r['rounds']:.2f}",
               widths=wide))  # fmt: skip
    print("   false = any \"different\" at any look; rounds = mean rounds run; futile = share "
          "stopped\n   for futility, fut. at = their median stop round; max = share run to "
          "10")  # fmt: skip


def _power_tables(noise: dict[str, dict[str, Source]], reps: int, seed: int) -> None:
    print("\n3. Power at the printed sensitivity (\"differences above X% would have been "
          "detected with 80% power\"): inject exactly X into configuration 2")  # fmt: skip
    print(_row("design, noise", "median X", "fresh", "same"))
    for design, rounds in ((TWO, 10), (TWO, 5), (TWO, 3), (TWO_BY_TWO, 6), (THREE_BY_FOUR, 5)):
        n = reps // 2 if design is not THREE_BY_FOUR else reps // 8
        for w, name in (("tpcb", "boot"), ("tpcb", "synth"), ("select", "boot")):
            r = power_at_printed(design, rounds, noise[w][name], n, seed)
            print(_row(f"{design.name} x{rounds}, {w} {name}", f"{r['printed']:.1%}",
                       r["fresh"], r["same"]))  # fmt: skip
    print("   fresh = a new experiment (new noise) with the change; same = the same noise "
          "with the change added (what 'would have been detected' says of this run)")  # fmt: skip

    print("\n4. Adaptive vs fixed rounds at equal power (2 configs, tpcb boot, true change "
          "on configuration 2)")  # fmt: skip
    print(_row("true change", "adaptive", "rounds", "fixed R", "power", "saved"))
    plan = sq.make_plan(10, 3)
    n = reps // 2
    for change in (1.10, 1.15, 1.25):
        eff = {1: change}
        a = adaptive(TWO, plan, noise["tpcb"]["boot"], n, seed, effect=eff, interest=0.10)
        curve = {r: fixed(TWO, r, noise["tpcb"]["boot"], n, seed, eff)["baseline"]
                 for r in range(3, 16)}  # fmt: skip
        equal = next((r for r, p in curve.items() if p >= a["detected"]), None)
        saved = f"{1 - a['rounds'] / equal:.0%}" if equal else "-"
        print(_row(f"+{change - 1:.0%}", a["detected"], f"{a['rounds']:.2f}", equal or "> 15",
                   curve.get(equal or 0, math.nan), saved))  # fmt: skip
    print("   fixed R = fewest fixed rounds with at least the adaptive power")


def _other_tables(noise: dict[str, dict[str, Source]], reps: int, seed: int) -> None:
    print("\n5. Cluster (whole-plot) factors, A/A, 6 rounds, builds differing by 3% (SD)")
    print(_row("design, contrast", "false", "error", "reps", widths=(44, 9, 16, 5)))
    for design in (CLUSTERS, CLUSTERS_ONCE, SPLIT, SPLIT_ONCE):
        n = reps if design in (CLUSTERS, CLUSTERS_ONCE) else reps // 4
        for label, (rate, error, k) in whole_plot(design, 6, noise["tpcb"]["boot"], n,
                                                  seed).items():  # fmt: skip
            print(_row(f"{design.name}: {label}"[:44], rate, error, k,
                       widths=(44, 9, 16, 5)))  # fmt: skip

    print("\n6. Whole microseconds: select-only latency (0.036-0.045 ms), 2 configs, A/A")
    print(_row("rounds", "old 0-wide", "new diff", "narrowest", widths=(26, 11, 9, 10)))
    for rounds in (3, 5, 10):
        z = zero_width(rounds, reps, seed)
        print(_row(f"{rounds}", z["old zero-width"], z["new different"],
                   f"{z['new narrowest']:.1%}", widths=(26, 11, 9, 10)))  # fmt: skip
    print("   old 0-wide = old paired-t intervals of zero width; narrowest = narrowest new "
          "interval (high/low - 1)")  # fmt: skip

    print("\n7. Trial length vs rounds (2 configs, tpcb; longer trials = means of adjacent "
          "10 s runs, gaps and warm-up ignored)")  # fmt: skip
    print(_row("trials", "sigma", "printed", "power+10%", widths=(26, 9, 9, 10)))
    for k, rounds in ((1, 15), (1, 10), (2, 5), (3, 5), (2, 8)):
        src = bootstrap(aggregate(load(NOISE, "tpcb"), k), block=max(2, 8 // k))
        sig = [sm.fit(experiment(TWO, rounds, src, rng)).sub.sigma
               for rng in seeds(seed, reps // 4)]  # fmt: skip
        p = power_at_printed(TWO, rounds, src, reps // 4, seed)
        hit = fixed(TWO, rounds, src, reps // 2, seed, {1: 1.10})["baseline"]
        print(_row(f"{rounds} x {10 * k} s", f"{np.median(sig):.1%}", f"{p['printed']:.1%}",
                   hit, widths=(26, 9, 9, 10)))  # fmt: skip
    print("   sigma = median residual SD of one trial (log scale); printed = median printed "
          "sensitivity;\n   power+10% = share finding a true +10%. The 20 s and 30 s series "
          "have only 30 and 20\n   values to resample, so their rows are rougher; per-trial "
          "overhead (warm-up, restart)\n   is not modelled and favours fewer, longer trials. "
          "Planner: sq.sensitivity_for(sigma, rounds, 2)")  # fmt: skip

    print("\n8. Per-configuration 95% intervals, A/A, tpcb boot: coverage")
    print(_row("design", "model/run", "model/long", "old t/run", "old t/long"))
    long_run = float(np.log(load(NOISE, "tpcb")).mean())
    for design, rounds in ((TWO, 5), (TWO, 10), (TWO_BY_TWO, 6)):
        c = coverage(design, rounds, noise["tpcb"]["boot"], reps // 4, seed, long_run)
        print(_row(f"{design.name} x{rounds}", c["model/run"], c["model/long"],
                   c["old t/run"], c["old t/long"]))  # fmt: skip
    print("   run = this run's level (mean of its rounds); long = the recording's mean: no "
          "handful of rounds can promise that one")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=1500, help="experiments per cell (default 1500)")
    ap.add_argument("--seed", type=int, default=20261122)
    args = ap.parse_args()
    report(args.reps, args.seed)


if __name__ == "__main__":
    sys.exit(main())
