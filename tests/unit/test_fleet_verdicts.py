"""Host groups as blocks (verdict.groups): a machine's own speed changes no verdict, the
configuration x group test holds its false rate on recorded noise, finds and names a
group whose effect differs. bench/fleet_verdicts.py runs the same with more repetitions."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from pgsweep.verdict import Observations, fit, report_families
from pgsweep.verdict.groups import interaction
from pgsweep.verdict.simulate import TWO, fleet, sources

NOISE = Path(__file__).resolve().parents[1] / "data" / "noise"
GROUPS = ["a", "a", "b", "b", "c", "c"]


def _obs(values: np.ndarray) -> Observations:
    return Observations(values, [{"x": "off"}, {"x": "on"}, {"x": "more"}], 0)


def test_a_groups_offset_changes_nothing() -> None:
    """Rounds are nested in groups: multiplying one group's every trial by 3 leaves the
    verdicts and the interaction test exactly as they were."""
    rng = np.random.default_rng(7)
    values = np.exp(rng.normal(7, 0.05, (3, 6)))
    moved = values.copy()
    moved[:, 2:4] *= 3.0
    a, b = interaction(_obs(values), GROUPS), interaction(_obs(moved), GROUPS)
    assert np.isclose(a.f, b.f) and np.isclose(a.p, b.p)
    ca = report_families(fit(_obs(values)))[0].contrasts
    cb = report_families(fit(_obs(moved)))[0].contrasts
    assert [round(c.ratio, 9) for c in ca] == [round(c.ratio, 9) for c in cb]


def test_a_group_that_disagrees_is_named() -> None:
    rng = np.random.default_rng(3)
    values = np.exp(rng.normal(7, 0.01, (3, 6)))
    values[1, 4:6] *= 1.3  # "on" is 30% faster on group c only
    test = interaction(_obs(values), GROUPS)
    assert test.differs and test.p < 0.001
    assert {(e.config, e.group) for e in test.disagree} == {(1, "c")}
    (e,) = test.disagree
    assert abs(e.ratio - 1.3) < 0.05 and abs(e.others - 1.0) < 0.05


def test_one_group_is_no_test() -> None:
    test = interaction(_obs(np.full((3, 4), 100.0)), ["a"] * 4)
    assert not test.differs and "one host group" in test.why_not


def test_false_rates_on_recorded_noise_with_host_offsets() -> None:
    """A/A over 3 groups x 2 rounds, 30% host offsets, tpcb noise: the report's false
    "different" and the x group test's false "differs" stay near 5% (bench: 2.8-6.0% and
    3.5-7.9% over designs and noise models); a t test ignoring rounds and groups loses
    all power to the offsets instead."""
    src = sources(NOISE, "tpcb")["boot"]
    aa = fleet(TWO, 6, 3, src, reps=300, seed=11, offset_sd=0.3)
    assert aa["report"] <= 0.09 and aa["interaction"] <= 0.10
    real = fleet(TWO, 9, 3, src, reps=150, seed=12, offset_sd=0.3,
                 effect={(1, g): 1.15 for g in range(3)})  # fmt: skip
    assert real["report"] >= 0.5 and real["report"] > 3 * real["naive"]
    one = fleet(TWO, 9, 3, src, reps=150, seed=13, offset_sd=0.3, effect={(1, 0): 1.4})
    assert one["interaction"] >= 0.5 and one["named"] >= 0.4
