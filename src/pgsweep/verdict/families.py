"""The families of claims per metric and the machinery that judges them: Contrast and
Family; report_families (every configuration against the baseline, Dunnett-type, and the
factor effects: main effects, then two-factor interactions, judged together on one error
budget), and each family alone (baseline_family, effects_family). Pooled error: the
covariance of all contrasts from both strata of the model (trial and instance, so
split-plot contrasts get their whole-plot part from the instances) and one critical value
over every contrast judged together. Paired: when pooling is refused, each contrast from
its own per-round values, Bonferroni over the contrasts judged together. Either way the
decision is read off the interval. A contrast across whole-plot levels built once for the
whole run is no claim: its decision is "unreplicated" whatever its interval."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats as sps

from .dist import ALPHA, Array, criticals, noncentrality, round_up, satterthwaite, sd_upper
from .model import Model, Spec, baseline_specs, effect_specs, effective_df, estimable

# A family's level: alpha, or a function of the family's correlation matrix and its
# (smallest) degrees of freedom giving it (a sequential look's level depends on the
# family's joint distribution)
Level = float | Callable[[Array, float], float]
DETECT_CAP = 10.0  # +1000%: beyond this a "detectable difference" means nothing
LOG_BOUND = math.log(1e6)  # interval bounds beyond a millionfold are printed as that


@dataclass(frozen=True)
class Contrast:
    kind: str  # "baseline" | "main" | "interaction"
    label: str
    terms: tuple[tuple[str, Any, Any], ...]  # (factor, level, reference level)
    config: int | None  # the configuration compared with the baseline
    ratio: float
    low: float  # simultaneous interval of the ratio
    high: float
    se: float  # standard error of log(ratio)
    t: float
    df: float
    critical: float  # the family's critical |t| (never below the single-comparison one)
    p_adjusted: float  # family-wise (single-step) adjusted p-value
    decision: str  # "different" | "equivalent" | "undecided" | "unreplicated"
    error: str  # "pooled" | "paired" | "whole-plot" | "split-plot" | "within-run only"
    replicates: int  # independent replicates (rounds, or builds per level) it rests on
    detectable: float  # ratio change found with 80% power at this critical value (0.08 = 8%)
    floored: bool  # the noise SD was raised to the measurement resolution
    margin: float | None
    weights: tuple[float, ...]  # the contrast over configurations, on the log scale


@dataclass(frozen=True)
class Family:
    name: str  # "baseline" | "effects"
    alpha: float
    method: str
    pooled: bool
    heterogeneity_p: float | None
    contrasts: list[Contrast]
    notes: list[str]


def baseline_family(model: Model, alpha: Level = ALPHA, margin: float | None = None) -> Family:
    """Every configuration against the baseline, alone: one family (Dunnett's comparisons)."""
    return _split(model, baseline_specs(model.obs), alpha, margin)[0]


def effects_family(model: Model, alpha: Level = ALPHA, margin: float | None = None) -> Family:
    """Main effects, then two-factor interactions, alone: a 3x4 with 11 contrasts keeps 5%
    family-wise instead of taking 11 chances at 5%."""
    return _split(model, effect_specs(model.obs), alpha, margin)[1]


def report_families(model: Model, alpha: Level = ALPHA, margin: float | None = None,
                    effects: bool = True) -> tuple[Family, Family]:  # fmt: skip
    """Both families a report prints for a metric, judged on one error budget: one
    critical value over every contrast of both (a contrast printed in both, such as the
    one factor's effect and its one comparison with the baseline, counts once), so the
    chance of any false "different" in the report's verdicts on the metric is alpha, not
    alpha per family (measured on recorded noise: 5.7-8.7% for TPS with two families)."""
    specs = baseline_specs(model.obs) + (effect_specs(model.obs) if effects else [])
    return _split(model, specs, alpha, margin)


def pair_contrast(model: Model, config: int, against: int, alpha: float = ALPHA) -> Contrast | None:
    """One configuration against another (not necessarily the baseline) on the model of
    every configuration, alone at `alpha` (a caller judging several metrics at once divides
    it among them); None when these trials cannot estimate it."""
    w = np.zeros(model.obs.n_configs)
    w[config], w[against] = 1.0, -1.0
    mine, other = model.obs.levels[config], model.obs.levels[against]
    terms = tuple((k, v, other.get(k)) for k, v in mine.items() if v != other.get(k))
    label = ", ".join(f"{k}={v}" for k, v, _ in terms) or f"configuration {config}"
    family = _split(model, [Spec("baseline", label, terms, config, w)], alpha, None)[0]
    return family.contrasts[0] if family.contrasts else None


def _split(model: Model, specs: list[Spec], alpha: Level,
           margin: float | None) -> tuple[Family, Family]:  # fmt: skip
    notes: list[str] = []
    if model.pooled:
        rows, level = _pooled(model, specs, alpha, margin, notes)
        method = "single-step max-|t| (Dunnett-type) on the pooled error"
    else:
        rows, level = _paired(model, specs, alpha, margin, notes)
        method = "Bonferroni over paired t: residual spreads differ between configurations"
    kinds = {s.kind for s in specs}
    if "baseline" in kinds and kinds - {"baseline"}:
        method += ", baseline comparisons and effects judged together"
    if any(c.floored for c in rows):
        notes.append(f"noise SD raised to the measurement resolution ({model.resolution:g}): "
                     "the values are too coarse to show smaller noise")  # fmt: skip
    mine = [c for c in rows if c.kind == "baseline"]
    rest = [c for c in rows if c.kind != "baseline"]
    return (
        Family("baseline", level, method, model.pooled, model.heterogeneity_p, mine, notes),
        Family("effects", level, method, model.pooled, model.heterogeneity_p, rest, notes),
    )


def _parts(model: Model, w: Array) -> tuple[Array, Array, bool]:
    """A contrast split into its within-build part (over the trial stratum's coefficients)
    and its whole-plot part (over the build stratum's), and whether it reaches across
    whole-plot levels at all."""
    g = model.groups
    u = np.bincount(g, weights=w)
    ls = np.zeros(len(model.sub.coef))
    ls[: len(w)] = w - u[g] / np.bincount(g)[g]
    lw = np.zeros(0 if model.whole is None else len(model.whole.coef))
    if model.whole is not None:
        lw[: len(u)] = u
    return ls, lw, bool(np.any(np.abs(u) > 1e-12))


def _error(model: Model, across: bool, within: bool, paired: bool) -> str:
    if across and model.unreplicated:
        return "within-run only"
    if paired or not across:
        return "paired" if paired else "pooled"
    return "split-plot" if within else "whole-plot"


def _replicates(model: Model, w: Array, across: bool) -> int:
    """Rounds holding every configuration of the contrast; for a contrast across
    whole-plot levels, the instance periods holding them (1 when built once)."""
    if across and model.unreplicated:
        return 1
    full = (~np.isnan(model.logs[w != 0])).all(axis=0)
    if across:
        return len({p for p, ok in zip(model.obs.periods(), full, strict=True) if ok})
    return int(full.sum())


def _pooled(model: Model, specs: list[Spec], alpha: Level, margin: float | None,
            notes: list[str]) -> tuple[list[Contrast], float]:  # fmt: skip
    """Covariance of all contrasts from both strata, then the family's critical values."""
    sub, whole = model.sub, model.whole
    level = math.nan if callable(alpha) else float(alpha)
    if not specs:
        return [], level
    parts = [_parts(model, s.weights) for s in specs]
    a_s, a_w = np.array([p[0] for p in parts]), np.array([p[1] for p in parts])
    ok = estimable(sub, a_s) & estimable(whole, a_w)
    keep = [(s, p[2]) for s, p, k in zip(specs, parts, ok, strict=True) if k]
    notes += [f"{s.label}: not estimable from these trials" for s, k in zip(specs, ok, strict=True)
              if not k]  # fmt: skip
    if not keep:
        return [], level
    a_s, a_w = a_s[ok], a_w[ok]
    v_s = a_s @ sub.ginv @ a_s.T
    s_s = max(sub.sigma, model.floor) if sub.df > 0 else 0.0
    est, cov = a_s @ sub.coef, s_s**2 * v_s
    v_w, s_w, df_w = np.zeros_like(v_s), 0.0, 0
    if whole is not None and whole.df > 0:
        v_w, df_w = a_w @ whole.ginv @ a_w.T, whole.df
        s_w = max(whole.sigma, model.floor / math.sqrt(np.bincount(model.groups).max()))
        est, cov = est + a_w @ whole.coef, cov + s_w**2 * v_w
    sd = np.sqrt(np.diag(cov))
    corr = cov / np.outer(sd, sd)
    parts_v = (s_s**2 * np.diag(v_s), sub.df, s_w**2 * np.diag(v_w), df_w)
    if callable(alpha):  # a sequential look: boundaries for t at the family's smallest df
        least = min(satterthwaite([(a, sub.df), (b, df_w)])
                    for a, b in zip(parts_v[0], parts_v[2], strict=True))  # fmt: skip
        level = alpha(corr, least)
    else:
        level = float(alpha)
    q, dfs, p_adj = criticals(np.abs(est) / sd, corr, parts_v, level)
    out = []
    for j, (s, across) in enumerate(keep):
        within, between = v_s[j, j] > 1e-12, v_w[j, j] > 1e-12
        se_up = math.sqrt(_up(s_s, model.sub_nu) ** 2 * v_s[j, j]
                          + _up(s_w, model.whole_nu) ** 2 * v_w[j, j])  # fmt: skip
        floored = bool(within and sub.sigma < model.floor) or bool(
            between and whole is not None and whole.sigma < s_w)  # fmt: skip
        out.append(_contrast(s, float(est[j]), float(sd[j]), dfs[j], q[j], p_adj[j], margin,
                             _error(model, across, within, False),
                             _replicates(model, s.weights, across), se_up, floored))  # fmt: skip
    return out, level


def _up(sigma: float, df: float) -> float:
    if sigma <= 0 or df <= 0:
        return 0.0
    return sigma if math.isinf(df) else sd_upper(sigma, df)


def _paired(model: Model, specs: list[Spec], alpha: Level, margin: float | None,
            notes: list[str]) -> tuple[list[Contrast], float]:  # fmt: skip
    """Each contrast from its own per-round values (only rounds holding every configuration
    it involves): no pooling, so one noisy configuration cannot borrow the others' calm.
    Bonferroni, because the contrasts' spreads are estimated separately."""
    per = []
    for s in specs:
        used = s.weights != 0
        cols = ~np.isnan(model.logs[used]).any(axis=0)
        d = s.weights[used] @ model.logs[used][:, cols]
        if len(d) >= 2:
            per.append((s, d))
        else:
            notes.append(f"{s.label}: fewer than 2 rounds hold all its configurations")
    distinct = len({tuple(np.round(s.weights, 9)) for s, _ in per})  # printed twice: once
    least = min((len(d) - 1 for _, d in per), default=1)
    level = alpha(np.eye(max(1, distinct)), least) if callable(alpha) else float(alpha)
    out = []
    for s, d in per:
        n = len(d)
        raw = float(np.std(d, ddof=1))
        sd = max(raw, model.floor * float(np.linalg.norm(s.weights)))
        q = float(sps.t.isf(level / (2 * distinct), n - 1)) if level > 0 else math.inf
        se = sd / math.sqrt(n)
        p_adj = min(1.0, distinct * 2 * float(sps.t.sf(abs(d.mean()) / se, n - 1)))
        across = bool(np.any(np.abs(np.bincount(model.groups, weights=s.weights)) > 1e-12))
        nu = effective_df(d - d.mean(), np.arange(n), n - 1)
        out.append(_contrast(s, float(d.mean()), se, n - 1, q, p_adj, margin,
                             _error(model, across, True, True), _replicates(model, s.weights,
                             across), _up(sd, nu) / math.sqrt(n), raw < sd))  # fmt: skip
    return out, level


def _contrast(s: Spec, est: float, se: float, df: float, q: float, p_adj: float,
              margin: float | None, error: str, reps: int, se_upper: float,
              floored: bool) -> Contrast:  # fmt: skip
    """Decision from the interval itself, so the two cannot disagree."""
    # An early sequential look can have critical values of 1e5 and more (or infinite, when
    # it spends no alpha): bounds are clamped at a millionfold, which changes no decision
    half = q * se if se > 0 else 0.0
    low = math.exp(max(est - half, -LOG_BOUND))
    high = math.exp(min(est + half, LOG_BOUND))
    if error == "within-run only":  # one instance per level: a fact about those builds
        decision = "unreplicated"
    elif low > 1 or high < 1:
        decision = "different"
    elif margin is not None and 1 - margin <= low and high <= 1 + margin:
        decision = "equivalent"
    else:
        decision = "undecided"
    # capped at +1000% (words say "none"), which also keeps it finite for JSON: a look with
    # very few rounds has critical values in the thousands
    reach = noncentrality(q, df) * se_upper if se_upper > 0 else 0.0
    detect = round_up(math.expm1(min(reach, math.log1p(DETECT_CAP))))
    return Contrast(s.kind, s.label, s.terms, s.config, math.exp(est), low, high, se, est / se,
                    float(df), min(float(q), 1e300), float(p_adj), decision, error, reps,
                    detect, floored, margin, tuple(float(v) for v in s.weights))  # fmt: skip
