"""Words the planner, the layers and the store share: what a level is, and what changing
a key between two trials costs."""

from __future__ import annotations

from enum import IntEnum

Value = str | int | float | bool

# what `report --format`, `export --format` and `export --what` take (the CLI's parser)
REPORT_FORMATS = ("terminal", "markdown", "html", "json")
EXPORT_FORMATS = ("csv", "json", "parquet")
EXPORT_WHAT = ("trials", "samples", "latency", "standbys", "waits", "cpu", "devices",
               "tool", "profiles", "io_latency")


class Cost(IntEnum):
    """What changing a key between two trials costs, cheapest first. The planner groups
    configurations by every key whose cost is CLUSTER or more (a split-plot design)."""

    NOTHING = 0  # e.g. pgbench client count
    RELOAD = 1  # SIGHUP
    RESTART = 2  # server restart
    RESERVE = 3  # a server restart plus a kernel reservation that can fail (huge pages)
    CLUSTER = 4  # a new cluster: initdb + load
    BUILD = 5  # a new PostgreSQL build (compiled before the first trial), then a cluster


def printable(text: str) -> str:
    """Text from a file, a server or a command as it may be shown on a terminal: control and
    formatting characters (ANSI escapes, bidi overrides) as escapes. Newlines stay."""
    return "".join(c if c.isprintable() or c == "\n" else f"\\u{ord(c):04x}" for c in text)
