"""One model per metric for pgsweep's verdicts: log(value) ~ round + configuration.

Every round runs every configuration once, close together in time, so the round is a block.
Fitting all configurations at once (least squares with dummy coding, so missing trials are
just missing rows) removes each round's level and pools the remaining noise over every
configuration: many more degrees of freedom than a paired t on two configurations, hence
tighter intervals at the same error rate. Contrasts are differences of logs, reported as
ratios.

Multiplicity: a report makes two kinds of claims per metric, each one family whose
family-wise error is held at `alpha` by a single-step max-|t| critical value computed from
the contrasts' correlation (Dunnett's method, generalised): "baseline" (every configuration
against the baseline) and "effects" (main effects first, then every two-factor interaction
contrast). A contrast is "different" exactly when its simultaneous interval excludes 1, so
the interval and the verdict cannot disagree.

Split-plot: factors whose levels need their own cluster ("whole-plot" factors) are compared
through the builds. The model then has two strata: builds (round x whole-plot level) and
trials within a build. A contrast's whole-plot part is estimated from the build means and
their round x level interaction (between-build error); its within-build part from the
trials. With one build per level for the whole run, that interaction is round-to-round
noise inside one build, so such contrasts are marked "within-run only".

Sensitivity ("differences above 8% would have been detected with 80% power"): if the true
ratio moved by 8% or more, up or down, a repeat of this design (same rounds, same family
critical value) calls it different with probability >= 80%, provided the noise SD is no
larger than its 80% upper confidence bound (chi-square on the residual df); rounded up.
Pooling is refused for clearly unequal noise (see _heterogeneity): each contrast then uses
its own paired t. Values coarser than the noise (latencies in whole microseconds) have
their noise SD floored at the resolution's rounding error, so no interval has zero width.

Sequential looks, spending and planning live in `statmodel_seq`."""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy import optimize, special
from scipy import stats as sps
from scipy.stats import qmc

Array = npt.NDArray[np.float64]
# A family's level: alpha, or a function of the family's correlation matrix giving it (a
# sequential look's level depends on the family's joint distribution)
Level = float | Callable[[Array], float]

ALPHA = 0.05
POWER = 0.80
SD_CONFIDENCE = 0.80  # sensitivity uses this one-sided upper confidence bound on the noise SD
HETERO_P = 0.01  # fallback to paired t when the variance-ratio test's p is below this ...
HETERO_RATIO = 1.5  # ... and the noisiest configuration's SD is this many times the average
HETERO_SIMS = 2000  # simulated experiments calibrating that test
MC_POINTS = 1 << 15  # scrambled Sobol points for the max-|t| distribution
MC_SEED = 20261122
MC_BINS = 2048
SMALL_ALPHA = 0.005  # below this the max-|t| tail is Bonferroni's (the union bound is tight)


@dataclass(frozen=True)
class Observations:
    """One metric of one experiment; values[config, round], NaN for a failed trial."""

    values: Array
    levels: list[dict[str, Any]]
    baseline: int
    higher_is_better: bool = True
    whole_plot_factors: tuple[str, ...] = ()
    replicated_whole_plots: bool = False

    def __post_init__(self) -> None:
        v = np.array(self.values, dtype=float)
        if v.ndim != 2 or v.shape[0] != len(self.levels):
            raise ValueError("values must be (configurations, rounds), one row per levels entry")
        seen = v[~np.isnan(v)]
        if not np.all(np.isfinite(seen)) or np.any(seen <= 0):
            raise ValueError("values must be finite and > 0 (NaN marks a missing trial)")
        if not 0 <= self.baseline < v.shape[0]:
            raise ValueError(f"baseline {self.baseline} is not a configuration index")
        object.__setattr__(self, "values", v)

    @property
    def n_configs(self) -> int:
        return int(self.values.shape[0])

    @property
    def n_rounds(self) -> int:
        return int(self.values.shape[1])

    def first_rounds(self, rounds: int) -> Observations:
        """The experiment as it stood after `rounds` rounds (for sequential looks)."""
        return replace(self, values=self.values[:, :rounds])


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
    decision: str  # "different" | "equivalent" | "undecided"
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


@dataclass(frozen=True)
class _LS:
    coef: Array
    ginv: Array  # (X'X)^+
    proj: Array  # projector onto the row space: l is estimable iff proj @ l == l
    sigma: float
    df: int
    resid: Array


def _least_squares(x: Array, y: Array) -> _LS:
    xtx = x.T @ x
    ginv: Array = np.linalg.pinv(xtx).astype(np.float64)
    coef = ginv @ x.T @ y
    resid = y - x @ coef
    df = len(y) - int(np.linalg.matrix_rank(x))
    sigma = math.sqrt(float(resid @ resid) / df) if df > 0 else math.nan
    return _LS(coef, ginv, ginv @ xtx, sigma, df, resid)


@dataclass(frozen=True)
class Model:
    """Both strata of the fit and what the families need from them."""

    obs: Observations
    logs: Array
    groups: npt.NDArray[np.int_]  # whole-plot level (build group) of each configuration
    sub: _LS  # trials within builds: configuration + build (round x group) dummies
    blocks: npt.NDArray[np.int_]  # per configuration x round: build index, -1 if missing
    whole: _LS | None  # build means: group + round dummies (None with one group)
    floor: float  # SD floor of one log observation (measurement resolution)
    resolution: float
    heterogeneity_p: float | None
    pooled: bool


def default_resolution(values: Array) -> float:
    """The coarsest decimal step every value sits on (0.001 for latencies printed like
    0.042 ms), from 2 significant digits of the smallest value down to 1e-6 of it; values
    on no such grid are treated as continuous: 1e-6 of the median. (The smallest gap
    between a dozen continuous values is no resolution: it is a fraction of their spread.)"""
    v = values[np.isfinite(values)]
    top = math.floor(math.log10(float(v.min()))) - 1
    for k in range(top, top - 6, -1):
        q = 10.0**k
        if np.all(np.abs(v / q - np.round(v / q)) < 1e-6):
            return q
    return 1e-6 * float(np.median(v))


def fit(obs: Observations, resolution: float | None = None) -> Model:
    """Fit the model; `resolution` is the metric's measurement step in its own units."""
    y = np.log(obs.values)
    keys = [tuple(lv.get(f) for f in obs.whole_plot_factors) for lv in obs.levels]
    uniq = list(dict.fromkeys(keys))
    groups = np.array([uniq.index(k) for k in keys])
    rows = [(i, r) for i in range(obs.n_configs) for r in range(obs.n_rounds)
            if not np.isnan(y[i, r])]  # fmt: skip
    build_ids: dict[tuple[int, int], int] = {}
    blocks = np.full(y.shape, -1)
    for i, r in rows:
        blocks[i, r] = build_ids.setdefault((r, int(groups[i])), len(build_ids))
    x = np.zeros((len(rows), obs.n_configs + len(build_ids)))
    for n, (i, r) in enumerate(rows):
        x[n, i] = x[n, obs.n_configs + blocks[i, r]] = 1.0
    sub = _least_squares(x, np.array([y[i, r] for i, r in rows]))
    res = resolution if resolution is not None else default_resolution(obs.values)
    floor = res / (float(np.nanmedian(obs.values)) * math.sqrt(12))  # uniform rounding error
    whole = _whole_plot_fit(y, groups, sub, len(uniq)) if len(uniq) > 1 else None
    owner = np.array([i for i, _ in rows])
    het_p, pooled = _heterogeneity(x, owner, sub)
    return Model(obs, y, groups, sub, blocks, whole, floor, res, het_p, pooled)


def _whole_plot_fit(y: Array, groups: npt.NDArray[np.int_], sub: _LS, n_groups: int) -> _LS:
    """Two-way fit (group + round) of each build's mean, after removing the estimated
    within-group configuration effects so that a missing trial does not bias a build mean."""
    c = y.shape[0]
    beta = sub.coef[:c]
    centred = beta - np.array([beta[groups == groups[i]].mean() for i in range(c)])
    cells = [(g, r) for g in range(n_groups) for r in range(y.shape[1])
             if np.any(~np.isnan(y[groups == g, r]))]  # fmt: skip
    x = np.zeros((len(cells), n_groups + y.shape[1]))
    means = np.zeros(len(cells))
    for n, (g, r) in enumerate(cells):
        x[n, g] = x[n, n_groups + r] = 1.0
        means[n] = np.nanmean(y[groups == g, r] - centred[groups == g])
    return _least_squares(x, means)


def _heterogeneity(x: Array, owner: npt.NDArray[np.int_], sub: _LS) -> tuple[float | None, bool]:
    """Pooling is refused when one configuration is clearly noisier than the rest: its
    share of the noise variance (Shukla's stability variances, which undo the way a
    two-way table spreads one configuration's noise over every residual of its rounds)
    beyond the 99th percentile under equal variances, *and* its SD more than HETERO_RATIO
    times the average (so a significant but harmless difference keeps the pooled degrees
    of freedom). The percentile comes from simulating this very design (same missing
    cells) under equal variances. Two configurations always pool: their residuals mirror
    each other and the pooled contrast *is* the paired t."""
    counts = np.bincount(owner)
    if len(counts) < 3 or sub.df <= 0 or np.any(counts < 2):
        return None, True
    observed = float(_top_share(sub.resid[:, None], owner)[0])
    null = _null_shares(x.tobytes(), x.shape, owner.tobytes())
    p = float((np.sum(null >= observed) + 1) / (len(null) + 1))
    return p, not (p < HETERO_P and math.sqrt(max(observed, 0.0)) > HETERO_RATIO)


def _top_share(resid: Array, owner: npt.NDArray[np.int_]) -> Array:
    """Largest per-configuration noise variance over their mean, for each column of
    residuals. Residual mean square m_i estimates s_i (1 - 2/C) + S/C^2 (S the sum of all
    C variances), so s_i is proportional to m_i - sum(m) / (C (C - 1))."""
    c = int(owner.max()) + 1
    member = (owner[None, :] == np.arange(c)[:, None]).astype(float)
    ms = (member @ resid**2) / member.sum(axis=1)[:, None]
    shares = ms - ms.sum(axis=0) / (c * (c - 1))
    with np.errstate(divide="ignore", invalid="ignore"):
        out: Array = np.nan_to_num(shares.max(axis=0) / shares.mean(axis=0), nan=1.0)
    return out


@functools.lru_cache(maxsize=32)
def _null_shares(xb: bytes, shape: tuple[int, int], ob: bytes) -> Array:
    x = np.frombuffer(xb).reshape(shape)
    owner = np.frombuffer(ob, dtype=np.int_)
    z = np.random.default_rng(MC_SEED).standard_normal((shape[0], HETERO_SIMS))
    return _top_share(z - x @ (np.linalg.pinv(x.T @ x) @ (x.T @ z)), owner)


def factor_levels(obs: Observations) -> dict[str, list[Any]]:
    """Every factor with its levels in first-seen order (the first is the reference)."""
    out: dict[str, list[Any]] = {}
    for lv in obs.levels:
        for k, v in lv.items():
            if v not in out.setdefault(k, []):
                out[k].append(v)
    return out


@dataclass(frozen=True)
class _Spec:
    kind: str
    label: str
    terms: tuple[tuple[str, Any, Any], ...]
    config: int | None
    weights: Array


def baseline_specs(obs: Observations) -> list[_Spec]:
    base = obs.levels[obs.baseline]
    out = []
    for i, lv in enumerate(obs.levels):
        if i == obs.baseline:
            continue
        terms = tuple((k, v, base.get(k)) for k, v in lv.items() if v != base.get(k))
        w = np.zeros(obs.n_configs)
        w[i], w[obs.baseline] = 1.0, -1.0
        label = ", ".join(f"{k}={v}" for k, v, _ in terms) or f"configuration {i}"
        out.append(_Spec("baseline", label, terms, i, w))
    return out


def effect_specs(obs: Observations) -> list[_Spec]:
    """Main effects (each level against the factor's first, averaged over the other factors),
    then for every pair of factors every (level, level) ratio-of-ratios against the firsts."""
    fl = factor_levels(obs)
    out = []
    for f, levels in fl.items():
        for lv in levels[1:]:
            s = np.array([(x.get(f) == lv) - (x.get(f) == levels[0]) for x in obs.levels], float)
            w = np.where(s > 0, s / max(1, int((s > 0).sum())), s / max(1, int((s < 0).sum())))
            out.append(_Spec("main", f"{f}={lv} vs {levels[0]}", ((f, lv, levels[0]),), None, w))
    for a, b in itertools.combinations(fl, 2):
        ra, rb = fl[a][0], fl[b][0]
        for la, lb in itertools.product(fl[a][1:], fl[b][1:]):
            sa = np.array([(x.get(a) == la) - (x.get(a) == ra) for x in obs.levels], float)
            sb = np.array([(x.get(b) == lb) - (x.get(b) == rb) for x in obs.levels], float)
            n = max(1, int(((sa > 0) & (sb > 0)).sum()))
            label = f"{a}={la} vs {ra} by {b}={lb} vs {rb}"
            out.append(_Spec("interaction", label, ((a, la, ra), (b, lb, rb)), None, sa * sb / n))
    return out


# ---- the max-|t| distribution ---------------------------------------------------------


@functools.lru_cache(maxsize=64)
def _max_abs_normal(key: tuple[float, ...], k: int) -> tuple[Array, Array]:
    """The distribution of max_j |Z_j| for Z ~ N(0, corr), from seeded scrambled-Sobol
    points (deterministic), as a fine histogram (bin centres, weights): evaluating the
    tail below then costs 2048 incomplete-gamma values instead of one per point."""
    corr = np.array(key).reshape(k, k)
    w, v = np.linalg.eigh(corr)
    root = v * np.sqrt(np.clip(w, 0.0, None))
    u = np.clip(qmc.Sobol(k, scramble=True, seed=MC_SEED).random(MC_POINTS), 1e-12, 1 - 1e-12)
    m = np.abs(sps.norm.ppf(u) @ root.T).max(axis=1)
    counts, edges = np.histogram(m, bins=MC_BINS, range=(0.0, float(m.max()) * (1 + 1e-9)))
    return (edges[:-1] + edges[1:]) / 2, counts / len(m)


def corr_key(corr: Array) -> tuple[float, ...]:
    """A correlation matrix as a hashable cache key (4 decimals)."""
    return tuple(float(v) for v in np.round(corr, 4).ravel())


def _mc_sf(x: Array, corr: Array, df: float) -> Array:
    """P(max|T| >= x) = E[P(chi2_df/df <= (M/x)^2)]: the chi-square is integrated exactly,
    so the estimate is smooth in x and root-finding on it is stable."""
    return _mc_sf_key(x, corr_key(corr), corr.shape[0], df)


def _mc_sf_key(x: Array, key: tuple[float, ...], k: int, df: float) -> Array:
    m, w = _max_abs_normal(key, k)
    d = min(df, 1e7)
    out: Array = special.gammainc(d / 2, d * (m[None, :] / x[:, None]) ** 2 / 2) @ w
    return out


@functools.lru_cache(maxsize=256)
def _sf_table(key: tuple[float, ...], k: int, df: float) -> tuple[Array, Array]:
    """_mc_sf on a grid, for adjusted p-values by interpolation (one table per family)."""
    xs = np.linspace(0.0, float(sps.t.isf(SMALL_ALPHA / (2 * k), df)) * 1.2, 400)
    xs[0] = 1e-9
    return xs, np.log(np.maximum(_mc_sf_key(xs, key, k, df), 1e-300))


def max_t_sf(x: Array | float, corr: Array, df: float) -> Array:
    """Family-wise tail: P(max_j |T_j| >= x) for T multivariate t(df, corr), at each x.
    Below SMALL_ALPHA it is Bonferroni's bound (capped there), matching max_t_quantile."""
    xs = np.atleast_1d(np.asarray(x, dtype=float))
    k = corr.shape[0]
    single: Array = 2 * sps.t.sf(xs, df)
    if k == 1:
        return single
    grid, log_sf = _sf_table(corr_key(corr), k, round(float(df), 9))
    mc = np.where(xs <= grid[-1], np.exp(np.interp(xs, grid, log_sf)), 0.0)
    out: Array = np.where(mc >= SMALL_ALPHA, mc, np.minimum(SMALL_ALPHA, k * single))
    return out


@functools.lru_cache(maxsize=4096)
def _quantile(key: tuple[float, ...], k: int, df: float, alpha: float) -> float:
    bonferroni = float(sps.t.isf(alpha / (2 * k), df))
    if k == 1 or alpha < SMALL_ALPHA:
        return bonferroni
    corr = np.array(key).reshape(k, k)
    lo = 0.9 * float(sps.t.isf(alpha / 2, df))
    return float(optimize.brentq(lambda x: float(_mc_sf(np.array([x]), corr, df)[0]) - alpha,
                                 lo, 1.1 * bonferroni, xtol=1e-6))  # fmt: skip


def max_t_quantile(corr: Array, df: float, alpha: float = ALPHA) -> float:
    """The single-step critical |t| of a family: Dunnett's when corr is a baseline family."""
    if alpha <= 0:
        return math.inf
    return _quantile(corr_key(corr), corr.shape[0], round(float(df), 9), alpha)


@functools.lru_cache(maxsize=4096)
def noncentrality(critical: float, df: float, power: float = POWER) -> float:
    """The noncentrality at which |T| > critical has probability `power` (noncentral t)."""
    if not math.isfinite(critical):
        return math.inf

    def short(lam: float) -> float:
        # P(T < -q) as P(T' > q) with the sign of the noncentrality flipped: scipy's nct.cdf
        # returns NaN far in the lower tail at 1 df
        low = float(sps.nct.sf(critical, df, -lam))
        return float(sps.nct.sf(critical, df, lam)) + (low if math.isfinite(low) else 0.0) - power

    hi = critical + 2.0
    while short(hi) < 0:
        hi *= 2
    return float(optimize.brentq(short, 0.0, hi, xtol=1e-8))


def sd_upper(sigma: float, df: float, confidence: float = SD_CONFIDENCE) -> float:
    """One-sided upper confidence bound on a residual SD from its chi-square distribution."""
    return sigma * _sd_factor(round(float(df), 9), confidence)


@functools.lru_cache(maxsize=1024)
def _sd_factor(df: float, confidence: float) -> float:
    return math.sqrt(df / float(sps.chi2.ppf(1 - confidence, df)))


def round_up(change: float) -> float:
    """Round a ratio change up to a step that reads well: 0.1% below 1%, 0.5% below 10%,
    1% below 100%, 10% above."""
    if not math.isfinite(change):
        return math.inf
    step = 0.001 if change < 0.01 else 0.005 if change < 0.1 else 0.01 if change < 1 else 0.1
    return round(math.ceil(change / step - 1e-9) * step, 10)


# ---- families -------------------------------------------------------------------------


def baseline_family(model: Model, alpha: Level = ALPHA, margin: float | None = None) -> Family:
    """Every configuration against the baseline: one family (Dunnett's comparisons)."""
    return _family(model, "baseline", baseline_specs(model.obs), alpha, margin)


def effects_family(model: Model, alpha: Level = ALPHA, margin: float | None = None) -> Family:
    """Main effects, then two-factor interactions, as one family: a 3x4 with 11 contrasts
    keeps 5% family-wise instead of taking 11 chances at 5%."""
    return _family(model, "effects", effect_specs(model.obs), alpha, margin)


def _family(model: Model, name: str, specs: list[_Spec], alpha: Level,
            margin: float | None) -> Family:  # fmt: skip
    notes: list[str] = []
    if model.pooled:
        rows, level = _pooled(model, specs, alpha, margin, notes)
        method = "single-step max-|t| (Dunnett-type) on the pooled error"
    else:
        rows, level = _paired(model, specs, alpha, margin, notes)
        method = "Bonferroni over paired t: residual spreads differ between configurations"
    if any(c.floored for c in rows):
        notes.append(f"noise SD raised to the measurement resolution ({model.resolution:g}): "
                     "the values are too coarse to show smaller noise")  # fmt: skip
    return Family(name, level, method, model.pooled, model.heterogeneity_p, rows, notes)


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


def _ok(ls: _LS | None, rows: Array) -> npt.NDArray[np.bool_]:
    """Which contrasts (rows) this stratum can estimate: unused, or in its row space."""
    unused: npt.NDArray[np.bool_] = ~np.any(np.abs(rows) > 1e-12, axis=1)
    if ls is None or ls.df <= 0 or rows.shape[1] == 0:
        return unused
    inside: npt.NDArray[np.bool_] = np.all(np.abs(rows @ ls.proj.T - rows) < 1e-8, axis=1)
    both: npt.NDArray[np.bool_] = unused | inside
    return both


def _error(model: Model, across: bool, within: bool, paired: bool) -> str:
    if across and not model.obs.replicated_whole_plots:
        return "within-run only"
    if paired or not across:
        return "paired" if paired else "pooled"
    return "split-plot" if within else "whole-plot"


def _replicates(model: Model, w: Array, across: bool) -> int:
    if across and not model.obs.replicated_whole_plots:
        return 1
    return int((~np.isnan(model.logs[w != 0])).all(axis=0).sum())


def _pooled(model: Model, specs: list[_Spec], alpha: Level, margin: float | None,
            notes: list[str]) -> tuple[list[Contrast], float]:  # fmt: skip
    """Covariance of all contrasts from both strata, then the family's critical values."""
    sub, whole = model.sub, model.whole
    level = math.nan if callable(alpha) else float(alpha)
    if not specs:
        return [], level
    parts = [_parts(model, s.weights) for s in specs]
    a_s, a_w = np.array([p[0] for p in parts]), np.array([p[1] for p in parts])
    ok = _ok(sub, a_s) & _ok(whole, a_w)
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
    level = alpha(corr) if callable(alpha) else float(alpha)
    parts_v = (s_s**2 * np.diag(v_s), sub.df, s_w**2 * np.diag(v_w), df_w)
    q, dfs, p_adj = _criticals(np.abs(est) / sd, corr, parts_v, level)
    out = []
    for j, (s, across) in enumerate(keep):
        within, between = v_s[j, j] > 1e-12, v_w[j, j] > 1e-12
        se_up = math.sqrt(_up(s_s, sub.df) ** 2 * v_s[j, j] + _up(s_w, df_w) ** 2 * v_w[j, j])
        floored = bool(within and sub.sigma < model.floor) or bool(
            between and whole is not None and whole.sigma < s_w)  # fmt: skip
        out.append(_contrast(s, float(est[j]), float(sd[j]), dfs[j], q[j], p_adj[j], margin,
                             _error(model, across, within, False),
                             _replicates(model, s.weights, across), se_up, floored))  # fmt: skip
    return out, level


_T_GRID = np.concatenate([np.linspace(0.0, 10.0, 2001), np.geomspace(10.0, 1e4, 400)[1:]])


@functools.lru_cache(maxsize=256)
def _log_p_table(df: float) -> Array:
    table: Array = np.log(np.maximum(2 * special.stdtr(df, -_T_GRID), 1e-300))
    return table


def _two_sided_p(t: Array, df: float) -> Array:
    """2 P(T_df > t) by interpolating a cached table of log p (stdtr on 32768 points at a
    Satterthwaite df is the slow part otherwise)."""
    p: Array = np.exp(np.interp(t, _T_GRID, _log_p_table(round(df, 6))))
    return p


@functools.lru_cache(maxsize=32)
def _sobol(k: int) -> Array:
    u: Array = qmc.Sobol(k + 2, scramble=True, seed=MC_SEED).random(MC_POINTS)
    return np.clip(u, 1e-12, 1 - 1e-12)


@functools.lru_cache(maxsize=32)
def _sobol_normal(k: int) -> Array:
    z: Array = sps.norm.ppf(_sobol(k)[:, :k])
    return z


@functools.lru_cache(maxsize=256)
def _sobol_chi2(k: int, which: int, df: int) -> Array:
    """chi2_df / df at the Sobol coordinate k + which (one per error stratum)."""
    c: Array = sps.chi2.ppf(_sobol(k)[:, k + which], df) / df
    return c


def _criticals(t_obs: Array, corr: Array, parts: tuple[Array, int, Array, int],
               level: float) -> tuple[Array, Array, Array]:  # fmt: skip
    """Critical |t|, df and adjusted p per contrast. One error stratum (the usual case):
    every contrast has the same df and the max-|t| quantile serves all. Contrasts on
    different strata (split-plot: whole-plot effects on few df, the rest on many) get
    their own df (Satterthwaite where they mix strata) and a single-step minP critical
    value: the level a* at which the smallest per-contrast p-value of the family, under
    no difference, falls below a* with probability `level`; each contrast is then judged
    at t_df(1 - a*/2). Using the smallest df for all would throw most of the power away."""
    var_s, df_s, var_w, df_w = parts
    dfs = np.array([_satterthwaite([(a, df_s), (b, df_w)])
                    for a, b in zip(var_s, var_w, strict=True)])  # fmt: skip
    if np.ptp(dfs) < 1e-9:
        q = np.full(len(dfs), max_t_quantile(corr, float(dfs[0]), level))
        return q, dfs, max_t_sf(t_obs, corr, float(dfs[0]))
    k = len(dfs)
    w, v = np.linalg.eigh(corr)
    z = _sobol_normal(k) @ (v * np.sqrt(np.clip(w, 0.0, None))).T
    chi_s, chi_w = _sobol_chi2(k, 0, max(df_s, 1)), _sobol_chi2(k, 1, max(df_w, 1))
    scale = np.sqrt((chi_s[:, None] * var_s + chi_w[:, None] * var_w) / (var_s + var_w))
    min_p = np.column_stack([_two_sided_p(np.abs(z[:, j]) / scale[:, j], float(dfs[j]))
                             for j in range(k)]).min(axis=1)  # fmt: skip
    star = level / k if level < SMALL_ALPHA else float(np.quantile(min_p, level))
    p_obs = 2 * special.stdtr(dfs, -t_obs)
    p_mc = np.mean(min_p[None, :] <= p_obs[:, None], axis=1)
    p_adj = np.where(p_mc >= SMALL_ALPHA, p_mc, np.minimum(SMALL_ALPHA, k * p_obs))
    return sps.t.isf(star / 2, dfs), dfs, p_adj


def _up(sigma: float, df: int) -> float:
    return sd_upper(sigma, df) if sigma > 0 and df > 0 else 0.0


def _satterthwaite(parts: list[tuple[float, int]]) -> float:
    used = [(v, d) for v, d in parts if v > 1e-300 and d > 0]
    if len(used) < 2:
        return float(used[0][1]) if used else 1.0
    return sum(v for v, _ in used) ** 2 / sum(v * v / d for v, d in used)


def _paired(model: Model, specs: list[_Spec], alpha: Level, margin: float | None,
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
    level = alpha(np.eye(max(1, len(per)))) if callable(alpha) else float(alpha)
    out = []
    for s, d in per:
        n = len(d)
        raw = float(np.std(d, ddof=1))
        sd = max(raw, model.floor * float(np.linalg.norm(s.weights)))
        q = float(sps.t.isf(level / (2 * len(per)), n - 1)) if level > 0 else math.inf
        se = sd / math.sqrt(n)
        p_adj = min(1.0, len(per) * 2 * float(sps.t.sf(abs(d.mean()) / se, n - 1)))
        across = bool(np.any(np.abs(np.bincount(model.groups, weights=s.weights)) > 1e-12))
        out.append(_contrast(s, float(d.mean()), se, n - 1, q, p_adj, margin,
                             _error(model, across, True, True), _replicates(model, s.weights,
                             across), sd_upper(sd, n - 1) / math.sqrt(n), raw < sd))  # fmt: skip
    return out, level


def _contrast(s: _Spec, est: float, se: float, df: float, q: float, p_adj: float,
              margin: float | None, error: str, reps: int, se_upper: float,
              floored: bool) -> Contrast:  # fmt: skip
    """Decision from the interval itself, so the two cannot disagree."""
    low, high = math.exp(est - q * se), math.exp(est + q * se)
    if low > 1 or high < 1:
        decision = "different"
    elif margin is not None and 1 - margin <= low and high <= 1 + margin:
        decision = "equivalent"
    else:
        decision = "undecided"
    detect = round_up(math.expm1(noncentrality(q, df) * se_upper))
    return Contrast(s.kind, s.label, s.terms, s.config, math.exp(est), low, high, se, est / se,
                    float(df), float(q), float(p_adj), decision, error, reps, detect, floored,
                    margin, tuple(float(v) for v in s.weights))  # fmt: skip


# ---- words ----------------------------------------------------------------------------


def format_percent(fraction: float) -> str:
    """0.025 -> "2.5%", 0.02 -> "2%": margins and sensitivities as given, never rounded."""
    return f"{round(fraction * 100, 9):g}%"


def _pct(ratio: float, digits: int) -> str:
    value = (ratio - 1) * 100
    return f"{0.0 if round(value, digits) == 0 else value:+.{digits}f}%"  # never "-0.0%"


def interval_text(c: Contrast) -> str:
    """Like "+40.2% [+31.0%, +49.9%]": one decimal, or more where one decimal would print a
    zero-width interval or a decided interval touching 0."""
    for digits in (1, 2, 3, 4):
        lo, hi = _pct(c.low, digits), _pct(c.high, digits)
        zero = f"{0.0:+.{digits}f}%"
        if lo != hi and not (c.decision == "different" and zero in (lo, hi)):
            break
    return f"{_pct(c.ratio, digits)} [{lo}, {hi}]"


def verdict(c: Contrast, higher_is_better: bool) -> str:
    """Words a DBA can forward: "faster: +40.2% [+31.0%, +49.9%]", "lower: ..." for a
    lower-is-better metric, "equivalent within 2.5%: ...", or "no significant difference
    (...); differences above 8% would have been detected with 80% power". Never "equal"."""
    text = interval_text(c)
    if c.decision == "different":
        up = c.ratio > 1
        word = ("faster" if up else "slower") if higher_is_better else ("higher" if up else "lower")
        return f"{word}: {text}"
    if c.decision == "equivalent" and c.margin is not None:
        return f"equivalent within {format_percent(c.margin)}: {text}"
    seen = f"{format_percent(c.detectable)} would have been detected with {POWER:.0%} power"
    return f"no significant difference ({text}); differences above {seen}"


def caveats(c: Contrast) -> list[str]:
    """What a report should say next to the verdict."""
    out = []
    if c.error == "within-run only":
        out.append("the interval covers run-to-run noise only: each level ran on one cluster "
                   "build, so build-to-build differences are not in it")  # fmt: skip
    if c.floored:
        out.append("the values are coarser than the noise: the interval uses the measurement "
                   "resolution instead of the (smaller) observed spread")  # fmt: skip
    if c.replicates < 3:
        out.append(f"rests on {c.replicates} independent replicate(s)")
    return out


# ---- per-configuration levels ---------------------------------------------------------


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
        est = float(lvec @ sub.coef) if _ok(sub, lvec[None, :])[0] else math.nan
        half = t * sigma * math.sqrt(float(lvec @ sub.ginv @ lvec))
        n = int(np.sum(~np.isnan(model.logs[i])))
        out.append(ConfigMean(i, math.exp(est), math.exp(est - half), math.exp(est + half), n))
    return out
