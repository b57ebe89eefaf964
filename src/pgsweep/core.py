"""Words the planner, the layers and the store share: what a level is, and what changing
a key between two trials costs."""

from __future__ import annotations

from enum import IntEnum

Value = str | int | float | bool


class Cost(IntEnum):
    """What changing a key between two trials costs, cheapest first. The planner groups
    configurations by every key whose cost is CLUSTER or more (a split-plot design)."""

    NOTHING = 0  # e.g. pgbench client count
    RELOAD = 1  # SIGHUP
    RESTART = 2  # server restart
    RESERVE = 3  # a server restart plus a kernel reservation that can fail (huge pages)
    CLUSTER = 4  # a new cluster: initdb + load
