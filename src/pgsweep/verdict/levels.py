"""Each configuration's own level over this run's rounds (ConfigMean, config_means): a
geometric mean with a (1 - alpha) interval from the two-way model's pooled within-round
error. It describes this run on this machine; claims belong to the comparisons."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
from scipy import stats as sps

from .dist import ALPHA
from .model import Model, estimable, fit


@dataclass(frozen=True)
class ConfigMean:
    config: int
    mean: float  # geometric mean over this run's rounds (missing trials filled by the model)
    low: float  # (1 - alpha) interval, conditional on this run's rounds
    high: float
    rounds: int  # rounds this configuration was measured in


def config_means(model: Model, alpha: float = ALPHA) -> list[ConfigMean]:
    """Each configuration's level over this run's rounds, from the two-way model: the
    noise is the within-round error pooled over configurations, not the spread across
    rounds, because the round levels are part of what is described. The interval says
    where this configuration sat on this machine during this run, not on another day:
    round levels wander (tpcb-like: lag-1 autocorrelation 0.6) and a handful of rounds
    cannot measure how far. Claims belong to the comparisons."""
    plain = fit(replace(model.obs, whole_plot_factors=()), model.resolution)
    c, sub = model.obs.n_configs, plain.sub
    used = sorted({int(b) for b in plain.blocks.ravel() if b >= 0})
    sigma = max(sub.sigma, plain.floor) if sub.df > 0 else math.nan
    t = float(sps.t.isf(alpha / 2, sub.df)) if sub.df > 0 else math.nan
    out = []
    for i in range(c):
        lvec = np.zeros(len(sub.coef))
        lvec[i] = 1.0
        lvec[[c + b for b in used]] = 1.0 / len(used)
        est = float(lvec @ sub.coef) if estimable(sub, lvec[None, :])[0] else math.nan
        half = t * sigma * math.sqrt(float(lvec @ sub.ginv @ lvec))
        n = int(np.sum(~np.isnan(model.logs[i])))
        out.append(ConfigMean(i, math.exp(est), math.exp(est - half), math.exp(est + half), n))
    return out
