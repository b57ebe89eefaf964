"""The builds and phases tables and the assertion-build warning, from analysis rows (the
rows themselves come from real runs in tests/integration/test_build.py)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from pgsweep.analysis.builds import assertion_warning
from pgsweep.outputs.builds import builds_table, phases_table


def _row(config: str, build: str, assertions: bool) -> dict[str, Any]:
    return {"config": config, "build": build, "version": "postgres (PostgreSQL) 15.18",
            "source": "apt:postgresql-15 15.18", "configure": "'--enable-cassert'",
            "wal_block_size": "8192", "block_size": "8192", "assertions": assertions}  # fmt: skip


def test_an_assertion_build_is_marked_and_warned_about() -> None:
    rows = [_row("c01", "installed", False), _row("c02", "0123456789abcdef", True)]
    header, cells = builds_table(SimpleNamespace(builds=rows))  # type: ignore[arg-type]
    assert header[:2] == ["config", "build"]
    assert cells[1][1] == "0123456789abcdef (ASSERTIONS)" and cells[0][1] == "installed"
    (warning,) = assertion_warning(rows)
    assert warning.startswith("c02 ran an assertion build") and "not performance" in warning
    assert assertion_warning(rows[:1]) == []


def test_phases_are_rows_and_configurations_columns_with_intervals() -> None:
    one = {"mean": 46_514_176.0, "n": 1, "ci_low": None, "ci_high": None}
    per_tx = {"mean": 12_407.4, "n": 3, "ci_low": 11_900.0, "ci_high": 13_000.2}
    phases = [{"config": c, "load": {"device_bytes_written": one}, "run":
               {"device_bytes_written_per_tx": per_tx}} for c in ("c01", "c02")]  # fmt: skip
    header, rows = phases_table(SimpleNamespace(phases=phases))  # type: ignore[arg-type]
    assert header == ["phase", "c01", "c02"]
    by_label = {r[0]: r[1:] for r in rows}
    assert by_label["load: device bytes written"] == ["46,514,176 (one)"] * 2
    assert by_label["run: device bytes written / tx"] == ["12,407 [11,900, 13,000]"] * 2
    assert by_label["load: WAL bytes"] == ["-", "-"]  # not measured: a dash, never a zero
