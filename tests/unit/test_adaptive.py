"""Adaptive rounds (`[repeat] rounds = "auto"`) over results written through the real
store: the look the engine makes after each round (`analysis.stop_reason`) and the report's
verdicts where the run stopped, judged at the sequential level, not the fixed-sample one.
The error rates and power of the looks themselves are simulated in test_simulations."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from pgsweep import analysis
from pgsweep.plan import Adaptive
from pgsweep.store import Results
from synthetic import make_results

AUTO = Adaptive(min_rounds=3, max_rounds=10, decide="baseline", precision=0.02)
FACTORS = {"server.synchronous_commit": ["off", "on"]}


def tps(effect: float, cv: float, seed: int) -> dict[tuple[int, int], float]:
    """Two configurations over 10 rounds: round levels that wander, the second
    configuration `effect` times the first, log-normal noise of `cv`."""
    rng = np.random.default_rng(seed)
    out = {}
    for r in range(1, 11):
        level = 1000 * math.exp(rng.normal(0, 0.1))
        for c in (0, 1):
            out[(c, r)] = level * (effect if c else 1.0) * math.exp(rng.normal(0, cv))
    return out


def _tps_row(a: analysis.Analysis) -> dict:  # type: ignore[type-arg]
    (row,) = [c for c in a.comparisons if c["metric"] == "tps"]
    return row


def test_a_large_effect_stops_at_the_first_look_and_is_called(tmp_path: Path) -> None:
    """-50% at 3% noise with at most 6 rounds. (With 2 configurations the first look has
    2 degrees of freedom; at most 10 rounds its boundary is so far out that such an effect
    needs a fourth round about half the time.)"""
    six = Adaptive(min_rounds=3, max_rounds=6, decide="baseline", precision=0.02)
    for seed in range(5):
        data = tps(0.5, 0.03, seed=seed)
        folder = make_results(tmp_path / f"s{seed}", FACTORS, data, 6, adaptive=six)
        with Results(folder) as res:
            assert analysis.stop_reason(res, 2) is None  # before the first look
            assert analysis.stop_reason(res, 3) == "every comparison decided"
    folder = make_results(tmp_path / "auto", FACTORS, data, 6, adaptive=six, last_round=3)
    with Results(folder) as res:
        auto = analysis.analyse(res)
    row = _tps_row(auto)
    assert row["decision"] == "different" and row["ci_high"] < 1
    assert auto.experiment["rounds"] == 3
    seq = auto.method["adaptive"]
    assert seq["stopped_at"] == 3 and seq["max_rounds"] == 6 and seq["reason"].startswith("every")
    assert "group-sequential" in auto.method["critical"]
    # the same three rounds judged as a fixed 3-round experiment: a narrower interval,
    # because a look that may be followed by others must spend less of the 5%
    fixed = make_results(tmp_path / "fixed", FACTORS, data, 3)
    with Results(fixed) as res:
        plain = _tps_row(analysis.analyse(res))
    assert math.isclose(plain["ratio"], row["ratio"], rel_tol=1e-9)
    width = math.log(row["ci_high"] / row["ci_low"])
    assert width > 1.5 * math.log(plain["ci_high"] / plain["ci_low"])


def test_an_a_a_stops_early_for_futility_and_calls_nothing(tmp_path: Path) -> None:
    stops = []
    for seed in range(5):
        data = tps(1.0, 0.05, seed=100 + seed)
        folder = make_results(tmp_path / f"aa{seed}", FACTORS, data, 10, adaptive=AUTO)
        with Results(folder) as res:
            first = next(r for r in range(3, 11) if analysis.stop_reason(res, r))
            reason = analysis.stop_reason(res, first)
        stopped = ("futility", "every interval inside")  # nothing worth finding, either way
        assert reason is not None and reason.startswith(stopped), reason
        cut = make_results(tmp_path / f"cut{seed}", FACTORS, data, 10, adaptive=AUTO,
                           last_round=first)  # fmt: skip
        with Results(cut) as res:
            row = _tps_row(analysis.analyse(res))
        assert row["decision"] != "different", row
        stops.append(first)
    assert max(stops) < 10, stops  # futility ends a true null before the maximum


def test_a_run_interrupted_between_looks_says_so(tmp_path: Path) -> None:
    data = tps(1.0, 0.05, seed=3)
    folder = make_results(tmp_path / "r", FACTORS, data, 10, adaptive=AUTO, last_round=2)
    with Results(folder) as res:
        seq = analysis.analyse(res).method["adaptive"]
    assert seq["stopped_at"] is None and "before the first look (round 3)" in seq["reason"]


def test_early_looks_with_two_configurations_stay_finite(tmp_path: Path) -> None:
    """At most 30 rounds, first look after round 3 of two configurations: the boundary is
    so far out (2 degrees of freedom) that critical values reach 1e5 and more. Neither the
    look nor the report may overflow, and the JSON report must stay valid."""
    thirty = Adaptive(min_rounds=3, max_rounds=30, decide="baseline", precision=0.02)
    data = {(c, r): v for (c, r), v in tps(0.9, 0.08, seed=1).items() if r <= 3}
    folder = make_results(tmp_path / "r", FACTORS, data, 30, adaptive=thirty, last_round=3)
    with Results(folder) as res:
        assert analysis.stop_reason(res, 3) is None
        report = analysis.analyse(res)
    row = _tps_row(report)
    assert row["decision"] != "different" and row["ci_low"] > 0 and math.isfinite(row["ci_high"])
    assert "too few rounds to detect" in row["verdict"]
    assert json.loads(report.to_json())["method"]["adaptive"]["rounds"] == 3


def test_a_round_cut_short_is_left_out_of_the_verdicts(tmp_path: Path) -> None:
    """Interrupted inside round 4: the report judges rounds 1-3 (the last look the run
    made) and says round 4 is left out, instead of replaying a look the run never made."""
    data = tps(0.5, 0.03, seed=2)
    six = Adaptive(min_rounds=3, max_rounds=6, decide="baseline", precision=0.02)
    partial = {k: v for k, v in data.items() if k[1] <= 3 or k == (0, 4)}
    folder = make_results(tmp_path / "r", FACTORS, partial, 6, adaptive=six, last_round=4,
                          skip={(1, 4)})  # fmt: skip
    with Results(folder) as res:
        report = analysis.analyse(res)
    assert report.experiment["rounds"] == 3 and report.method["adaptive"]["rounds"] == 3
    assert any("round 4 was cut short" in n for n in report.method["notes"])
