"""The builds and phases tables, as header + rows of text cells, for the markdown and HTML
reports alike (analysis_builds.py computes them)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..analysis import Analysis

BUILDS_NOTE = (
    "Which PostgreSQL each configuration ran: the build (pgsweep's cache key), its "
    "version, source and configure line, and the block sizes the server reports."
)
PHASES_NOTE = (
    "Bytes written to the devices under the cluster while loading (pgbench -i, its vacuum "
    "and a checkpoint: once per cluster; per row of pgbench_accounts) and while running "
    "(per transaction, the configuration's level with its interval), and device bytes per "
    "WAL byte. Columns are configurations; intervals are 95% t-intervals for one "
    "configuration, not comparisons (those are in the tables above)."
)
_PHASE_ROWS = (
    ("load", "device_bytes_written", "load: device bytes written", 0),
    ("load", "wal_bytes", "load: WAL bytes", 0),
    ("load", "device_bytes_per_row", "load: device bytes / row loaded", 1),
    ("load", "device_bytes_per_wal_byte", "load: device bytes / WAL byte", 2),
    ("run", "device_bytes_written_per_tx", "run: device bytes written / tx", 0),
    ("run", "wal_bytes_per_tx", "run: WAL bytes / tx", 0),
    ("run", "device_bytes_per_wal_byte", "run: device bytes / WAL byte", 2),
)


def builds_table(a: Analysis) -> tuple[list[str], list[list[str]]]:
    header = ["config", "build", "version", "wal_block_size", "block_size", "source",
              "configure"]  # fmt: skip
    rows = [[r["config"], r["build"] + (" (ASSERTIONS)" if r["assertions"] else ""),
             r["version"], r["wal_block_size"], r["block_size"], r["source"], r["configure"]]
            for r in a.builds]  # fmt: skip
    return header, rows


def _cell(s: dict[str, Any], digits: int) -> str:
    if not s:
        return "-"
    text = f"{s['mean']:,.{digits}f}"
    if s.get("ci_low") is not None and s.get("ci_high") is not None:
        text += f" [{s['ci_low']:,.{digits}f}, {s['ci_high']:,.{digits}f}]"
    elif s.get("n") == 1:
        text += " (one)"
    return text


def phases_table(a: Analysis) -> tuple[list[str], list[list[str]]]:
    header = ["phase", *(r["config"] for r in a.phases)]
    rows = [[label, *(_cell(r[phase].get(key) or {}, d) for r in a.phases)]
            for phase, key, label, d in _PHASE_ROWS]  # fmt: skip
    return header, rows
