"""What a planned design can see, before anything runs: the smallest change each
comparison detects with 80% power for a given noise (verdict.noise), found by judging the
design the way the report will (the same model, the same families on one error budget,
the same whole-plot error) with the noise put in by hand; and the quick one-number
versions the planner has always printed (sensitivity_for, rounds_needed: one
configuration against the baseline, Dunnett-type)."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from .dist import ALPHA, POWER, max_t_quantile, noncentrality, sd_upper
from .families import report_families
from .model import MACHINE_DF, Observations, fit

ASSUMED_BUILD_SD = 0.03  # instances of one level differ by this much (SD) unless measured


def sensitivity_for(sigma_log: float, rounds: int, n_configs: int, *, alpha: float = ALPHA,
                    power: float = POWER, comparisons: int | None = None,
                    sigma_df: float | None = None) -> float:  # fmt: skip
    """The smallest ratio change of one configuration against the baseline that `rounds`
    complete rounds detect with `power`, at the baseline family's (Dunnett) critical value.
    sigma_log: SD of one trial's log value around its round and configuration (the model's
    residual SD; 0.05 is about 5% noise). With sigma_df, the SD's 80% upper bound is used,
    as the report does."""
    k = n_configs - 1 if comparisons is None else comparisons
    df = (rounds - 1) * (n_configs - 1)
    corr = np.full((k, k), 0.5) + 0.5 * np.eye(k)
    q = max_t_quantile(corr, df, alpha)
    sigma = sd_upper(sigma_log, sigma_df) if sigma_df else sigma_log
    return math.expm1(noncentrality(q, df, power) * sigma * math.sqrt(2 / rounds))


def rounds_needed(sigma_log: float, effect: float, n_configs: int, *, alpha: float = ALPHA,
                  power: float = POWER, comparisons: int | None = None,
                  sigma_df: float | None = None, max_rounds: int = 1000) -> int | None:  # fmt: skip
    """The fewest rounds (at least 2) whose sensitivity reaches `effect` (0.05 = 5%), or
    None if even max_rounds do not."""
    for rounds in range(2, max_rounds + 1):
        if sensitivity_for(sigma_log, rounds, n_configs, alpha=alpha, power=power,
                           comparisons=comparisons, sigma_df=sigma_df) <= effect:  # fmt: skip
            return rounds
    return None


@dataclass(frozen=True)
class Planned:
    kind: str  # "baseline" | "main" | "interaction"
    label: str
    config: int | None
    detectable: float  # the change found with 80% power (capped at +1000%)
    error: str  # as the report will say: "pooled", "whole-plot", "within-run only", ...
    replicates: int


def design_sensitivity(levels: list[dict[str, Any]], whole_plot_factors: tuple[str, ...],
                       rounds: int, rebuild_every: int, sigma: float, *,
                       build_sd: float = ASSUMED_BUILD_SD, sigma_df: float | None = None,
                       alpha: float = ALPHA, baseline: int = 0) -> list[Planned]:  # fmt: skip
    """Every comparison the report will print for TPS, with the change it detects with 80%
    power when one trial's log TPS has SD `sigma` around its round and configuration and
    instances of a whole-plot level differ by `build_sd`. The design matrices, degrees of
    freedom, correlations and critical values are the report's own (a fit of the planned
    layout); only the noise is given instead of estimated. With sigma_df (a pilot's) the
    noise's 80% upper bound is used, on the df such an estimate is worth
    (model.effective_df's cap), as a report from data of that size would."""
    if rounds < 2 or len(levels) < 2:
        return []
    obs = Observations(np.ones((len(levels), rounds)), levels, baseline, True,
                       whole_plot_factors, rebuild_every)  # fmt: skip
    model = fit(obs, resolution=1e-9)
    nu = math.inf if sigma_df is None else 1 / (1 / float(sigma_df) + 1 / MACHINE_DF)
    whole = model.whole
    if whole is not None:
        groups = np.bincount(model.groups)
        periods = len(set(obs.periods())) if not model.unreplicated else rounds
        per_cell = float(np.mean(groups)) * rounds / periods  # trials behind an instance mean
        spread = build_sd if not model.unreplicated else 0.0
        whole = replace(whole, sigma=math.sqrt(spread**2 + sigma**2 / per_cell))
    planned = replace(model, sub=replace(model.sub, sigma=sigma), whole=whole, floor=0.0,
                      pooled=True, sub_nu=nu, whole_nu=nu)  # fmt: skip
    fams = report_families(planned, alpha, effects=bool(levels[0]))
    return [Planned(c.kind, c.label, c.config, c.detectable, c.error, c.replicates)
            for f in fams for c in f.contrasts]  # fmt: skip
