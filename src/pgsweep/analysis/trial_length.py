"""Trial length against rounds for the same machine time, from a pilot's noise.

A trial's log TPS varies around its round and configuration for two reasons: what differs
from one trial to the next whatever its length (a fresh start, the caches, the machine's
mood: the between-trial part), and the wobble of the per-second rate inside the window,
which averages out as the window grows (the within-trial part). The pilot gives both: the
model's residual variance of whole trials, and the long-run variance of the per-second
log TPS inside each trial (batch means, so seconds that move together count once). Then

    var(trial of T s) = between + per_second / T,  between = residual - per_second / T0

and, for a fixed budget of machine time, each trial length buys a number of rounds whose
sensitivity `verdict.sequential.sensitivity_for` gives. Longer trials shrink only the
within part; more rounds shrink both, which is why more, shorter rounds usually win."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

import numpy as np

from ..store import Results
from ..verdict import sequential as sq

BATCHES = 5  # batches per trial for the long-run variance of the per-second series


@dataclass(frozen=True)
class LengthNoise:
    residual: float  # the pilot's residual SD of one trial's log TPS
    residual_df: int
    trial_s: float  # the pilot's measured window, seconds
    per_second: float  # long-run variance of per-second log TPS (variance x seconds)
    between: float  # variance that does not shrink with the window
    overhead_s: float  # a trial's wall time beyond its window (warm-up, restarts, ...)

    def sigma(self, seconds: float) -> float:
        return math.sqrt(self.between + self.per_second / seconds)


def length_noise(results: Results, residual: float, residual_df: int) -> LengthNoise | None:
    """The pilot's noise split into its between- and within-trial parts, or None when its
    trials carry no per-second progress lines."""
    trials = [t for t in results.trials(ok_only=True) if t.duration_s]
    samples = results.all_samples()
    long_run, overheads = [], []
    for t in trials:
        x = np.log([s.tps for s in samples.get(t.id, []) if s.tps > 0])
        size = len(x) // BATCHES
        if size >= 1:
            means = x[: size * BATCHES].reshape(BATCHES, size).mean(axis=1)
            long_run.append(float(means.var(ddof=1)) * size)  # var of a 1-second mean
        wall = (datetime.fromisoformat(t.finished_at)
                - datetime.fromisoformat(t.started_at)).total_seconds()  # fmt: skip
        overheads.append(max(0.0, wall - float(t.duration_s or 0)))
    if not long_run:
        return None
    window = float(np.median([t.duration_s for t in trials]))
    per_second = float(np.mean(long_run))
    between = max(0.0, residual**2 - per_second / window)
    return LengthNoise(residual, residual_df, window, per_second, between,
                       float(np.median(overheads)))  # fmt: skip


def trade_off(
    noise: LengthNoise, n_configs: int, rounds: int,
    lengths: tuple[int, ...] = (5, 10, 20, 30, 60, 120),
) -> list[tuple[int, int, float]]:  # fmt: skip
    """(trial seconds, rounds that fit the machine time of `rounds` rounds of the pilot's
    length, the difference they detect against the baseline) for each length."""
    budget = rounds * (noise.trial_s + noise.overhead_s)
    out = []
    for seconds in lengths:
        fit = int(budget // (seconds + noise.overhead_s))
        if fit >= 2:
            detect = sq.sensitivity_for(noise.sigma(seconds), fit, n_configs,
                                        sigma_df=noise.residual_df)  # fmt: skip
            out.append((seconds, fit, detect))
    return out
