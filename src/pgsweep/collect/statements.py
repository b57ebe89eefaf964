"""Top statements (issue 26), from pg_stat_statements where the file asks for it: a
server that preloads the library (`shared_preload_libraries = "pg_stat_statements"`, a
server setting like any other, so recorded and compared as one). pgsweep then creates the
extension in its own cluster (`CREATE EXTENSION IF NOT EXISTS`, before a window's first
snapshot) and counts, per statement, calls, execution time, rows and shared blocks hit,
read, dirtied and written, as counters `stmt.H.*` whose deltas over the window are the
trial's. H is a hash of the statement's normalised text, so the same statement is the
same key in every cluster (a queryid depends on the tables' OIDs). pgsweep's own sessions
are not counted (`pg_stat_statements.track = none` in their options: postgres.cluster).
A trial keeps the TOP statements by execution time over its window, with their text (its
first TEXT_LIMIT characters) as the artifact `statements.tsv`."""

from __future__ import annotations

import hashlib
from typing import Any

LIBRARY = "pg_stat_statements"
TOP = 5  # statements a trial keeps, by execution time over its window
FIELDS = ("calls", "exec_ms", "rows", "blks_hit", "blks_read", "blks_dirtied", "blks_written")
ARTIFACT = "statements.tsv"
TEXT_LIMIT = 2048  # characters of a statement's text read (the workload's: any length)
PREFIX = "stmt."


def key(query: str) -> str:
    return hashlib.sha256(" ".join(query.split()).encode()).hexdigest()[:12]


def preloaded(conn: Any, library: str = LIBRARY) -> bool:
    row = conn.execute("SELECT current_setting('shared_preload_libraries')").fetchone()
    return library in [p.strip().strip('"') for p in str(row[0] if row else "").split(",")]


def _rows(conn: Any, major: int) -> list[tuple[Any, ...]]:
    """Every statement of every database; the extension made first (a server that
    preloads the library and has no extension yet: a new cluster, a restored snapshot)."""
    conn.execute(f"CREATE EXTENSION IF NOT EXISTS {LIBRARY}")
    time = "total_exec_time" if major >= 13 else "total_time"
    return list(conn.execute(
        f"SELECT left(query, {TEXT_LIMIT}), calls, {time}, rows, shared_blks_hit, "
        "shared_blks_read, shared_blks_dirtied, shared_blks_written FROM pg_stat_statements "
        "WHERE query IS NOT NULL").fetchall())  # fmt: skip


def snapshot(conn: Any, major: int) -> dict[str, float]:
    """stmt.H.FIELD for every statement the server counted ({} without the library)."""
    if not preloaded(conn):
        return {}
    out: dict[str, float] = {}
    for query, *figures in _rows(conn, major):
        h = key(query)
        for name, value in zip(FIELDS, figures, strict=True):  # one text, several entries
            k = f"{PREFIX}{h}.{name}"
            out[k] = out.get(k, 0.0) + float(value or 0)
    return out


def times(counters: dict[str, float], prefix: str = "pg.") -> dict[str, float]:
    """Statement hash -> its execution time in `counters` (keys PREFIX H .exec_ms)."""
    start = prefix + PREFIX
    return {k[len(start):-len(".exec_ms")]: v for k, v in counters.items()
            if k.startswith(start) and k.endswith(".exec_ms")}  # fmt: skip


def top(deltas: dict[str, float], prefix: str = "pg.") -> dict[str, float]:
    """`deltas` with the statements' counters cut to the TOP by execution time (with
    calls in the window)."""
    start = prefix + PREFIX
    spent = times(deltas, prefix)
    called = {h for h in spent if deltas.get(f"{start}{h}.calls", 0) > 0}
    kept = set(sorted(called, key=lambda h: -spent[h])[:TOP])
    return {k: v for k, v in deltas.items()
            if not k.startswith(start) or k[len(start):].split(".")[0] in kept}  # fmt: skip


def server_side(deltas: dict[str, float], prefix: str = "pg.") -> dict[str, float]:
    """Every statement counted over the window, summed (before `top` cuts them): how many
    the server ran and their mean execution time, measured by the server itself (what a
    replay's client cannot see; pgsweep's own sessions are not counted). {} without the
    library or without a statement."""
    start = prefix + PREFIX
    calls = sum(v for k, v in deltas.items() if k.startswith(start) and k.endswith(".calls"))
    if calls <= 0:
        return {}
    return {"statements.calls": calls,
            "statements.exec_ms_mean": sum(times(deltas, prefix).values()) / calls}  # fmt: skip


def hashes(counters: dict[str, float], prefix: str = "pg.") -> set[str]:
    start = prefix + PREFIX
    return {k[len(start):].split(".")[0] for k in counters if k.startswith(start)}


def texts(conn: Any, major: int, wanted: set[str]) -> bytes:
    """The artifact: `H<TAB>normalised text` of the `wanted` statements, one per line."""
    out: dict[str, str] = {}
    for query, *_ in _rows(conn, major):
        h = key(query)
        if h in wanted:
            out.setdefault(h, " ".join(query.split()))
    return "".join(f"{h}\t{t}\n" for h, t in sorted(out.items())).encode()


def parse(artifact: bytes) -> dict[str, str]:
    out = {}
    for line in artifact.decode(errors="replace").splitlines():
        h, _, text = line.partition("\t")
        if h and text:
            out[h] = text
    return out
