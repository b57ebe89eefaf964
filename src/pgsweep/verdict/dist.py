"""The sampling distributions behind the critical values: the family-wise max-|t| tail and
quantile (seeded scrambled-Sobol points, cached as histograms and log-p tables), the
per-stratum critical values of split-plot families (Satterthwaite df, single-step minP),
the noncentrality that turns a critical value into a detectable change, the upper
confidence bound on a noise SD, and the rounding of detectable changes. The error-rate
constants every other module shares (ALPHA, POWER, the Monte Carlo settings) live here."""

from __future__ import annotations

import functools
import math

import numpy as np
import numpy.typing as npt
from scipy import optimize, special
from scipy import stats as sps
from scipy.stats import qmc

Array = npt.NDArray[np.float64]

ALPHA = 0.05
POWER = 0.80
SD_CONFIDENCE = 0.80  # sensitivity uses this one-sided upper confidence bound on the noise SD
MC_POINTS = 1 << 15  # scrambled Sobol points for the max-|t| distribution
MC_SEED = 20261122
MC_BINS = 2048
SMALL_ALPHA = 0.005  # below this the max-|t| tail is Bonferroni's (the union bound is tight)


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
    return tuple(np.round(corr, 4).ravel().tolist())


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
    # stdtr is what sps.t.sf calls, without the per-call argument checks that made them a
    # quarter of a simulated experiment's time
    single: Array = 2 * special.stdtr(df, -xs)
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
    # sps.chi2.ppf's own formula, without its per-call checks: the df of split-plot
    # families are fractional, so this cache misses in every simulated experiment
    return math.sqrt(df / (2 * float(special.gammaincinv(df / 2, 1 - confidence))))


def round_up(change: float) -> float:
    """Round a ratio change up to a step that reads well: 0.1% below 1%, 0.5% below 10%,
    1% below 100%, 10% above."""
    if not math.isfinite(change):
        return math.inf
    step = 0.001 if change < 0.01 else 0.005 if change < 0.1 else 0.01 if change < 1 else 0.1
    return round(math.ceil(change / step - 1e-9) * step, 10)


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


def criticals(t_obs: Array, corr: Array, parts: tuple[Array, int, Array, int],
               level: float) -> tuple[Array, Array, Array]:  # fmt: skip
    """Critical |t|, df and adjusted p per contrast. One error stratum (the usual case):
    every contrast has the same df and the max-|t| quantile serves all. Contrasts on
    different strata (split-plot: whole-plot effects on few df, the rest on many) get
    their own df (Satterthwaite where they mix strata) and a single-step minP critical
    value: the level a* at which the smallest per-contrast p-value of the family, under
    no difference, falls below a* with probability `level`; each contrast is then judged
    at t_df(1 - a*/2). Using the smallest df for all would throw most of the power away."""
    var_s, df_s, var_w, df_w = parts
    dfs = np.array([satterthwaite([(a, df_s), (b, df_w)])
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


def satterthwaite(parts: list[tuple[float, int]]) -> float:
    used = [(v, d) for v, d in parts if v > 1e-300 and d > 0]
    if len(used) < 2:
        return float(used[0][1]) if used else 1.0
    return sum(v for v, _ in used) ** 2 / sum(v * v / d for v, d in used)
