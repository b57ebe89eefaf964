"""The noise a plan is sized with: one trial's log TPS around its round and configuration,
and how it depends on the length of a round.

Trials of one round run one after another; a machine that wanders for minutes at a time
(tpcb-like here: lag-1 autocorrelation 0.63) moves further within a long round than
within a short one, so the round block removes less of it. The noise of a round of C
trials is the within-round variance of C consecutive trials, which the variogram of the
trial sequence gives whatever the wandering (a random walk included):

    E[within-round variance] = 2 / (C (C - 1)) * sum_{h=1}^{C-1} (C - h) V(h),
    V(h) = E[(x_{t+h} - x_t)^2] / 2.

Randomising the order inside each round makes this the model's residual variance. A
pilot's noise is carried to another round length by the ratio of these variances (its own
residual SD stays the anchor); beyond the lags the pilot measured (fewer than MIN_PAIRS
pairs) it cannot be, and `at` says so. Without a pilot, the plan uses the recording of
this machine's noise shipped here (tests/data/noise: 60 back-to-back 10 s runs of one
unchanged configuration, tpcb-like and select-only; tests/unit/test_noise.py recomputes
these figures from the files)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .dist import Array

MIN_PAIRS = 10  # a lag measured from fewer pairs of trials is not used
# Variogram of log TPS, lags 1..30 runs, of the recordings (10 s runs, scale 10, -c 2 -j 2)
RECORDED = {
    "tpcb": (0.005304, 0.007962, 0.009343, 0.008077, 0.009059, 0.010616, 0.013385, 0.015651,
             0.015576, 0.015760, 0.017183, 0.019970, 0.022255, 0.021779, 0.022390, 0.023032,
             0.024615, 0.025784, 0.025444, 0.023917, 0.020809, 0.021023, 0.019993, 0.018179,
             0.015446, 0.014758, 0.015072, 0.013158, 0.013639, 0.012270),
    "select": (0.003982, 0.005104, 0.004797, 0.005162, 0.005668, 0.004576, 0.005454, 0.004934,
               0.004579, 0.004959, 0.005568, 0.004923, 0.004101, 0.003590, 0.004619, 0.004368,
               0.003613, 0.005098, 0.006402, 0.005186, 0.005345, 0.005083, 0.004925, 0.006961,
               0.006152, 0.005205, 0.005825, 0.005929, 0.006181, 0.005839),
}  # fmt: skip
RECORDED_TRIAL_S = 10.0


def variogram(series: Array, max_lag: int) -> tuple[Array, Array]:
    """V(h) for h = 1..max_lag of a sequence in run order (NaN for a missing trial), and
    the number of pairs behind each lag."""
    x = np.asarray(series, dtype=float)
    v, n = np.full(max_lag, np.nan), np.zeros(max_lag)
    for h in range(1, max_lag + 1):
        d = x[h:] - x[:-h]
        d = d[np.isfinite(d)]
        n[h - 1] = len(d)
        if len(d):
            v[h - 1] = float(np.mean(d * d)) / 2
    return v, n


def within_round(v: Array | tuple[float, ...], c: int) -> float:
    """Expected within-round variance of c consecutive trials from the variogram."""
    if c < 2:
        return 0.0
    h = np.arange(1, c)
    return float(2 / (c * (c - 1)) * np.sum((c - h) * np.asarray(v)[: c - 1]))


@dataclass(frozen=True)
class Noise:
    """One trial's log-scale noise around its round and configuration."""

    sigma: float  # residual SD at rounds of `round_length` trials
    df: float | None  # degrees of freedom of that estimate; None: taken as known
    round_length: int
    variogram: tuple[float, ...]  # V(1..H) on the log scale: lags usable for rescaling
    source: str  # in words, for the plan

    def at(self, round_length: int) -> tuple[float, str | None]:
        """The SD for rounds of `round_length` trials, and why it is not rescaled (None
        when it is)."""
        if round_length == self.round_length or round_length < 2:
            return self.sigma, None
        top = len(self.variogram) + 1  # the longest round the lags cover
        if round_length > top or self.round_length > top:
            return self.sigma, (f"{self.source} covers rounds of up to {top} trials, not "
                                f"{round_length}: its noise is used as measured, which "
                                "understates a longer round's")  # fmt: skip
        here = within_round(self.variogram, self.round_length)
        there = within_round(self.variogram, round_length)
        if here <= 0 or there <= 0:
            return self.sigma, f"{self.source} shows no noise to rescale"
        return self.sigma * math.sqrt(there / here), None


def recorded(workload: str) -> Noise:
    """This machine's recorded noise: select-only's for a read-only select workload, else
    tpcb-like's (the noisier), as 10 s trials in rounds of two."""
    key = "select" if workload == "select-only" else "tpcb"
    v = RECORDED[key]
    name = "tpcb-like" if key == "tpcb" else "select-only"
    return Noise(math.sqrt(within_round(v, 2)), None, 2, v,
                 f"this machine's recorded {name} noise (10 s trials)")  # fmt: skip


def from_sequence(sigma: float, df: float, round_length: int, residuals: Array,
                  source: str) -> Noise:  # fmt: skip
    """A pilot's noise: its residual SD and df, its round length, and the variogram of its
    trials in run order after their configuration's effect (lags with MIN_PAIRS pairs)."""
    v, n = variogram(residuals, max(1, len(residuals) - 1))
    usable = 0
    while usable < len(v) and n[usable] >= MIN_PAIRS and math.isfinite(v[usable]):
        usable += 1
    return Noise(sigma, df, round_length, tuple(float(x) for x in v[:usable]), source)
