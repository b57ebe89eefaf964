"""Trial length against rounds (`plan --noise-from`): a pilot's noise split into the part
that shrinks with the window and the part that does not, checked on simulated pilots."""

from __future__ import annotations

from pathlib import Path

from pgsweep import analysis
from pgsweep.outputs.show import open_store
from synthetic import make_results


def test_trial_length_trade_off_splits_the_noise_and_predicts_other_lengths(
    tmp_path: Path,
) -> None:
    """Pilots of 10-second trials (8 configurations x 20 rounds) whose log TPS varies 5%
    between trials (whatever their length) and 20% from second to second inside them
    (independent seconds): the split recovers both parts on average, predicts the noise of
    40-second trials (simulated the same way) within 15%, and the trade-off buys rounds
    with the same machine time. (The between part is a difference of two estimates: from
    one small pilot it is rough, which the plan output says.)"""
    import numpy as np

    from pgsweep.analysis.trial_length import length_noise, trade_off

    def pilot(seconds: int, seed: int) -> Path:
        rng = np.random.default_rng(seed)
        series = {}
        for c in range(8):
            for r in range(1, 21):
                level = 1000 * np.exp(rng.normal(0, 0.05))
                series[(c, r)] = list(level * np.exp(rng.normal(0, 0.2, seconds)))
        tps = {k: float(np.mean(v)) for k, v in series.items()}
        levels = {"server.work_mem": [f"{2**i}MB" for i in range(8)]}
        return make_results(tmp_path / f"p{seconds}-{seed}", levels, tps, 20,
                            per_second=series)  # fmt: skip

    splits, truth = [], []
    for seed in range(6):
        for seconds, into in ((10, splits), (40, truth)):
            store = open_store(pilot(seconds, seed))
            try:
                noise = analysis.tps_noise(store)
                assert noise is not None
                into.append((length_noise(store, *noise), noise[0]))
            finally:
                store.close()
    per_second = np.mean([s.per_second for s, _ in splits])
    between = np.mean([s.between for s, _ in splits])
    assert 0.03 < per_second < 0.05, per_second  # 0.2^2 = 0.04
    assert 0.0012 < between < 0.004, between  # 0.05^2 = 0.0025
    predicted = np.mean([s.sigma(40) for s, _ in splits])
    observed = np.sqrt(np.mean([sigma**2 for _, sigma in truth]))
    assert abs(predicted / observed - 1) < 0.15, (predicted, observed)
    split = splits[0][0]
    rows = trade_off(split, 8, 20)
    budget = 20 * (split.trial_s + split.overhead_s)
    assert [r[1] for r in rows] == [int(budget // (t + split.overhead_s)) for t, _, _ in rows]
    detect = {t: d for t, _, d in rows}
    assert detect[5] < detect[10] < detect[60]  # no overhead here: more, shorter rounds win
