"""Reports from numbers no real run gives on demand: a trial of 0 TPS and levels that
matplotlib would read as mathtext render, escaped, instead of crashing."""

from __future__ import annotations

import re
from pathlib import Path

from pgsweep import analysis, report
from pgsweep.show import open_store
from synthetic import make_results


def test_zero_tps_and_dollar_levels_render(tmp_path: Path) -> None:
    tps = {(0, 1): 100.0, (0, 2): 0.0, (0, 3): 104.0, (1, 1): 110.0, (1, 2): 98.0, (1, 3): 0.0}
    levels = ["$5$", "$\\notacommand{x}$"]  # mathtext would fail on the second
    folder = make_results(tmp_path / "res", {"server.application_name": levels}, tps, 3)
    store = open_store(folder)
    try:
        result = analysis.analyse(store)
        md = report.render_markdown(result)
        from pgsweep import report_html

        html = report_html.render(result, store)
    finally:
        store.close()
    svgs = "".join(re.findall(r"<svg.*?</svg>", html, flags=re.S))
    assert "$\\notacommand{x}$" in svgs and "$5$" in svgs  # plotted as written
    assert "$5$" in md and "0.0" in md  # the 0 TPS trial is shown, not dropped silently


def _report(folder: Path) -> tuple[analysis.Analysis, str]:
    store = open_store(folder)
    try:
        result = analysis.analyse(store)
    finally:
        store.close()
    return result, report.render_markdown(result)


def test_a_strong_trend_across_rounds_is_warned_about_even_unproven(tmp_path: Path) -> None:
    """Seed 1's run: round levels rose by about 40% over 5 rounds while the two
    configurations differed by a few percent. The warning must not wait for p < 0.05."""
    rise = [1.0, 1.05, 1.22, 1.18, 1.42]  # a wandering rise, not a clean line
    tps = {(c, r): 1000 * rise[r - 1] * (1.02 if c else 1.0) * (1 + 0.01 * ((c + r) % 3 - 1))
           for c in (0, 1) for r in range(1, 6)}  # fmt: skip
    result, md = _report(make_results(tmp_path / "drift", {"server.work_mem": ["4MB", "64MB"]},
                                      tps, 5))  # fmt: skip
    assert result.drift is not None and result.drift["large"]
    assert result.drift["over_run"] > 0.3
    assert any(w.startswith("the machine drifted during the run") for w in result.warnings)
    # the per-round levels are shown, rising as the machine did
    levels = [r["tps"] for r in result.rounds]
    assert levels[-1] / levels[0] > 1.3 and "drifted" in md

    calm = {(c, r): 1000 * (1.02 if c else 1.0) * (1 + 0.01 * ((c + r) % 3 - 1))
            for c in (0, 1) for r in range(1, 6)}  # fmt: skip
    result, _ = _report(make_results(tmp_path / "calm", {"server.work_mem": ["4MB", "64MB"]},
                                     calm, 5))  # fmt: skip
    assert result.drift is not None and not result.drift["large"]
    assert not any("drifted" in w for w in result.warnings)


def test_plan_noise_from_a_folder_gives_the_rounds_needed(tmp_path: Path) -> None:
    """Noise of 5% per trial around round and configuration: the estimate is close, and
    the rounds printed for each target difference are the fewest whose sensitivity
    reaches it (and grow as the target shrinks)."""
    import numpy as np

    from conftest import have_postgres, pgsweep, write_experiment
    from pgsweep.verdict import sequential as sq

    rng = np.random.default_rng(7)
    drift = {r: float(rng.normal(0, 0.1)) for r in range(1, 11)}
    tps = {(c, r): 1000 * float(np.exp(drift[r] + rng.normal(0, 0.05)))
           for c in range(4) for r in range(1, 11)}  # fmt: skip
    folder = make_results(tmp_path / "pilot", {"server.work_mem": ["1MB", "2MB", "4MB", "8MB"]},
                          tps, 10)  # fmt: skip
    store = open_store(folder)
    try:
        sigma, df = analysis.tps_noise(store) or (0.0, 0)
    finally:
        store.close()
    assert df == 27 and 0.035 < sigma < 0.07, sigma  # the round drift (10%) is not noise
    need = {t: sq.rounds_needed(sigma, t, 4, sigma_df=df) for t in (0.05, 0.10)}
    assert need[0.10] is not None and need[0.05] is not None and need[0.10] < need[0.05]
    assert sq.sensitivity_for(sigma, need[0.10], 4, sigma_df=df) <= 0.10
    assert sq.sensitivity_for(sigma, need[0.10] - 1, 4, sigma_df=df) > 0.10
    if not have_postgres():
        return
    exp = write_experiment(tmp_path, '[experiment]\nname = "next"\nseed = 1\n[factors]\n'
                           'server.work_mem = ["1MB", "2MB", "4MB", "8MB"]\n')  # fmt: skip
    res = pgsweep("plan", str(exp), "--noise-from", str(folder))
    assert res.returncode == 0, res.stderr
    assert f"to detect 10%: {need[0.10]} rounds" in res.stdout
    assert f"to detect 5%: {need[0.05]} rounds" in res.stdout


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

    from pgsweep.trial_length import length_noise, trade_off

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
