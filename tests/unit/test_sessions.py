"""The decision rules between sessions and of the gate: `compare` gives a verdict only
with a measured session-to-session spread (more sessions of a side, or an A/A
calibration), judged on session means; the CI gate decides from interleaved evidence or a
calibrated compare, on a one-sided bound, and says what slowdown it catches; a comparison
across levels built once is never gated. Results folders are written through the real
store (tests/synthetic.py)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as sps

from pgsweep import analysis
from pgsweep.analysis import compare
from pgsweep.core import Cost
from pgsweep.errors import PgsweepError
from pgsweep.outputs import gate
from pgsweep.store import Results
from pgsweep.verdict import sessions as ss
from synthetic import make_results

ONE = {"server.work_mem": ["4MB"]}


def session(folder: Path, level: float, seed: int, trials: int = 5) -> Path:
    rng = np.random.default_rng(seed)
    tps = {(0, r): level * math.exp(rng.normal(0, 0.03)) for r in range(1, trials + 1)}
    return make_results(folder, ONE, tps, trials)


def test_one_session_per_side_is_no_verdict() -> None:
    v = ss.judge([math.log(1000)], [math.log(800)], [], 1, threshold=0.03)
    assert v.decision == "drift not measured" and v.low is None and v.bound is None
    assert v.ratio == pytest.approx(0.8)


def test_sessions_on_both_sides_are_a_two_sample_t_on_session_means() -> None:
    before, after = [6.90, 6.95, 6.88], [6.80, 6.84]
    v = ss.judge(before, after, [], 1)
    ref = sps.ttest_ind(after, before, equal_var=True)
    assert v.df == 3 and math.log(v.ratio) / v.se == pytest.approx(ref.statistic, rel=1e-9)
    low, high = ref.confidence_interval(0.95)
    assert (math.log(v.low), math.log(v.high)) == pytest.approx((low, high), rel=1e-9)
    assert v.p_adjusted == pytest.approx(ref.pvalue, rel=1e-9)


def test_a_calibration_adds_its_spread_not_its_mean() -> None:
    """A/A sessions at another level entirely (last month's machine) only lend their
    spread: the estimate is after - before, the df grows by the calibration's."""
    alone = ss.judge([6.9], [6.8], [[5.0, 5.05, 4.98]], 1)
    assert alone.df == 2 and math.log(alone.ratio) == pytest.approx(-0.1)
    sd = float(np.std([5.0, 5.05, 4.98], ddof=1))
    assert alone.se == pytest.approx(sd * math.sqrt(2))


def test_sides_run_as_blocks_need_a_calibration() -> None:
    """Before, before, after, after: neighbouring sessions are alike (drift), so the spread
    within a side understates the drift between the sides; alternating sides measure it."""
    before, after = [6.90, 6.92], [6.80, 6.81]
    assert ss.judge(before, after, [], 1, blocked=True).decision == "drift not measured"
    assert ss.judge(before, after, [], 1).df == 2
    assert ss.judge(before, after, [[6.0, 6.1]], 1, blocked=True).df == 3


def test_a_calibration_from_a_calmer_stretch_is_scaled_up_never_down() -> None:
    """The sides' sessions four times noisier inside than the calibration's: the spread
    (and the standard error) doubles; calmer sides leave it as measured."""
    args = ([6.9], [6.8], [[5.0, 5.05, 4.98]], 1)
    plain = ss.judge(*args)
    assert ss.judge(*args, noisier=4.0).se == pytest.approx(2 * plain.se)
    assert ss.judge(*args, noisier=0.25).se == pytest.approx(plain.se)


def test_the_gate_catches_what_it_says_with_80_percent_power() -> None:
    """Normal session means with SD 2%, 3 sessions a side: a true slowdown of the size the
    gate says it catches fails it in at least 80% of repeats (the SD's upper bound makes
    the claim conservative), and an A/A pair fails it in under 5%."""
    rng = np.random.default_rng(1)
    sd, n, threshold = 0.02, 3, 0.03
    said = ss.judge(list(rng.normal(0, sd, n)), list(rng.normal(0, sd, n)), [], 1,
                    threshold=threshold).catches  # fmt: skip
    assert said is not None and threshold < said < 0.5
    fails, false = 0, 0
    for _ in range(2000):
        b = list(rng.normal(0, sd, n))
        slow = ss.judge(b, list(rng.normal(math.log1p(-said), sd, n)), [], 1)
        same = ss.judge(b, list(rng.normal(0, sd, n)), [], 1)
        fails += slow.bound is not None and slow.bound < 1 - threshold
        false += same.bound is not None and same.bound < 1 - threshold
    assert fails / 2000 >= 0.80 and false / 2000 < 0.05


def test_compare_without_a_measured_drift_prints_no_verdict_and_refuses_to_gate(
    tmp_path: Path,
) -> None:
    a, b = session(tmp_path / "a", 1000, 1), session(tmp_path / "b", 500, 2)
    with Results(a) as ra, Results(b) as rb:
        out = compare.compare(ra, rb)
        (row,) = out["matched"]
        assert row["decision"] == "drift not measured" and row["ci_low"] is None
        assert "no verdict" in row["verdict"] and row["ratio"] == pytest.approx(0.5, rel=0.1)
        assert any("run AFTER_FILE --against BEFORE_DIR" in w for w in out["warnings"])
        with pytest.raises(PgsweepError) as err:
            compare.compare(ra, rb, fail_if_slower=0.03)
    assert err.value.exit_code == 2 and "--against" in str(err.value.render())


def test_a_calibrated_compare_gates_on_a_one_sided_bound(tmp_path: Path) -> None:
    a = session(tmp_path / "a", 1000, 1)
    slow = session(tmp_path / "slow", 700, 2)
    same = session(tmp_path / "same", 1000, 3)
    calib = [session(tmp_path / f"aa{i}", 1000, 10 + i) for i in range(3)]
    stores = [Results(p) for p in (a, slow, same, *calib)]
    try:
        ra, rslow, rsame, *rc = stores
        bad = compare.compare(ra, rslow, fail_if_slower=0.03, calibration=rc)
        good = compare.compare(ra, rsame, fail_if_slower=0.03, calibration=rc)
    finally:
        for s in stores:
            s.close()
    (row,) = bad["matched"]
    assert row["decision"] == "slower" and row["slower_beyond_threshold"] and row["df"] == 2
    assert bad["regressions"] and not good["regressions"]
    assert "calibration" in bad["notes"][0] and bad["sessions"]["calibration"] == 3
    line = gate.gate_line(bad)
    assert line.startswith("pgsweep gate: FAIL: 1 of 1") and "with 80% power" in line
    assert gate.gate_line(good).startswith("pgsweep gate: PASS")


def _gate(tmp_path: Path, cost: Cost, effect: float) -> dict[str, object]:
    rng = np.random.default_rng(4)
    tps = {(c, r): 1000 * (effect if c else 1.0) * math.exp(rng.normal(0, 0.02))
           for c in (0, 1) for r in range(1, 7)}  # fmt: skip
    folder = make_results(tmp_path / f"g{cost}", {"cluster.scale": [10, 50]}, tps, 6, cost=cost)
    with Results(folder) as res:
        return compare.within_run_gate(analysis.analyse(res), 0.03)


def test_the_within_run_gate_is_one_sided_and_skips_levels_built_once(tmp_path: Path) -> None:
    """The same numbers (a true -10%) in a cheap factor fail the gate; as a cluster factor
    built once (one build per level) they are no verdict and are not gated."""
    cheap = _gate(tmp_path, Cost.RESTART, 0.9)
    (row,) = cheap["matched"]  # type: ignore[misc]
    assert cheap["regressions"] and row["bound"] < row["ci_high"]  # one-sided: tighter
    assert row["catches"] is not None and 0.03 < row["catches"] < 0.5
    once = _gate(tmp_path, Cost.CLUSTER, 0.9)
    assert once["matched"] == [] and once["not_gated"] == 1
    assert "not gated" in gate.gate_line(once) and gate.gate_line(once).startswith(
        "pgsweep gate: PASS")  # fmt: skip
