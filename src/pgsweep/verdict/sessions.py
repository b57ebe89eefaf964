"""Sessions compared: the same configuration measured in separate runs (`pgsweep compare`).

Two runs share no rounds, so nothing cancels the machine's drift between them: on this
machine's recorded noise, two back-to-back sessions of one unchanged configuration differ
by more than their trials' spread says in 10-66% of comparisons (neighbouring trials are
correlated, lag-1 0.63 for tpcb-like, and each session sits at its own level). The unit
of replication between sessions is the session: a verdict needs the spread of session
means, measured from more than one session of one side (before, after) or from an A/A
calibration (two or more sessions of one unchanged configuration, named by the user).
Each session's mean (of log TPS over its trials) is one value; whatever correlation its
trials had is inside that value's spread, so the error respects it.

With the spread measured: the difference of the sides' mean session means, its standard
error from the pooled spread within sides and calibration groups (df = sessions - groups),
t intervals Bonferroni over the configurations compared. Two checks keep it honest on this
machine's noise (bench/guarantees):

- the noise level itself wanders (the recording has calm stretches and a wild one), so a
  calibration from a calm stretch understates sessions run in a wild one: the spread is
  scaled up by how much noisier the sides' sessions are inside than the calibration's
  (their mean within-session variance), never down (calibrations of 2-4 sessions called
  5.8-9.6% of A/A pairs "different" without it, 2.8-5.5% with it);
- sessions next to each other in time are alike (drift), so sides run as blocks (every
  before session, then every after one) show less spread within a side than between the
  sides: without a calibration, only sides that alternate in time measure the spread.

Without a measured spread: the difference alone, no interval and no verdict. The gate
(`--fail-if-slower X`) fails when the one-sided upper bound (1 - alpha, Bonferroni) lies
below -X, and says what slowdown it catches with 80% power."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import optimize
from scipy import stats as sps

from .dist import ALPHA, POWER, sd_upper


@dataclass(frozen=True)
class SessionVerdict:
    ratio: float  # after / before: geometric means of the sides' session means
    low: float | None  # two-sided simultaneous interval; None without a measured spread
    high: float | None
    p_adjusted: float | None
    decision: str  # "faster" | "slower" | "no significant difference" | "drift not measured"
    se: float | None  # of log(ratio)
    df: int  # of the session spread (0: not measured)
    bound: float | None  # one-sided (1 - alpha) upper bound on the ratio, for the gate
    catches: float | None  # the slowdown the gate catches with 80% power (0.12 = -12%)


def spread(groups: list[list[float]]) -> tuple[float, int]:
    """Pooled SD of session means within groups, and its df (sessions - groups)."""
    ss = sum(float(np.sum((np.array(g) - np.mean(g)) ** 2)) for g in groups if len(g) > 1)
    df = sum(len(g) - 1 for g in groups if g)
    return (math.sqrt(ss / df) if df > 0 else math.nan), df


def judge(before: list[float], after: list[float], calibration: list[list[float]],
          family: int, alpha: float = ALPHA, threshold: float | None = None,
          noisier: float = 1.0, blocked: bool = False) -> SessionVerdict:  # fmt: skip
    """One configuration: session means of log TPS before, after, and in each calibration
    group; `family` configurations judged together (Bonferroni). `noisier`: the sides'
    mean within-session variance over the calibration's (the spread is scaled by it when
    above 1); `blocked`: the sides' sessions ran as blocks in time."""
    d = float(np.mean(after) - np.mean(before))
    cal = [g for g in calibration if g]
    if blocked and not cal:
        sd, df = math.nan, 0
    else:
        sd, df = spread([before, after, *cal])
    if df < 1 or not math.isfinite(sd):
        return SessionVerdict(math.exp(d), None, None, None, "drift not measured", None, 0,
                              None, None)  # fmt: skip
    if cal:
        sd *= math.sqrt(max(1.0, noisier))
    se = sd * math.sqrt(1 / len(before) + 1 / len(after))
    q = float(sps.t.isf(alpha / (2 * family), df))
    low, high = math.exp(d - q * se), math.exp(d + q * se)
    t = d / se if se > 0 else math.copysign(math.inf, d) if d else 0.0
    p = min(1.0, family * 2 * float(sps.t.sf(abs(t), df)))
    decision = "faster" if low > 1 else "slower" if high < 1 else "no significant difference"
    one = float(sps.t.isf(alpha / family, df))
    bound = math.exp(d + one * se)
    catches = gate_catches(se, df, one, threshold) if threshold is not None else None
    return SessionVerdict(math.exp(d), low, high, p, decision, se, df, bound, catches)


def one_sided_noncentrality(critical: float, df: float, power: float = POWER) -> float:
    """The noncentrality at which T > critical has probability `power` (noncentral t)."""
    if not math.isfinite(critical):
        return math.inf

    def short(lam: float) -> float:
        return float(sps.nct.sf(critical, df, lam)) - power

    hi = critical + 2.0
    while short(hi) < 0:
        hi *= 2
    return float(optimize.brentq(short, -critical - 10, hi, xtol=1e-8))


def gate_catches(se: float, df: float, critical: float, threshold: float) -> float:
    """The slowdown (0.12 = -12%) a one-sided gate at `critical` on a log ratio with
    standard error `se` (from `df`) catches with 80% power: its 80% upper bound on the
    noise, as the sensitivity lines use."""
    lam = one_sided_noncentrality(critical, df)
    return -math.expm1(math.log1p(-threshold) - lam * sd_upper(se, df))


def one_sided_bound(ratio: float, se: float, df: float, alpha: float, family: int) -> float:
    """The (1 - alpha) one-sided upper bound on a ratio, Bonferroni over `family` rows:
    what a gate compares with 1 - threshold."""
    return ratio * math.exp(float(sps.t.isf(alpha / family, df)) * se)
