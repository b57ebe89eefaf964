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
