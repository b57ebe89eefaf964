"""The noise a plan is sized with (verdict/noise.py): the recording shipped in the code is
the one in tests/data/noise, a round's noise follows from the variogram, and a pilot's
noise is carried to another round length (or the planner says it cannot)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from scipy import signal

from pgsweep.analysis import planning
from pgsweep.store import Results
from pgsweep.verdict import noise as nz
from pgsweep.verdict import simulate as V
from synthetic import make_results

NOISE = Path(__file__).resolve().parents[1] / "data" / "noise"


@pytest.mark.parametrize("workload", ["tpcb", "select"])
def test_the_recorded_variograms_are_the_recordings(workload: str) -> None:
    x = np.log(V.load(NOISE, workload))
    v, n = nz.variogram(x, 30)
    assert list(n) == [60 - h for h in range(1, 31)]
    assert nz.RECORDED[workload] == pytest.approx(tuple(v), abs=5e-7)


def ar1(n: int, phi: float, rng: np.random.Generator) -> np.ndarray:
    e = rng.normal(0, math.sqrt(1 - phi**2), n)
    e[0] = rng.normal()
    return np.asarray(signal.lfilter([1.0], [1.0, -phi], e))


def test_a_rounds_noise_follows_from_the_variogram() -> None:
    """AR(1) with phi = 0.6: V(h) = 1 - phi^h; the mean within-round variance of rounds
    of c consecutive values is what within_round says, and grows with c."""
    phi, rng = 0.6, np.random.default_rng(1)
    v = tuple(1 - phi**h for h in range(1, 20))
    for c in (2, 4, 12):
        x = ar1(200_000, phi, rng)[: (200_000 // c) * c].reshape(-1, c)
        seen = float(np.mean(np.var(x, axis=1, ddof=1)))
        assert seen == pytest.approx(nz.within_round(v, c), rel=0.03)
    assert nz.within_round(v, 2) < nz.within_round(v, 4) < nz.within_round(v, 12)


def test_rescaling_and_its_limits() -> None:
    tpcb = nz.recorded("tpcb-like")
    sigma2, why = tpcb.at(2)
    sigma12, why12 = tpcb.at(12)
    assert why is None and why12 is None and sigma12 / sigma2 == pytest.approx(1.35, abs=0.02)
    _, why = tpcb.at(40)
    assert why is not None and "covers rounds of up to 31 trials" in why
    assert nz.recorded("select-only").sigma < tpcb.sigma


def test_a_pilot_of_long_rounds_is_carried_to_short_ones(tmp_path: Path) -> None:
    """A 12-configuration pilot on AR(1) noise (phi 0.6, SD 10%) measures the noise of its
    rounds of 12; carried to rounds of 2 it is the smaller noise two neighbours show."""
    rng = np.random.default_rng(7)
    rounds, configs = 15, 12
    x = 0.1 * ar1(rounds * configs, 0.6, rng)
    names = [f"{i}MB" for i in range(1, configs + 1)]
    folder = make_results(tmp_path / "pilot", {"server.work_mem": names}, {}, rounds,
                          order_values=x)  # fmt: skip
    with Results(folder) as res:
        pilot = planning.pilot_noise(res, "pilot")
    assert pilot is not None and pilot.round_length == 12
    v = tuple(0.01 * (1 - 0.6**h) for h in range(1, 12))
    assert pilot.sigma == pytest.approx(math.sqrt(nz.within_round(v, 12)), rel=0.2)
    short, why = pilot.at(2)
    assert why is None
    assert short == pytest.approx(math.sqrt(nz.within_round(v, 2)), rel=0.25)
    assert short < 0.8 * pilot.sigma
