"""Reports from numbers no real run gives on demand: a trial of 0 TPS and levels that a
plotting library would read as mathtext render, escaped, instead of crashing."""

from __future__ import annotations

import re
from pathlib import Path

from pgsweep import analysis
from pgsweep.outputs import report
from pgsweep.outputs.show import open_store
from synthetic import make_results


def test_zero_tps_and_dollar_levels_render(tmp_path: Path) -> None:
    tps = {(0, 1): 100.0, (0, 2): 0.0, (0, 3): 104.0, (1, 1): 110.0, (1, 2): 98.0, (1, 3): 0.0}
    levels = ["$5$", "$\\notacommand{x}$"]  # mathtext would fail on the second
    folder = make_results(tmp_path / "res", {"server.application_name": levels}, tps, 3)
    store = open_store(folder)
    try:
        result = analysis.analyse(store)
        md = report.render_markdown(result)
        from pgsweep.outputs import html as report_html

        html = report_html.render(result, store)
    finally:
        store.close()
    svgs = "".join(re.findall(r"<svg.*?</svg>", html, flags=re.S))
    assert "$\\notacommand{x}$" in svgs and "$5$" in svgs  # plotted as written (tooltips)
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
