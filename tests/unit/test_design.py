"""The surviving design when configurations lost every trial (analysis_design): which
configurations are judged, against which baseline, and what the report says of the rest."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from pgsweep.analysis.design import surviving


@dataclass(eq=False)
class C:
    id: str
    levels: dict[str, Any]
    values: dict[str, dict[int, float]] = field(default_factory=dict)


def _grid(lost: set[str], **factors: list[Any]) -> list[C]:
    out = []
    for n, combo in enumerate(itertools.product(*factors.values()), 1):
        c = C(f"c{n:02d}", dict(zip(factors, combo, strict=True)))
        if c.id not in lost:
            c.values = {"tps": {1: 100.0, 2: 101.0}}
        out.append(c)
    return out


def test_nothing_lost_changes_nothing() -> None:
    configs = _grid(set(), a=[1, 2], b=["x", "y"])
    d = surviving(configs, configs[0])
    assert d.configs == configs and d.baseline is configs[0] and d.notes == []


def test_a_lost_level_fixes_its_factor_and_moves_the_baseline() -> None:
    # every configuration with a=1 failed: the rest is a complete 2x3 in b and c
    configs = _grid({"c01", "c02", "c03", "c04", "c05", "c06"}, a=[1, 2], b=["x", "y"],
                    c=[10, 20, 30])  # fmt: skip
    d = surviving(configs, configs[0])
    assert [c.id for c in d.configs] == [f"c{n:02d}" for n in range(7, 13)]
    assert d.baseline.id == "c07"  # a=2, b=x, c=10: one factor away from c01
    text = " ".join(d.notes)
    assert "6 of 12 configurations have no successful trial" in text
    assert "the baseline c01 (a=1, b=x, c=10) has no successful trial" in text
    assert "a: not judged: no configuration with a=1 is left to compare a=2 with" in text


def test_a_scattered_loss_keeps_the_largest_complete_factorial() -> None:
    # a 2x3 that lost (a=2, b=z): dropping b=z keeps a complete 2x2 (4 of 5 survivors);
    # dropping a=2 would keep a 1x3 (3)
    configs = _grid({"c06"}, a=[1, 2], b=["x", "y", "z"])
    d = surviving(configs, configs[0])
    assert {c.id for c in d.configs} == {"c01", "c02", "c04", "c05"}
    assert d.baseline is configs[0]
    text = " ".join(d.notes)
    assert "b=z: left out" in text and "c03 have data but lie outside" in text


def test_a_baseline_outside_the_surviving_factorial_moves_too() -> None:
    configs = _grid({"c06"}, a=[1, 2], b=["x", "y", "z"])
    d = surviving(configs, configs[2])  # asked for b=z, whose column was dropped
    assert d.baseline.id == "c01" and d.baseline in d.configs
    assert "is outside the complete factorial that survives" in " ".join(d.notes)


def test_nothing_survives_leaves_the_design_as_it_was() -> None:
    configs = _grid({"c01", "c02"}, a=[1, 2])
    d = surviving(configs, configs[0])
    assert d.configs == configs and d.baseline is configs[0]


def test_one_server_error_worded_two_ways_by_pgbench_is_one_cause() -> None:
    """Both reasons come from one real run (statement_timeout = 1ms, a loaded machine):
    pgbench words the timeout by whether a client had started. One cause, one warning;
    another server error is another cause."""
    from pgsweep.analysis.checks import cause

    head = "pgbench failed: `/usr/lib/postgresql/15/bin/pgbench -h /tmp/s -p 5432` exited " \
           "with code 2: pgbench: error: "  # fmt: skip
    started = head + "client 0 script 0 aborted in command 0 query 0: ERROR:  canceling " \
                     "statement due to statement timeout"  # fmt: skip
    before = head + "ERROR:  canceling statement due to statement timeout"
    assert cause(started)[0] == cause(before)[0]
    assert cause(started)[1].startswith("pgbench failed: `pgbench ...` exited with code 2")
    other = head + "FATAL:  terminating connection due to administrator command"
    assert cause(other)[0] != cause(started)[0]
