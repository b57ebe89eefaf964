"""The statistics against independently computed values (scipy's own tests, hand-worked
examples) and by simulation: A/A experiments must rarely be called different, a real +10%
effect must be found."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from pgsweep import stats


def test_summary_matches_hand_worked_values() -> None:
    s = stats.summarize([10.0, 12.0, 14.0])
    assert s is not None
    assert (s.n, s.mean, s.median, s.min, s.max) == (3, 12.0, 12.0, 10.0, 14.0)
    assert s.stddev == pytest.approx(2.0)
    assert s.cv == pytest.approx(2.0 / 12.0)
    # t(0.975, 2) = 4.302653; half width = 4.302653 * 2 / sqrt(3)
    assert s.ci_low == pytest.approx(12 - 4.302653 * 2 / math.sqrt(3), rel=1e-6)
    assert s.ci_high == pytest.approx(12 + 4.968275, rel=1e-6)
    one = stats.summarize([5.0])
    assert one is not None and one.ci_low is None and one.stddev is None
    assert stats.summarize([]) is None


def test_compare_is_a_paired_t_test_on_log_ratios() -> None:
    base = {1: 1000.0, 2: 1100.0, 3: 950.0, 4: 1020.0}
    other = {1: 1100.0, 2: 1180.0, 3: 1060.0, 4: 1090.0, 5: 999.0}  # round 5 has no pair
    c = stats.compare(other, base)
    assert c is not None and c.n == 4
    d = np.log([1100 / 1000, 1180 / 1100, 1060 / 950, 1090 / 1020])
    ref = sps.ttest_1samp(d, 0.0)
    assert c.p == pytest.approx(ref.pvalue, rel=1e-9)
    assert c.ratio == pytest.approx(math.exp(d.mean()))
    ci = ref.confidence_interval(0.95)
    assert (c.ci_low, c.ci_high) == (
        pytest.approx(math.exp(ci.low)),
        pytest.approx(math.exp(ci.high)),
    )
    # 80% power at alpha 0.05: (t_.975 + t_.80) standard errors
    se = d.std(ddof=1) / 2
    assert c.detectable == pytest.approx(math.expm1((sps.t.ppf(0.975, 3) + sps.t.ppf(0.8, 3)) * se))


def test_holm_matches_the_textbook_example() -> None:
    # p = 0.01, 0.04, 0.03, 0.005 -> sorted 0.005*4, 0.01*3, 0.03*2, 0.04*1 (monotone)
    assert stats.holm([0.01, 0.04, 0.03, None, 0.005]) == [
        pytest.approx(0.03),
        pytest.approx(0.06),
        pytest.approx(0.06),
        None,
        pytest.approx(0.02),
    ]


def test_verdict_words() -> None:
    faster = stats.Comparison(5, 1.402, 1.31, 1.499, 0.0001, 0.05)
    assert stats.verdict(faster, True) == "faster: +40.2% [+31.0%, +49.9%]"
    assert stats.verdict(faster, False).startswith("higher: +40.2%")
    same = stats.Comparison(5, 0.989, 0.96, 1.02, 0.4, 0.07)
    assert stats.verdict(same, True) == (
        "no significant difference (-1.1% [-4.0%, +2.0%]); differences above 7% would have "
        "been seen"
    )
    assert stats.verdict(same, True, margin=0.05).startswith("equivalent within 5%")
    assert stats.verdict(same, True, margin=0.02).startswith("no significant")
    adjusted = stats.Comparison(5, 1.05, 1.01, 1.09, 0.03, 0.04, p_adjusted=0.09)
    assert stats.verdict(adjusted, True).startswith("no significant difference")


def test_drift_finds_a_trend_across_rounds() -> None:
    slope, p = stats.drift({r: 1000 * 1.03**r for r in range(1, 7)}) or (0.0, 1.0)
    assert slope == pytest.approx(0.03) and p < 0.001
    assert stats.drift({1: 1.0, 2: 2.0}) is None


def _simulate(effect: float, cv: float, rounds: int, rng: np.random.Generator) -> bool:
    """One experiment on a wandering machine: a shared per-round level (the slow drift
    that blocking removes) times independent noise; True when called different."""
    level = 1000 * np.exp(np.cumsum(rng.normal(0, 0.05, rounds)))
    a = level * rng.normal(1, cv, rounds)
    b = level * (1 + effect) * rng.normal(1, cv, rounds)
    c = stats.compare(dict(enumerate(b)), dict(enumerate(a)))
    assert c is not None and c.p is not None
    return c.p < stats.ALPHA


@pytest.mark.parametrize("cv", [0.02, 0.05])
def test_a_a_experiments_are_rarely_called_different(cv: float) -> None:
    rng = np.random.default_rng(42)
    share = np.mean([_simulate(0.0, cv, 5, rng) for _ in range(1000)])
    # 5% expected; binomial sd over 1000 runs is 0.7%, so 7% leaves 3 sd of slack
    assert share <= 0.07, share


def test_a_ten_percent_effect_is_found_with_cv_2_percent_and_5_trials() -> None:
    rng = np.random.default_rng(7)
    share = np.mean([_simulate(0.10, 0.02, 5, rng) for _ in range(1000)])
    assert share >= 0.95, share


def test_unpaired_comparison_is_welch_on_logs() -> None:
    before = [1000.0, 1040.0, 980.0, 1010.0]
    after = [1100.0, 1210.0, 1050.0, 1150.0, 1180.0]
    c = stats.compare_unpaired(after, before)
    assert c is not None
    la, lb = np.log(after), np.log(before)
    ref = sps.ttest_ind(la, lb, equal_var=False)
    assert c.p == pytest.approx(ref.pvalue, rel=1e-9)
    assert c.ratio == pytest.approx(math.exp(la.mean() - lb.mean()))
    ci = ref.confidence_interval(0.95)
    assert c.ci_low == pytest.approx(math.exp(ci.low), rel=1e-9)
    assert c.ci_high == pytest.approx(math.exp(ci.high), rel=1e-9)
