"""The numbers the HTML report's plots print: values in tooltips and beside rows, tick
labels, and the ticks of a change axis (a ratio shown as a change in percent)."""

from __future__ import annotations

import pytest

from pgsweep.outputs.plots import _change_ticks
from pgsweep.outputs.svgplot import Scale, number


@pytest.mark.parametrize(
    ("value", "text"),
    [(3091.4, "3,091"), (123456.7, "123,457"), (2.67, "2.67"), (12.34, "12.3"),
     (0.05, "0.050"), (-4.0, "-4.00"), (0.0, "0")],
)
def test_a_value_has_three_significant_digits_and_none_beyond_the_point_above_100(
    value: float, text: str
) -> None:
    # a p99 of 2.67 ms once printed as "2.6700": a value's step was a hundredth of itself
    assert number(value) == text


@pytest.mark.parametrize(
    ("value", "step", "text"),
    [(2.5, 2.5, "2.5"), (1000.0, 250.0, "1,000"), (0.0002, 0.0001, "0.0002"),
     (-1e-9, 0.5, "0.0"), (7.0, 1e-6, "7.000000")],
)
def test_a_tick_has_the_decimals_its_step_needs_and_never_minus_zero(
    value: float, step: float, text: str
) -> None:
    assert number(value, step) == text


@pytest.mark.parametrize(
    ("lo", "hi", "labels"),
    [(0.8, 1.3, ["-20%", "-10%", "0%", "+10%", "+20%", "+30%"]),
     (0.95, 1.05, ["-4%", "-2%", "0%", "+2%", "+4%"]),
     (0.5, 4.0, ["-50%", "-20%", "0%", "+25%", "+50%", "+100%", "+200%"])],
)
def test_a_change_axis_is_labelled_in_signed_percent_with_the_baseline_at_0(
    lo: float, hi: float, labels: list[str]
) -> None:
    values, got = _change_ticks(Scale(lo, hi, log=True))
    assert got == labels
    assert values[labels.index("0%")] == pytest.approx(1.0)  # the baseline's tick is 1
