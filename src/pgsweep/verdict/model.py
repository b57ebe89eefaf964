"""The model of one metric: log(value) ~ round + configuration, fitted by least squares
with dummy coding (a failed trial is a missing row). With whole-plot (cluster) factors it
has two strata: trials within a group's round (configuration + group-by-round dummies) and
instance means (whole-plot level + period: an instance serves the rounds of one period,
see pgsweep.plan). With one instance per level for the whole run the instance stratum has
nothing to say about instances: it falls back to the group-by-round cells, whose error is
run-to-run noise only, and the model is marked `unreplicated`. Also here: the effective
degrees of freedom of each stratum's noise estimate (for the sensitivity line), the
measurement-resolution floor, the test that refuses pooling when one configuration is
clearly noisier (heterogeneity), which contrasts a stratum can estimate, and the contrast
specifications the families are built from (every configuration against the baseline;
main effects and two-factor interactions)."""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from .dist import MC_SEED, Array

HETERO_P = 0.01  # fallback to paired t when the variance-ratio test's p is below this ...
HETERO_RATIO = 1.5  # ... and the noisiest configuration's SD is this many times the average
HETERO_SIMS = 2000  # simulated experiments calibrating that test


@dataclass(frozen=True)
class Observations:
    """One metric of one experiment; values[config, round], NaN for a failed trial."""

    values: Array
    levels: list[dict[str, Any]]
    baseline: int
    higher_is_better: bool = True
    whole_plot_factors: tuple[str, ...] = ()
    rebuild_every: int = 1  # rounds one instance of each whole plot serves; 0: the whole run
    period_list: tuple[int, ...] | None = None  # a fleet's: each round's period, given

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

    def periods(self) -> list[int]:
        """The instance period of each round (pgsweep.plan.period_of; a fleet's groups
        keep their own, pgsweep.plan.fleet_periods)."""
        if self.period_list is not None:
            return list(self.period_list)
        n = self.rebuild_every
        return [r // n if n > 0 else 0 for r in range(self.n_rounds)]

    def first_rounds(self, rounds: int) -> Observations:
        """The experiment as it stood after `rounds` rounds (for sequential looks)."""
        given = self.period_list[:rounds] if self.period_list is not None else None
        return replace(self, values=self.values[:, :rounds], period_list=given)


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
    unreplicated: bool = False  # whole plots on one instance per level (so far)
    sub_nu: float = math.inf  # effective df of each stratum's noise estimate (sensitivity)
    whole_nu: float = math.inf


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
    seen = [p for r, p in enumerate(obs.periods()) if np.any(~np.isnan(y[:, r]))]
    once = len(set(seen)) < 2
    periods = list(range(obs.n_rounds)) if once else obs.periods()  # once: rounds as cells
    whole, cells = _whole_plot_fit(y, groups, sub, len(uniq), periods) if len(uniq) > 1 else (
        None, [])  # fmt: skip
    owner = np.array([i for i, _ in rows])
    het_p, pooled = _heterogeneity(x, owner, sub)
    sub_nu = effective_df(sub.resid, np.array([r for _, r in rows]), sub.df)
    whole_nu = (effective_df(whole.resid, np.array([p for _, p in cells]), whole.df)
                if whole is not None else math.inf)  # fmt: skip
    return Model(obs, y, groups, sub, blocks, whole, floor, res, het_p, pooled,
                 once and len(uniq) > 1, sub_nu, whole_nu)  # fmt: skip


# A noise estimate from one experiment is worth at most this many degrees of freedom about
# the next: the noise level of this machine differs from one stretch of minutes to the next
# (the recording has calm stretches and a wild one), whatever the experiment's own df
MACHINE_DF = 20.0


def effective_df(resid: Array, block: npt.NDArray[np.int_], df: float) -> float:
    """Degrees of freedom the noise estimate is worth for an upper bound on the noise of a
    repeat of the design: the residual sum of squares is a sum over rounds (or periods), and
    on this machine the noise level wanders from one stretch of rounds to the next, so
    those sums vary more than a chi-square on `df` says. Their spread across rounds gives a
    Satterthwaite df, nu = 2 SS^2 / (R var(SS_r)); it rests on R values only, so it counts
    half; and no estimate is worth more than MACHINE_DF: 1 / (1/df + 2/nu + 1/MACHINE_DF).
    Calibrated on the recorded noise (bench/guarantees: optimistic sensitivity lines in at
    most 16% of experiments of every design, where the chi-square on df alone gave 20-36%
    and a 3x4 reached 25% without the cap)."""
    if df <= 0 or len(resid) == 0:
        return float(df)
    per = np.bincount(block, weights=resid * resid)
    per = per[np.bincount(block) > 0]
    spread = len(per) * float(np.var(per, ddof=1)) if len(per) > 1 else 0.0
    nu = 2 * float(per.sum()) ** 2 / spread if spread > 0 else math.inf
    return 1 / (1 / df + 2 / nu + 1 / MACHINE_DF)


def _whole_plot_fit(y: Array, groups: npt.NDArray[np.int_], sub: _LS, n_groups: int,
                    periods: list[int]) -> tuple[_LS, list[tuple[int, int]]]:  # fmt: skip
    """Two-way fit (group + period) of each instance's mean, after removing the estimated
    within-group configuration effects so that a missing trial does not bias a mean; and
    the (group, period) cells it was fitted on."""
    c = y.shape[0]
    beta = sub.coef[:c]
    centred = beta - np.array([beta[groups == groups[i]].mean() for i in range(c)])
    per = np.array(periods)
    uniq = sorted(set(periods))
    cells = [(g, p) for g in range(n_groups) for p in uniq
             if np.any(~np.isnan(y[groups == g][:, per == p]))]  # fmt: skip
    x = np.zeros((len(cells), n_groups + len(uniq)))
    means = np.zeros(len(cells))
    for n, (g, p) in enumerate(cells):
        x[n, g] = x[n, n_groups + uniq.index(p)] = 1.0
        block = y[groups == g][:, per == p] - centred[groups == g][:, None]
        means[n] = np.nanmean(block)
    return _least_squares(x, means), cells


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
class Spec:
    kind: str
    label: str
    terms: tuple[tuple[str, Any, Any], ...]
    config: int | None
    weights: Array


def baseline_specs(obs: Observations) -> list[Spec]:
    base = obs.levels[obs.baseline]
    out = []
    for i, lv in enumerate(obs.levels):
        if i == obs.baseline:
            continue
        terms = tuple((k, v, base.get(k)) for k, v in lv.items() if v != base.get(k))
        w = np.zeros(obs.n_configs)
        w[i], w[obs.baseline] = 1.0, -1.0
        label = ", ".join(f"{k}={v}" for k, v, _ in terms) or f"configuration {i}"
        out.append(Spec("baseline", label, terms, i, w))
    return out


def effect_specs(obs: Observations) -> list[Spec]:
    """Main effects (each level against the factor's first, averaged over the other factors),
    then for every pair of factors every (level, level) ratio-of-ratios against the firsts."""
    fl = factor_levels(obs)
    out = []
    for f, levels in fl.items():
        for lv in levels[1:]:
            s = np.array([(x.get(f) == lv) - (x.get(f) == levels[0]) for x in obs.levels], float)
            w = np.where(s > 0, s / max(1, int((s > 0).sum())), s / max(1, int((s < 0).sum())))
            out.append(Spec("main", f"{f}={lv} vs {levels[0]}", ((f, lv, levels[0]),), None, w))
    for a, b in itertools.combinations(fl, 2):
        ra, rb = fl[a][0], fl[b][0]
        for la, lb in itertools.product(fl[a][1:], fl[b][1:]):
            sa = np.array([(x.get(a) == la) - (x.get(a) == ra) for x in obs.levels], float)
            sb = np.array([(x.get(b) == lb) - (x.get(b) == rb) for x in obs.levels], float)
            n = max(1, int(((sa > 0) & (sb > 0)).sum()))
            label = f"{a}={la} vs {ra} by {b}={lb} vs {rb}"
            out.append(Spec("interaction", label, ((a, la, ra), (b, lb, rb)), None, sa * sb / n))
    return out


def estimable(ls: _LS | None, rows: Array) -> npt.NDArray[np.bool_]:
    """Which contrasts (rows) this stratum can estimate: unused, or in its row space."""
    unused: npt.NDArray[np.bool_] = ~np.any(np.abs(rows) > 1e-12, axis=1)
    if ls is None or ls.df <= 0 or rows.shape[1] == 0:
        return unused
    inside: npt.NDArray[np.bool_] = np.all(np.abs(rows @ ls.proj.T - rows) < 1e-8, axis=1)
    both: npt.NDArray[np.bool_] = unused | inside
    return both
