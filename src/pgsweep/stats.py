"""Statistics for verdicts: pure functions over per-trial values (the trial is the unit of
replication; per-second samples inside a trial are not independent).

Comparisons are blocked by round: every round runs every configuration once, close in
time, so the ratio of a configuration to the baseline *within* a round removes the slow
wandering of a shared machine instead of counting it as noise. On the log scale those
within-round ratios are averaged; a t interval over rounds gives the ratio's 95% interval
and a p-value; Holm's step-down adjusts the p-values over all comparisons of a report."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

ALPHA = 0.05
POWER = 0.80


@dataclass(frozen=True)
class Summary:
    n: int
    mean: float
    median: float
    stddev: float | None
    cv: float | None
    min: float
    max: float
    ci_low: float | None  # 95% t interval of the mean
    ci_high: float | None


def summarize(values: list[float]) -> Summary | None:
    if not values:
        return None
    x = np.asarray(values, dtype=float)
    n, mean = len(x), float(x.mean())
    if n < 2:
        return Summary(n, mean, mean, None, None, mean, mean, None, None)
    sd = float(x.std(ddof=1))
    half = float(sps.t.ppf(1 - ALPHA / 2, n - 1)) * sd / math.sqrt(n)
    cv = sd / mean if mean else None
    return Summary(
        n, mean, float(np.median(x)), sd, cv, float(x.min()), float(x.max()),
        mean - half, mean + half,
    )  # fmt: skip


@dataclass(frozen=True)
class Comparison:
    """A configuration against the baseline: ratio of means from within-round ratios."""

    n: int  # rounds with both values
    ratio: float  # geometric mean of the within-round ratios
    ci_low: float | None
    ci_high: float | None
    p: float | None
    detectable: float | None  # smallest ratio change seen at 80% power, e.g. 0.07 = 7%
    p_adjusted: float | None = None


def compare(values: dict[int, float], baseline: dict[int, float]) -> Comparison | None:
    """`values` and `baseline` map round -> value; only rounds holding both count."""
    rounds = sorted(set(values) & set(baseline))
    d = np.array([math.log(values[r] / baseline[r]) for r in rounds if values[r] > 0 < baseline[r]])
    if len(d) == 0:
        return None
    mean = float(d.mean())
    if len(d) < 2:
        return Comparison(len(d), math.exp(mean), None, None, None, None)
    sd = float(d.std(ddof=1))
    df = len(d) - 1
    se = sd / math.sqrt(len(d))
    t_crit = float(sps.t.ppf(1 - ALPHA / 2, df))
    # identical ratios in every round: certain, unless they are all exactly 1
    p = (0.0 if mean != 0 else 1.0) if se == 0 else float(2 * sps.t.sf(abs(mean / se), df))
    detectable = math.exp((t_crit + float(sps.t.ppf(POWER, df))) * se) - 1
    return Comparison(
        len(d), math.exp(mean), math.exp(mean - t_crit * se), math.exp(mean + t_crit * se),
        p, detectable,
    )  # fmt: skip


def holm(pvalues: list[float | None]) -> list[float | None]:
    """Holm-Bonferroni adjusted p-values (None stays None), in the input order."""
    present = [(p, i) for i, p in enumerate(pvalues) if p is not None]
    m = len(present)
    out: list[float | None] = [None] * len(pvalues)
    running = 0.0
    for rank, (p, i) in enumerate(sorted(present)):
        running = max(running, min(1.0, (m - rank) * p))
        out[i] = running
    return out


def verdict(c: Comparison, higher_is_better: bool, margin: float | None = None) -> str:
    """Words a DBA can forward, e.g. "faster: +40.2% [+31.0%, +49.9%]"."""
    if c.ci_low is None or c.ci_high is None or c.p is None:
        return f"too few rounds to judge ({c.n}; {_pct(c.ratio)} in the one measured)"
    interval = f"{_pct(c.ratio)} [{_pct(c.ci_low)}, {_pct(c.ci_high)}]"
    p = c.p_adjusted if c.p_adjusted is not None else c.p
    if p < ALPHA:
        better = (c.ratio > 1) == higher_is_better
        word = ("faster" if better else "slower") if higher_is_better else (
            "lower" if c.ratio < 1 else "higher")  # fmt: skip
        return f"{word}: {interval}"
    if margin is not None and 1 - margin <= c.ci_low and c.ci_high <= 1 + margin:
        return f"equivalent within {margin:.0%}: {interval}"
    seen = f"; differences above {c.detectable:.0%} would have been seen" if c.detectable else ""
    return f"no significant difference ({interval}){seen}"


def _pct(ratio: float) -> str:
    return f"{(ratio - 1) * 100:+.1f}%"


def drift(per_round_means: dict[int, float]) -> tuple[float, float] | None:
    """Slope of log(value) against the round (fraction per round) and its p-value."""
    rounds = sorted(per_round_means)
    if len(rounds) < 3:
        return None
    y = np.log([per_round_means[r] for r in rounds])
    res = sps.linregress(rounds, y)
    return float(math.expm1(res.slope)), float(res.pvalue)


def compare_unpaired(values: list[float], baseline: list[float]) -> Comparison | None:
    """Two independent samples (two result folders: no shared rounds): Welch's t on the
    logs; the ratio is of geometric means."""
    a = np.log([v for v in values if v > 0])
    b = np.log([v for v in baseline if v > 0])
    if len(a) == 0 or len(b) == 0:
        return None
    diff = float(a.mean() - b.mean())
    if len(a) < 2 or len(b) < 2:
        return Comparison(min(len(a), len(b)), math.exp(diff), None, None, None, None)
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    se = math.sqrt(va + vb)
    if se == 0:
        return Comparison(min(len(a), len(b)), math.exp(diff), math.exp(diff), math.exp(diff),
                          0.0 if diff else 1.0, None)  # fmt: skip
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    t_crit = float(sps.t.ppf(1 - ALPHA / 2, df))
    p = float(2 * sps.t.sf(abs(diff / se), df))
    detectable = math.exp((t_crit + float(sps.t.ppf(POWER, df))) * se) - 1
    return Comparison(
        min(len(a), len(b)), math.exp(diff), math.exp(diff - t_crit * se),
        math.exp(diff + t_crit * se), p, detectable,
    )  # fmt: skip
