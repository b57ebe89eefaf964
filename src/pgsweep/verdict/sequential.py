"""Rounds over time: how many to plan, when an adaptive run may stop, and what changed
between them.

Adaptive rounds (`[repeat] rounds = "auto"`) look at the results after planned rounds and
stop as soon as every comparison asked for is decided, or every interval is narrower than
the precision, or futility says a change worth finding (`interest`, 10% by default) can
no longer be found by the last look. Looking repeatedly at a fixed 5% test would find
false differences far more often than 5%, so the looks use group-sequential boundaries:
O'Brien-Fleming-type alpha spending (Lan-DeMets), which spends almost nothing early and
keeps nearly the whole 5% for the last look. The boundaries are placed for the statistic
the report computes, a t (the noise SD is estimated at every look, from (r - 1) (C - 1)
degrees of freedom after r rounds of C configurations), and for the family's maximum
|t|: simulated paths of the family's contrasts (correlated as the family) and of the
nested residual sums of squares (chi-square increments), and at each look the boundary
that the surviving paths cross with the alpha due by then. (Normal-theory boundaries
carried to t by keeping each look's nominal level spent 5.7% instead of 5% with 2-9
degrees of freedom.) The intervals shown at a look are repeated confidence intervals,
consistent with the decisions, and a decision once made stays made.

The maximum number of rounds fixes the information scale, so the plan is fixed at the first
look. Resuming with more rounds after looking is refused unless the plan is extended with
`extend_plan`, which keeps the boundaries already used and spends only the alpha that is
left over the new looks; once the last planned look has been made the alpha is spent and no
extension can add valid verdicts."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
from scipy import optimize, special
from scipy import stats as sps

from .dist import ALPHA, MC_SEED, corr_key, max_t_quantile, max_t_sf
from .families import Contrast, Family, report_families
from .model import Model, Observations, fit
from .power import rounds_needed as rounds_needed  # moved to .power; still found here
from .power import sensitivity_for as sensitivity_for
from .words import format_percent

FUTILITY_POWER = 0.20  # stop for futility when conditional power falls below this
STOP_INSIDE = True  # stop once every open interval lies inside +-interest
GRID = 801  # points of the numerical integration of the boundary crossing probabilities
MC_PATHS = 1 << 16  # simulated paths for a family's boundaries
MIN_HITS = 64  # fewer crossing paths than this cannot place a boundary


def obf_spending(t: float, alpha: float = ALPHA) -> float:
    """Lan-DeMets O'Brien-Fleming-type spending of a two-sided alpha by information
    fraction t, as two one-sided halves (each 2 - 2 Phi(z_{1-alpha/4} / sqrt t)): the
    convention of the published two-sided tables (K = 5 equal looks at 5%: 4.877, 3.357,
    2.680, 2.290, 2.031) and of gsDesign/EAST."""
    if t <= 0:
        return 0.0
    return float(4 * sps.norm.sf(sps.norm.isf(alpha / 4) / math.sqrt(min(t, 1.0))))


def boundaries(
    times: list[float], spend: list[float], fixed: tuple[float, ...] = ()
) -> list[float]:
    """Two-sided z boundaries at information fractions `times`, so that the probability of
    first crossing at look k under no difference is spend[k]; the first len(fixed) looks
    keep the boundaries given. Numerical integration of the Brownian motion's density over
    the continuation region (Armitage-McPherson-Rowe recursion) on a fine grid."""
    out: list[float] = []
    grid, dens, prev = np.zeros(1), np.ones(1), 0.0
    for k, t in enumerate(times):
        step = math.sqrt(t - prev)
        weights = dens * _trapezoid(grid)
        if k < len(fixed):
            c = fixed[k]
        elif spend[k] <= 0:
            c = math.inf
        else:
            c = float(optimize.brentq(
                lambda c, t=t, s=step, g=grid, w=weights, a=spend[k]:
                    _exit(c * math.sqrt(t), s, g, w) - a, 1e-6, 40.0, xtol=1e-10))  # fmt: skip
        out.append(c)
        b = min(c, 9.0) * math.sqrt(t)
        new = np.linspace(-b, b, GRID)
        kernel = sps.norm.pdf((new[:, None] - grid[None, :]) / step) / step
        dens = kernel @ weights
        grid, prev = new, t
    return out


def _exit(b: float, step: float, grid: np.ndarray, weights: np.ndarray) -> float:
    """Probability of crossing +-b at the next look from the (sub-)density on `grid`."""
    return float(np.sum(weights * (sps.norm.cdf((-b - grid) / step)
                                   + sps.norm.sf((b - grid) / step))))  # fmt: skip


def _trapezoid(x: np.ndarray) -> np.ndarray:
    if len(x) == 1:
        return np.ones(1)
    w = np.full(len(x), x[1] - x[0])
    w[0] = w[-1] = (x[1] - x[0]) / 2
    return w


@dataclass(frozen=True)
class SequentialPlan:
    max_rounds: int
    looks: tuple[int, ...]  # rounds after which the results are looked at
    alpha: float
    spent: tuple[float, ...]  # alpha spent at each look
    z: tuple[float, ...]  # two-sided z boundary at each look
    nominal: tuple[float, ...]  # each look's two-sided level for one contrast: 2(1 - Phi(z))
    frozen: int = 0  # looks whose boundaries were already used when this plan was computed
    note: str = ""

    def critical_t(self, look: int, df: float) -> float:
        """One contrast's critical |t| at a look: the z boundary's level carried to t."""
        return float(sps.t.isf(self.nominal[look] / 2, df)) if self.nominal[look] else math.inf


def make_plan(max_rounds: int, min_rounds: int = 3, looks: list[int] | None = None,
              alpha: float = ALPHA) -> SequentialPlan:  # fmt: skip
    """Looks after every round from `min_rounds` to `max_rounds` unless given."""
    chosen = tuple(looks) if looks else tuple(range(min_rounds, max_rounds + 1))
    if not chosen or list(chosen) != sorted(set(chosen)) or chosen[-1] != max_rounds:
        raise ValueError(f"looks must increase and end at max_rounds ({max_rounds}): {chosen}")
    if chosen[0] < 2:
        raise ValueError("the first look needs at least 2 rounds")
    times = [r / max_rounds for r in chosen]
    cumulative = [obf_spending(t, alpha) for t in times]
    spent = [b - a for a, b in zip([0.0, *cumulative[:-1]], cumulative, strict=True)]
    return _plan(max_rounds, chosen, alpha, spent, ())


def _plan(max_rounds: int, looks: tuple[int, ...], alpha: float, spent: list[float],
          fixed: tuple[float, ...], note: str = "") -> SequentialPlan:  # fmt: skip
    z = boundaries([r / max_rounds for r in looks], spent, fixed)
    nominal = tuple(float(2 * sps.norm.sf(c)) for c in z)
    return SequentialPlan(max_rounds, looks, alpha, tuple(spent), tuple(z), nominal, len(fixed),
                          note)  # fmt: skip


def check_resume(plan: SequentialPlan, looks_made: int, rounds: int) -> str | None:
    """Why running to `rounds` after `looks_made` looks would inflate the error rate, or
    None when it is fine as the plan stands."""
    if rounds <= plan.max_rounds:
        return None
    if looks_made == 0:
        return (f"the plan stops at {plan.max_rounds} rounds; nothing has been looked at yet, "
                f"so make a new plan for {rounds}")  # fmt: skip
    if looks_made >= len(plan.looks):
        return (f"the last planned look (round {plan.looks[-1]}) has been made and the whole "
                f"{format_percent(plan.alpha)} was spent on it: more rounds cannot give "
                "valid verdicts; start a new experiment and treat this one as a pilot")  # fmt: skip
    return (f"{looks_made} look(s) already made: extend the plan with extend_plan, which keeps "
            f"their boundaries and spends only the alpha left over the new rounds")  # fmt: skip


def extend_plan(plan: SequentialPlan, looks_made: int, max_rounds: int,
                looks: list[int] | None = None) -> SequentialPlan:  # fmt: skip
    """A longer plan that keeps the boundaries of the looks already made and spends the
    alpha the original plan had left (O'Brien-Fleming-shaped over the new information
    fractions). Exact when the decision to extend does not depend on the interim estimates;
    raises ValueError with the reason when no alpha is left."""
    if looks_made == 0:
        return make_plan(max_rounds, plan.looks[0], looks, plan.alpha)
    if looks_made >= len(plan.looks):
        raise ValueError(check_resume(plan, looks_made, max_rounds))
    past = plan.looks[:looks_made]
    future = [r for r in (looks or range(past[-1] + 1, max_rounds + 1)) if r > past[-1]]
    if not future or future[-1] != max_rounds:
        raise ValueError(f"new looks must end at {max_rounds}")
    left = plan.alpha - sum(plan.spent[:looks_made])
    start = obf_spending(past[-1] / max_rounds, plan.alpha)
    shape = [(obf_spending(r / max_rounds, plan.alpha) - start) / (plan.alpha - start)
             for r in future]  # fmt: skip
    steps = [left * (b - a) for a, b in zip([0.0, *shape[:-1]], shape, strict=True)]
    note = (f"extended from {plan.max_rounds} to {max_rounds} rounds after {looks_made} "
            "look(s); valid if the extension was not chosen because of the estimates")  # fmt: skip
    return _plan(max_rounds, (*past, *future), plan.alpha, [*plan.spent[:looks_made], *steps],
                 plan.z[:looks_made], note)  # fmt: skip


@functools.lru_cache(maxsize=256)
def _family_t(looks: tuple[int, ...], spent: tuple[float, ...], corr_key: tuple[float, ...],
              m: int, per_round: int) -> tuple[float, ...]:  # fmt: skip
    """Boundaries on the family's max |t| at each look, for a complete two-way layout
    whose rounds each add `per_round` residual degrees of freedom (C - 1): simulated
    experiments (seeded), round by round. Each round's within-round noise is a standard
    normal vector in per_round dimensions; the family's contrasts read the running mean
    through a root of their correlation (their rank's dimensions; the other dimensions only
    add to the residual sum of squares, a chi-square independent of the rest), and t is the
    contrast over its standard error from the pooled residual SD at that look, as the
    report computes it. (Taking the residual sums of squares independent of the earlier
    looks' estimates is wrong: a recursive residual is correlated with the means before
    it.) At each look the boundary is the one the surviving experiments cross with the
    alpha due by then; where too few would cross to place it (the first looks spend
    1e-4), Bonferroni on that look alone is used and the unspent alpha carried on."""
    corr = np.array(corr_key).reshape(m, m)
    w, v = np.linalg.eigh(corr)
    keep = w > 1e-9 * max(float(w.max()), 1e-300)
    root = v[:, keep] * np.sqrt(w[keep])  # m x rank
    rank = root.shape[1]
    extra = max(per_round - rank, 0)
    rng = np.random.default_rng(MC_SEED)
    total, squares, other = np.zeros((MC_PATHS, rank)), np.zeros(MC_PATHS), np.zeros(MC_PATHS)
    alive, crossed, due, out, prev = np.ones(MC_PATHS, bool), 0, 0.0, [], 0
    for look, a in zip(looks, spent, strict=True):
        for _ in range(prev, look):
            z = rng.standard_normal((MC_PATHS, rank))
            total += z
            squares += np.einsum("ij,ij->i", z, z)
        if extra and look > max(prev, 1):
            other += rng.chisquare(extra * (look - max(prev, 1)), MC_PATHS)
        df = (look - 1) * (rank + extra)
        ss = squares - np.einsum("ij,ij->i", total, total) / look + other
        t = np.abs(total @ root.T).max(axis=1) / look / np.sqrt(ss / df / look)
        due += a
        hits = round(due * MC_PATHS) - crossed
        if hits < MIN_HITS:
            c = float(sps.t.isf(a / (2 * m), df)) if a > 0 else math.inf
        else:
            c = float(np.sort(t[alive])[-hits])
        crossed += int(np.sum(alive & (t >= c)))
        alive &= t < c
        out.append(c)
        prev = look
    return tuple(out)


def look_level(plan: SequentialPlan, look: int) -> Callable[[np.ndarray, float], float]:
    """The level a family is judged at on this look, as a function of its correlation and
    its degrees of freedom now: the single-look tail of max |t| at the family's t
    boundary, for a complete layout whose rounds add df / (rounds - 1) each."""

    def level(corr: np.ndarray, df: float) -> float:
        m = corr.shape[0]
        rounds = plan.looks[look]
        per_round = max(1, round(df / max(rounds - 1, 1)))
        c = _family_t(plan.looks, plan.spent, corr_key(corr), m, per_round)[look]
        return float(max_t_sf(c, corr, df)[0]) if math.isfinite(c) else 0.0

    return level


@dataclass(frozen=True)
class Look:
    rounds: int
    index: int  # which planned look, from 0
    stop: bool
    reason: str
    family: Family  # this look's repeated confidence intervals
    decided: dict[str, Contrast]  # label -> the contrast as first decided, at any look

    def contrasts(self) -> list[Contrast]:
        """The answers so far: a contrast decided at an earlier look keeps that look's
        decision, with the overlap of that look's interval and this one's. Repeated
        confidence intervals hold for all looks at once, so their overlap does too; the
        first look's alone (2 degrees of freedom at a strict boundary) once spanned -99.8%
        to -0.1% for a configuration 95% slower, and the gate passed it (stop 45). The
        adjusted p-value and critical value are the deciding look's, the ones the decision
        rests on (this look's p-value may exceed alpha for a contrast decided before). When
        this look's estimate falls outside the overlap, the deciding look's answer stays
        as it was."""
        out = []
        for c in self.family.contrasts:
            first = self.decided.get(c.label)
            if first is None or first is c:  # undecided, or decided at this look
                out.append(c)
                continue
            low, high = max(first.low, c.low), min(first.high, c.high)
            inside = low <= c.ratio <= high
            out.append(replace(c, low=low, high=high, decision=first.decision,
                               p_adjusted=first.p_adjusted, critical=first.critical)
                       if inside else first)  # fmt: skip
        return out


def decide_at_look(plan: SequentialPlan, obs: Observations, decide: str = "baseline",
                   precision: float = 0.02, interest: float = 0.10,
                   decided: dict[str, Contrast] | None = None,
                   resolution: float | None = None) -> Look:  # fmt: skip
    """Look at the experiment cut to the rounds so far. `precision` is the equivalence
    margin and the interval half-width that is precise enough; `interest` the smallest
    change worth finding, which futility asks about; `decided` the previous look's, so a
    decision once made stays made. Both families the report prints are judged together
    (one error budget); `decide` names the one the stop rule looks at. Raises ValueError
    when the rounds are not a planned look."""
    if obs.n_rounds > plan.max_rounds:
        raise ValueError(f"{obs.n_rounds} rounds but the plan stops at {plan.max_rounds}: "
                         "extend_plan first (check_resume says if that is allowed)")  # fmt: skip
    if obs.n_rounds not in plan.looks:
        raise ValueError(f"round {obs.n_rounds} is not a planned look {plan.looks}")
    k = plan.looks.index(obs.n_rounds)
    model = fit(obs, resolution)
    seen: list[tuple[np.ndarray, float]] = []  # the families' correlation and df

    def level(corr: np.ndarray, df: float) -> float:
        seen.append((corr, df))
        return look_level(plan, k)(corr, df)

    both = report_families(model, level, precision, effects=bool(obs.levels[0]))
    fam = both[0] if decide == "baseline" else both[1]
    now = {c.label: c for c in fam.contrasts if c.decision in ("different", "equivalent")}
    done = {**now, **(decided or {})}

    def look(stop: bool, reason: str) -> Look:
        return Look(obs.n_rounds, k, stop, reason, fam, done)

    last = k == len(plan.looks) - 1
    # built once for the whole run: never decided, so not waited for
    forever = obs.rebuild_every == 0
    open_ = [c for c in fam.contrasts if c.label not in done
             and not (forever and c.decision == "unreplicated")]  # fmt: skip
    if not fam.contrasts:
        return look(last, "nothing to judge yet")
    if not open_:
        return look(True, "every comparison decided")
    settled = all(c.decision != "unreplicated" for c in open_)
    if settled and max(math.log(c.high / c.low) / 2 for c in open_) <= math.log1p(precision):
        return look(True, "every interval within the precision")
    if STOP_INSIDE and settled and all(1 / (1 + interest) < c.low and c.high < 1 + interest
                                       for c in open_):  # fmt: skip
        return look(True, f"every interval inside ±{format_percent(interest)}: no change "
                    "worth finding")  # fmt: skip
    if last:
        return look(True, "maximum rounds reached")
    corr, df = seen[0]
    df_end = df * (plan.max_rounds - 1) / max(obs.n_rounds - 1, 1)
    final = look_level(plan, len(plan.looks) - 1)(corr, df_end)
    if all(c.decision != "unreplicated"
           and _conditional_power(c, obs.n_rounds, plan.max_rounds, corr, final, interest)
           < FUTILITY_POWER for c in open_):  # fmt: skip
        return look(True, f"futility: a change of {format_percent(interest)} could no "
                    "longer be found")  # fmt: skip
    return look(False, f"{len(open_)} comparison(s) undecided")


def _conditional_power(c: Contrast, rounds: int, max_rounds: int, corr: np.ndarray,
                       final_level: float, interest: float) -> float:  # fmt: skip
    """Probability that the last look calls c different if the rounds still to come carried
    a true change of +-interest, or the change estimated so far when that is larger (the
    largest of these), given the estimate so far: normal increments, the last look's
    family critical value at the df the last look will have (df grows with rounds - 1). A
    change larger than the interest that is under way keeps the run going: futility about
    the interest alone stopped true +20% changes in a 3x4 at round 3, below a fixed
    design's power at the same mean rounds. Non-binding: the efficacy boundaries ignore
    it, so stopping for futility can only lower the false "different" rate."""
    info, info_end = 1 / c.se**2, max_rounds / rounds / c.se**2
    df_end = c.df * (max_rounds - 1) / max(rounds - 1, 1)
    crit = max_t_quantile(corr, df_end, final_level)
    best = 0.0
    trend = math.log(c.ratio)
    deltas = [math.log1p(interest), -math.log1p(interest)]
    if abs(trend) > math.log1p(interest):
        deltas.append(trend)
    for delta in deltas:
        mean = (math.log(c.ratio) * info + delta * (info_end - info)) / math.sqrt(info_end)
        sd = math.sqrt((info_end - info) / info_end)
        # ndtr is sps.norm.cdf without its per-call argument checks (called per contrast)
        both = special.ndtr((mean - crit) / sd) + special.ndtr((-crit - mean) / sd)
        best = max(best, float(both))
    return best


# ---- drift ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Drift:
    per_round: float  # fitted trend of the round effects, ratio change per round
    over_run: float  # that trend from the first round to the last
    spread: float  # SD of the round effects net of their estimation noise, as a ratio change
    p: float | None  # the trend's p-value, for information only
    judged: float  # the smallest difference being judged
    large: bool
    reason: str


def drift(model: Model, judged: float) -> Drift:
    """How much the machine moved between rounds, from the round effects of the two-way
    model, against the smallest difference being judged (a margin, or the smallest
    sensitivity of the report). Large when the typical swing (2 SD) or the trend over the
    run reaches that difference: blocked comparisons remove it, but per-configuration
    means and comparisons across clusters built once carry it, and a trend that size also
    moves trials within a round against each other. Not a significance test: a drift can
    be certain and harmless, or unproven and large."""
    plain = fit(replace(model.obs, whole_plot_factors=()), model.resolution)
    c = model.obs.n_configs
    rounds = [r for r in range(model.obs.n_rounds) if np.any(plain.blocks[:, r] >= 0)]
    effects = np.array([plain.sub.coef[c + plain.blocks[plain.blocks[:, r] >= 0, r][0]]
                        for r in rounds])  # fmt: skip
    effects -= effects.mean()
    counts = np.array([np.sum(plain.blocks[:, r] >= 0) for r in rounds])
    noise = float(np.mean(plain.sub.sigma**2 / counts)) if plain.sub.df > 0 else 0.0
    sd = math.sqrt(max(0.0, float(np.var(effects, ddof=1)) - noise)) if len(rounds) > 1 else 0.0
    slope, p = 0.0, None
    if len(rounds) >= 3:
        trend = sps.linregress(rounds, effects)
        slope, p = float(trend.slope), float(trend.pvalue)
    over = math.expm1(slope * (rounds[-1] - rounds[0]))
    large = 2 * math.expm1(sd) >= judged or abs(over) >= judged
    size = f"rounds moved by {format_percent(round(math.expm1(sd), 4))} (SD) and "
    size += f"{0.0 if abs(over) < 5e-4 else over:+.1%} from first to last"
    verdict = "large" if large else "small"
    reason = f"{size}: {verdict} against the {format_percent(judged)} being judged"
    return Drift(math.expm1(slope), over, math.expm1(sd), p, judged, large, reason)
