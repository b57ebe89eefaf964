"""Top statements (collect.statements): a statement's key does not depend on the
whitespace of its text, a trial keeps its TOP statements by time in the window (not the
ones with the most time since the server started), and the text artifact reads back.
Collected for real in tests/integration/test_explain.py."""

from __future__ import annotations

from pgsweep.collect import counters, statements


def _stmt(h: str, calls: float, ms: float) -> dict[str, float]:
    return {f"pg.stmt.{h}.calls": calls, f"pg.stmt.{h}.exec_ms": ms, f"pg.stmt.{h}.rows": calls}


def test_the_key_is_the_normalised_text() -> None:
    a = statements.key("UPDATE pgbench_accounts SET abalance = abalance + $1\n  WHERE aid = $2")
    b = statements.key("UPDATE pgbench_accounts  SET abalance = abalance + $1 WHERE aid = $2")
    assert a == b and len(a) == 12
    assert a != statements.key("UPDATE pgbench_tellers SET tbalance = tbalance + $1 WHERE tid = $2")


def test_top_keeps_the_windows_largest_and_drops_the_uncalled() -> None:
    before = {"pg.wal_bytes": 10.0}
    # "old" had a long life before the window (large totals) and one call in it
    before |= _stmt("old", 1000, 9e6)
    after = {"pg.wal_bytes": 30.0} | _stmt("old", 1001, 9e6 + 1)
    for i in range(statements.TOP + 2):  # new statements, each first run in the window
        after |= _stmt(f"s{i}", 10, 100.0 * (i + 1))
    after |= _stmt("idle", 0, 0)  # counted once, never called in the window
    kept = statements.top(counters.delta(before, after))
    assert kept["pg.wal_bytes"] == 20.0
    hashes = statements.hashes(kept)
    assert hashes == {f"s{i}" for i in range(2, statements.TOP + 2)}, hashes
    assert kept["pg.stmt.s6.exec_ms"] == 700.0 and kept["pg.stmt.s6.calls"] == 10


def test_the_text_artifact_reads_back() -> None:
    raw = b"abc123\tSELECT abalance FROM pgbench_accounts WHERE aid = $1\nbad line\n"
    assert statements.parse(raw) == {"abc123": "SELECT abalance FROM pgbench_accounts "
                                                "WHERE aid = $1"}  # fmt: skip


def test_the_server_side_figures_count_every_statement_not_only_the_top() -> None:
    before = _stmt("old", 1000, 9e6)
    after = _stmt("old", 1001, 9e6 + 4.0)
    for i in range(statements.TOP + 3):  # more than the top keeps
        after |= _stmt(f"s{i}", 10, 10.0)
    deltas = counters.delta(before, after)
    got = statements.server_side(deltas)
    calls = 1 + 10 * (statements.TOP + 3)
    assert got["statements.calls"] == calls
    assert got["statements.exec_ms_mean"] == (4.0 + 10.0 * (statements.TOP + 3)) / calls
    assert statements.server_side({"pg.wal_bytes": 5.0}) == {}  # no library: no figure
