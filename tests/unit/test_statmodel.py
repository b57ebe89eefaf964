"""The model behind the verdicts, formula by formula, against independent computations:
statsmodels OLS for the two-way and split-plot fits, scipy's Dunnett and t/noncentral t
for critical values and power, Dunnett's published table, the published O'Brien-Fleming
(Lan-DeMets) boundaries, and the wording rules."""

from __future__ import annotations

import math
from dataclasses import replace
from itertools import product

import numpy as np
import pytest
import statsmodels.api as smapi
from scipy import stats as sps

from pgsweep import verdict as sm
from pgsweep.verdict import sequential as sq

LEVELS_2X2 = [{"a": a, "b": b} for a, b in product(("x", "y"), (1, 2))]


def _data(configs: int, rounds: int, seed: int, sd: float = 0.05) -> np.ndarray:
    rng = np.random.default_rng(seed)
    effects = rng.normal(0, 0.1, configs)[:, None]
    return np.exp(7 + effects + rng.normal(0, 0.1, rounds) + rng.normal(0, sd, (configs, rounds)))


def _ols(y: np.ndarray, blocks: np.ndarray) -> tuple[np.ndarray, object]:
    """Independent fit: statsmodels OLS with dummy coding (configuration 0 and the first
    block as references), on the observed cells."""
    configs, rounds = y.shape
    rows = [(i, r) for i in range(configs) for r in range(rounds) if not np.isnan(y[i, r])]
    n_blocks = int(blocks.max()) + 1
    x = np.zeros((len(rows), configs + n_blocks - 1))
    for n, (i, r) in enumerate(rows):
        x[n, 0] = 1.0
        if i:
            x[n, i] = 1.0
        if blocks[i, r]:
            x[n, configs - 1 + blocks[i, r]] = 1.0
    return x, smapi.OLS(np.log([y[i, r] for i, r in rows]), x).fit()


def test_two_way_fit_matches_statsmodels_with_missing_cells() -> None:
    v = _data(4, 6, seed=3)
    v[2, 3] = v[1, 0] = np.nan
    obs = sm.Observations(v, LEVELS_2X2, 0)
    model = sm.fit(obs)
    x, ols = _ols(v, np.tile(np.arange(6), (4, 1)))
    assert model.sub.df == ols.df_resid == 24 - 2 - 3 - 5 - 1
    assert model.sub.sigma == pytest.approx(math.sqrt(ols.scale), rel=1e-9)
    fam = sm.baseline_family(model)
    for c in fam.contrasts:
        assert c.error == "pooled" and c.df == ols.df_resid
        assert math.log(c.ratio) == pytest.approx(ols.params[c.config], rel=1e-9)
        assert c.t == pytest.approx(ols.tvalues[c.config], rel=1e-9)
    # main effect of b and the a x b interaction, as contrasts on the OLS parameters
    eff = {c.label: c for c in sm.effects_family(model).contrasts}
    assert list(eff)[:2] == ["a=y vs x", "b=2 vs 1"]  # main effects first
    for label, w in (("b=2 vs 1", [0, 0.5, -0.5, 0.5]), ("a=y vs x by b=2 vs 1", [0, -1, -1, 1])):
        lvec = np.zeros(x.shape[1])
        lvec[1:4] = w[1:]
        test = ols.t_test(lvec)
        assert math.log(eff[label].ratio) == pytest.approx(float(test.effect[0]), rel=1e-9)
        assert eff[label].t == pytest.approx(float(test.tvalue[0, 0]), rel=1e-9)


def test_critical_value_is_dunnetts_from_scipy_in_the_one_way_case() -> None:
    """A one-way layout (3 groups of 3: df 6) and a two-way one with the same df (3
    configurations x 4 rounds) have the same Dunnett critical value; scipy.stats.dunnett
    computes it for the one-way case. Its CIs are randomised QMC: agree to 2e-3."""
    rng = np.random.default_rng(5)
    groups = [rng.normal(0, 1, 3) for _ in range(3)]
    ci = sps.dunnett(*groups[1:], control=groups[0], rng=np.random.default_rng(1))
    ci = ci.confidence_interval()
    s = math.sqrt(sum(float(((g - g.mean()) ** 2).sum()) for g in groups) / 6)
    scipy_q = (ci.high - ci.low) / 2 / (s * math.sqrt(2 / 3))
    model = sm.fit(sm.Observations(_data(3, 4, seed=9), [{"a": i} for i in range(3)], 0))
    fam = sm.baseline_family(model)
    assert [c.df for c in fam.contrasts] == [6, 6]
    for c in fam.contrasts:
        assert c.critical == pytest.approx(float(scipy_q[0]), rel=2e-3)
        half = math.log(c.high / c.ratio)
        assert half == pytest.approx(c.critical * math.log(c.ratio) / c.t, rel=1e-9)


@pytest.mark.parametrize("sizes", [[6, 6, 6, 6], [5, 8, 4, 7, 6], [4] * 8])
def test_max_t_against_scipy_dunnett_and_multivariate_t(sizes: list[int]) -> None:
    rng = np.random.default_rng(len(sizes))
    groups = [rng.normal(0, 1, n) for n in sizes]
    res = sps.dunnett(*groups[1:], control=groups[0], rng=np.random.default_rng(2))
    ci = res.confidence_interval()
    df = sum(sizes) - len(sizes)
    s = math.sqrt(sum(float(((g - g.mean()) ** 2).sum()) for g in groups) / df)
    n0, rest = sizes[0], np.array(sizes[1:])
    corr = 1 / np.sqrt(np.outer(1 + n0 / rest, 1 + n0 / rest))
    np.fill_diagonal(corr, 1.0)
    q = sm.max_t_quantile(corr, df)
    est = np.array([g.mean() - groups[0].mean() for g in groups[1:]])
    se = s * np.sqrt(1 / rest + 1 / n0)
    np.testing.assert_allclose(est - q * se, ci.low, atol=2e-3)
    np.testing.assert_allclose(est + q * se, ci.high, atol=2e-3)
    np.testing.assert_allclose(sm.max_t_sf(np.abs(est / se), corr, df), res.pvalue, atol=2e-3)
    k = len(rest)
    mvt = sps.multivariate_t(shape=corr, df=df)
    inside = mvt.cdf(np.full(k, q), lower_limit=np.full(k, -q), random_state=3)
    assert 1 - inside == pytest.approx(0.05, abs=1e-3)


def test_dunnett_published_table() -> None:
    """Dunnett (1955/1964) two-sided 5% critical values, to the table's two decimals."""
    for k, df, table in ((1, 10, 2.23), (2, 6, 2.86), (3, 20, 2.54), (4, 60, 2.51)):
        corr = np.full((k, k), 0.5) + 0.5 * np.eye(k)
        assert sm.max_t_quantile(corr, df) == pytest.approx(table, abs=0.006)


def test_t_quantiles_and_noncentral_power_against_scipy() -> None:
    assert sm.max_t_quantile(np.eye(1), 7) == pytest.approx(float(sps.t.ppf(0.975, 7)))
    for q, df in ((2.36, 7), (4.30, 2), (3.0, 40)):
        lam = sm.noncentrality(q, df)
        power = sps.nct.sf(q, df, lam) + sps.nct.cdf(-q, df, lam)
        assert power == pytest.approx(0.80, abs=1e-6)
    # the normal limit: 1.96 + 0.8416, the textbook sample-size constant
    assert sm.noncentrality(1.959964, 1e7) == pytest.approx(2.8016, abs=2e-4)
    # upper 80% bound on an SD from 10 df: sqrt(10 / chi2_0.20(10))
    assert sm.sd_upper(1.0, 10) == pytest.approx(math.sqrt(10 / sps.chi2.ppf(0.2, 10)))


def test_planner_agrees_with_a_direct_computation() -> None:
    sigma, rounds, configs = 0.05, 8, 3
    corr = np.array([[1.0, 0.5], [0.5, 1.0]])
    df = (rounds - 1) * (configs - 1)
    q = sm.max_t_quantile(corr, df)
    lam = sm.noncentrality(q, df)
    assert sq.sensitivity_for(sigma, rounds, configs) == pytest.approx(
        math.expm1(lam * sigma * math.sqrt(2 / rounds)), rel=1e-12)  # fmt: skip
    need = sq.rounds_needed(0.05, 0.08, 3)
    assert need is not None
    assert sq.sensitivity_for(0.05, need, 3) <= 0.08 < sq.sensitivity_for(0.05, need - 1, 3)
    assert sq.rounds_needed(0.5, 0.001, 3, max_rounds=20) is None


def test_fallback_to_paired_t_when_one_configuration_is_much_noisier() -> None:
    rng = np.random.default_rng(4)
    v = np.exp(rng.normal(0, 0.1, 8)[None, :] + rng.normal(0, 0.01, (4, 8)))
    v[3] *= np.exp(rng.normal(0, 0.1, 8))  # one configuration 100x the variance
    model = sm.fit(sm.Observations(v, LEVELS_2X2, 0))
    assert not model.pooled and model.heterogeneity_p is not None
    assert model.heterogeneity_p < sm.HETERO_P
    fam = sm.baseline_family(model)
    assert fam.method.startswith("Bonferroni")
    for c in fam.contrasts:
        d = np.log(v[c.config] / v[0])
        ref = sps.ttest_1samp(d, 0.0)
        assert c.error == "paired" and c.df == 7
        assert c.t == pytest.approx(ref.statistic, rel=1e-9)
        assert c.critical == pytest.approx(sps.t.isf(0.05 / 6, 7), rel=1e-9)
        assert c.p_adjusted == pytest.approx(min(1.0, 3 * ref.pvalue), rel=1e-9)


def test_decision_never_disagrees_with_its_interval() -> None:
    for seed in range(30):
        v = _data(4, 4, seed, sd=0.03)
        for fam in (sm.baseline_family(sm.fit(sm.Observations(v, LEVELS_2X2, 0))),
                    sm.effects_family(sm.fit(sm.Observations(v, LEVELS_2X2, 0)))):  # fmt: skip
            for c in fam.contrasts:
                assert (c.decision == "different") == (c.low > 1 or c.high < 1)
                assert c.low <= c.ratio <= c.high
                if abs(c.p_adjusted - 0.05) > 2e-3:  # away from Monte-Carlo precision
                    assert (c.decision == "different") == (c.p_adjusted < 0.05)


@pytest.mark.filterwarnings("ignore::statsmodels.tools.sm_exceptions.SingularMatrixWarning")
def test_split_plot_error_terms_against_statsmodels() -> None:
    """Replicated whole plots: the cluster factor `a` against the build means (group +
    round OLS, (G-1)(R-1) df); `b` and the interaction within builds."""
    v = _data(4, 5, seed=8)
    obs = sm.Observations(v, LEVELS_2X2, 0, whole_plot_factors=("a",), rebuild_every=1)
    eff = {c.label: c for c in sm.effects_family(sm.fit(obs)).contrasts}
    main_a = eff["a=y vs x"]
    assert (main_a.error, main_a.df, main_a.replicates) == ("whole-plot", 4, 5)
    means = np.log(v).reshape(2, 2, 5).mean(axis=1)  # build means: group x round
    _, ols = _ols(np.exp(means), np.tile(np.arange(5), (2, 1)))
    assert math.log(main_a.ratio) == pytest.approx(ols.params[1], rel=1e-9)
    assert main_a.t == pytest.approx(ols.tvalues[1], rel=1e-9)
    builds = np.array([[0, 1, 2, 3, 4]] * 2 + [[5, 6, 7, 8, 9]] * 2)
    _, within = _ols(v, builds)
    assert eff["b=2 vs 1"].error == "pooled" and eff["b=2 vs 1"].df == within.df_resid
    # one build per level for the whole run: the same interval, but no verdict, whatever
    # the interval says
    once = sm.Observations(v * np.array([[1.3], [1.3], [1], [1]]), LEVELS_2X2, 0,
                           whole_plot_factors=("a",), rebuild_every=0)  # fmt: skip
    c = sm.effects_family(sm.fit(once)).contrasts[0]
    assert (c.error, c.replicates, c.decision) == ("within-run only", 1, "unreplicated")
    assert c.high < 1  # its interval excludes no change, and still no "slower"
    assert "run-to-run noise only" in sm.caveats(c)[0]
    words = sm.verdict(c, True)
    assert words.startswith(f"not a verdict: these builds differ by {sm.interval_text(c)}")
    assert "replicate" in words
    assert "slower" not in words and "faster" not in words


@pytest.mark.filterwarnings("ignore::statsmodels.tools.sm_exceptions.SingularMatrixWarning")
def test_instances_that_serve_several_rounds_are_judged_on_their_means() -> None:
    """rebuild_every = 2 over 6 rounds: three instances per level; the cluster factor is
    judged on the instance means (group + period OLS, (G-1)(P-1) = 2 df)."""
    v = _data(4, 6, seed=9)
    obs = sm.Observations(v, LEVELS_2X2, 0, whole_plot_factors=("a",), rebuild_every=2)
    assert obs.periods() == [0, 0, 1, 1, 2, 2]
    eff = {c.label: c for c in sm.effects_family(sm.fit(obs)).contrasts}
    main_a = eff["a=y vs x"]
    assert (main_a.error, main_a.df, main_a.replicates) == ("whole-plot", 2, 3)
    means = np.log(v).reshape(2, 2, 3, 2).mean(axis=(1, 3))  # instance means: group x period
    _, ols = _ols(np.exp(means), np.tile(np.arange(3), (2, 1)))
    assert math.log(main_a.ratio) == pytest.approx(ols.params[1], rel=1e-9)
    assert main_a.t == pytest.approx(ols.tvalues[1], rel=1e-9)
    # within groups, blocked by round: 24 trials less 2 x (2 configurations + 6 rounds - 1)
    assert eff["b=2 vs 1"].error == "pooled" and eff["b=2 vs 1"].df == 24 - 2 * 7


def test_one_budget_for_both_families_of_a_report() -> None:
    """A 2x2's baseline comparisons and effects judged together: one critical value over
    the six contrasts, above either family's alone; a contrast printed in both (the one
    factor's effect, with two configurations) costs nothing."""
    v = _data(4, 6, seed=4)
    model = sm.fit(sm.Observations(v, LEVELS_2X2, 0))
    both = sm.report_families(model)
    alone = sm.baseline_family(model), sm.effects_family(model)
    q = {c.critical for f in both for c in f.contrasts}
    assert len(q) == 1 and q.pop() > max(alone[0].contrasts[0].critical,
                                         alone[1].contrasts[0].critical)  # fmt: skip
    two = sm.fit(sm.Observations(_data(2, 6, seed=5), [{"a": 0}, {"a": 1}], 0))
    pair = sm.report_families(two)
    assert pair[0].contrasts[0].critical == pytest.approx(float(sps.t.isf(0.025, 5)), rel=1e-4)
    assert pair[1].contrasts[0].critical == pair[0].contrasts[0].critical


def test_config_means_respect_rounds() -> None:
    v = _data(3, 5, seed=2)
    model = sm.fit(sm.Observations(v, [{"a": i} for i in range(3)], 0))
    t = sps.t.ppf(0.975, model.sub.df)
    for m in sm.config_means(model):
        assert m.mean == pytest.approx(float(np.exp(np.log(v[m.config]).mean())), rel=1e-9)
        half = math.log(m.high / m.mean)
        assert half == pytest.approx(t * model.sub.sigma / math.sqrt(5), rel=1e-9)


def test_drift_is_judged_against_the_differences() -> None:
    rng = np.random.default_rng(3)
    trend = np.exp(np.linspace(0, 0.2, 8))  # +20% over the run
    v = np.exp(rng.normal(0, 0.01, (2, 8))) * trend
    model = sm.fit(sm.Observations(v, [{"a": 0}, {"a": 1}], 0))
    d = sq.drift(model, judged=0.05)
    assert d.large and d.over_run == pytest.approx(math.expm1(0.2), abs=0.02)
    calm = sm.fit(sm.Observations(np.exp(rng.normal(0, 0.01, (2, 8))), [{"a": 0}, {"a": 1}], 0))
    assert not sq.drift(calm, judged=0.05).large


# ---- sequential ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("k", "published"),
    [(4, [4.3326, 2.9631, 2.3590, 2.0141]), (5, [4.8769, 3.3569, 2.6803, 2.2898, 2.0310])],
)
def test_obrien_fleming_lan_demets_boundaries(k: int, published: list[float]) -> None:
    """Two-sided 5%, equally spaced looks: the published Lan-DeMets O'Brien-Fleming-type
    boundaries (DeMets & Lan 1994; gsDesign sfLDOF at one-sided 2.5%)."""
    times = [i / k for i in range(1, k + 1)]
    cumulative = [sq.obf_spending(t) for t in times]
    for t, a in zip(times, cumulative, strict=True):
        assert a == pytest.approx(4 * sps.norm.sf(sps.norm.isf(0.0125) / math.sqrt(t)))
    assert cumulative[-1] == pytest.approx(0.05)
    spend = np.diff([0.0, *cumulative]).tolist()
    assert sq.boundaries(times, spend) == pytest.approx(published, abs=1e-3)


def test_plan_resume_and_extension_are_guarded() -> None:
    plan = sq.make_plan(10, looks=[3, 5, 7, 10])
    assert sum(plan.spent) == pytest.approx(0.05)
    assert sq.check_resume(plan, 2, 10) is None
    assert "new plan" in str(sq.check_resume(plan, 0, 12))
    assert "spent" in str(sq.check_resume(plan, 4, 12))
    with pytest.raises(ValueError, match="spent"):
        sq.extend_plan(plan, 4, 15)
    longer = sq.extend_plan(plan, 2, 15)
    assert longer.z[:2] == plan.z[:2] and longer.frozen == 2
    assert sum(longer.spent) == pytest.approx(0.05) and "extended" in longer.note
    obs = sm.Observations(_data(2, 12, seed=1), [{"a": 0}, {"a": 1}], 0)
    with pytest.raises(ValueError, match="extend_plan"):
        sq.decide_at_look(plan, obs)
    with pytest.raises(ValueError, match="not a planned look"):
        sq.decide_at_look(plan, obs.first_rounds(4))


def test_a_decision_made_at_a_look_stays_made() -> None:
    plan = sq.make_plan(6, looks=[3, 6])
    rng = np.random.default_rng(2)
    v = np.exp(7 + rng.normal(0, 0.1, 6) + rng.normal(0, 0.002, (2, 6)))
    v[1] *= 1.2
    v[1, 3:] /= 1.2  # the last rounds alone would not say "faster"
    obs = sm.Observations(v, [{"a": 0}, {"a": 1}], 0)
    first = sq.decide_at_look(plan, obs.first_rounds(3), interest=0.5)
    assert first.stop and first.reason == "every comparison decided"
    assert sm.verdict(first.contrasts()[0], obs.higher_is_better).startswith("faster: +19.9%")
    # a later look whose interval alone would not decide keeps the earlier decision
    later = sq.decide_at_look(plan, obs, interest=0.5, decided=first.decided)
    assert later.family.contrasts[0].decision == "undecided"
    assert later.contrasts()[0] is first.decided[first.family.contrasts[0].label]


def test_a_decided_contrast_narrows_to_where_its_looks_intervals_overlap() -> None:
    """A comparison decided at the first look keeps its decision, and its interval is the
    overlap of that look's and the latest one's: the gate reads it. The first look's alone
    (a paired t at 2 degrees of freedom and a strict boundary) once ended at -0.1% for a
    configuration 95% slower, and `--fail-if-slower 3%` passed it (stop 45)."""
    plan = sq.make_plan(6, looks=[3, 6])
    rng = np.random.default_rng(5)
    v = np.exp(7 + rng.normal(0, 0.1, 6) + rng.normal(0, 0.08, (2, 6)))
    v[1] *= 0.3
    obs = sm.Observations(v, [{"a": 0}, {"a": 1}], 0)
    first = sq.decide_at_look(plan, obs.first_rounds(3), interest=0.5)
    (at3,) = first.contrasts()
    assert at3.decision == "different" and at3.high < 1, at3
    later = sq.decide_at_look(plan, obs, interest=0.5, decided=first.decided)
    (alone,) = later.family.contrasts
    (kept,) = later.contrasts()
    assert kept.decision == "different"
    assert kept.low == max(at3.low, alone.low) and kept.high == min(at3.high, alone.high)
    assert kept.high < at3.high and kept.low <= kept.ratio <= kept.high, (at3, alone, kept)
    # the decision's grounds are the deciding look's: its p-value (below alpha) and critical
    # value, not the latest look's, which test at that look's level
    assert (kept.p_adjusted, kept.critical) == (at3.p_adjusted, at3.critical)
    assert kept.p_adjusted < sq.ALPHA and alone.critical != at3.critical, (at3, alone)
    assert (kept.ratio, kept.se, kept.df) == (alone.ratio, alone.se, alone.df)
    # here the latest interval lies inside the first: a deciding interval that only partly
    # overlaps the latest one shows which bound comes from which (neither interval alone)
    cut = replace(at3, low=(alone.low + alone.ratio) / 2)
    (part,) = replace(later, decided={cut.label: cut}).contrasts()
    assert (part.low, part.high) == (cut.low, alone.high), (cut, alone, part)
    assert part.decision == "different" and part.ratio == alone.ratio


# ---- words --------------------------------------------------------------------------


def _contrast(ratio: float, low: float, high: float, decision: str, **kw: object) -> sm.Contrast:
    base = dict(kind="baseline", label="x", terms=(), config=1, ratio=ratio, low=low, high=high,
                se=0.01, t=1.0, df=10.0, critical=2.0, p_adjusted=0.5, decision=decision,
                error="pooled", replicates=5, detectable=0.08, floored=False, margin=None,
                weights=(1.0, -1.0))  # fmt: skip
    return sm.Contrast(**{**base, **kw})  # type: ignore[arg-type]


def test_margins_print_without_rounding() -> None:
    assert [sm.format_percent(m) for m in (0.025, 0.02, 0.001, 0.125, 0.07)] == [
        "2.5%", "2%", "0.1%", "12.5%", "7%"]  # fmt: skip
    c = _contrast(1.003, 0.99, 1.02, "equivalent", margin=0.025)
    assert sm.verdict(c, True) == "equivalent within 2.5%: +0.3% [-1.0%, +2.0%]"


def test_verdict_words() -> None:
    up = _contrast(1.402, 1.31, 1.499, "different")
    assert sm.verdict(up, True) == "faster: +40.2% [+31.0%, +49.9%]"
    assert sm.verdict(up, False) == "higher: +40.2% [+31.0%, +49.9%]"
    down = _contrast(0.9, 0.85, 0.95, "different")
    assert sm.verdict(down, True).startswith("slower: -10.0%")
    assert sm.verdict(down, False).startswith("lower: -10.0%")
    none = _contrast(0.989, 0.96, 1.02, "undecided", detectable=0.08)
    assert sm.verdict(none, True) == (
        "no significant difference (-1.1% [-4.0%, +2.0%]); differences above 8% would have "
        "been detected with 80% power")  # fmt: skip
    for c in (up, down, none):
        assert "equal " not in sm.verdict(c, True)


def test_no_zero_width_interval_from_whole_microseconds() -> None:
    """Three rounds of 0.042 ms everywhere: the noise SD would be 0; it is floored at the
    resolution (0.001 ms, found from the values) and the family says so."""
    v = np.full((2, 3), 0.042)
    obs = sm.Observations(v, [{"a": 0}, {"a": 1}], 0, higher_is_better=False)
    model = sm.fit(obs)
    assert model.resolution == pytest.approx(0.001)
    fam = sm.baseline_family(model)
    c = fam.contrasts[0]
    assert c.floored and c.high / c.low > 1.03 and any("resolution" in n for n in fam.notes)
    text = sm.verdict(c, False)
    assert "[+0.0%, +0.0%]" not in text and "-0.0%" not in text
    # decided but near 0: more decimals rather than a bound printed as 0
    tight = _contrast(1.0004, 1.00002, 1.0008, "different")
    assert sm.verdict(tight, True) == "faster: +0.040% [+0.002%, +0.080%]"
