"""Snapshots of /proc/diskstats, /proc/stat, /proc/pressure/* and PostgreSQL's statistics
views. Each returns {name: number}; `delta` subtracts two of them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..host.api import Host
from . import statements as stmts

# /proc/diskstats fields after major, minor, name (Documentation/admin-guide/iostats.rst)
_DISK_FIELDS = (
    "reads",
    "reads_merged",
    "sectors_read",
    "read_ms",
    "writes",
    "writes_merged",
    "sectors_written",
    "write_ms",
    "in_flight",
    "io_ms",
    "weighted_io_ms",
)
_CPU_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


def diskstats(host: Host, devices: list[str], text: str | None = None) -> dict[str, float]:
    text = text if text is not None else host.read_text(Path("/proc/diskstats"))
    out: dict[str, float] = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 14 or fields[2] not in devices:
            continue
        for key, value in zip(_DISK_FIELDS, fields[3:14], strict=True):
            if key != "in_flight":
                out[f"{fields[2]}.{key}"] = float(value)
    return out


def system(host: Host) -> dict[str, float]:
    """CPU jiffies by state (steal shows other tenants) and pressure stall microseconds."""
    cpu = host.read_text(Path("/proc/stat")).splitlines()[0].split()
    out = {f"cpu.{k}": float(v) for k, v in zip(_CPU_FIELDS, cpu[1:9], strict=False)}
    for resource in ("cpu", "io", "memory"):
        path = Path("/proc/pressure") / resource
        if host.lstat(path) is None:
            continue
        for line in host.read_text(path).splitlines():
            kind, *pairs = line.split()
            total = dict(p.split("=") for p in pairs).get("total")
            if total is not None:
                out[f"pressure.{resource}.{kind}_us"] = float(total)
    return out


def network(host: Host) -> dict[str, float]:
    """Bytes and packets each interface (but loopback) received and sent (/proc/net/dev)."""
    out: dict[str, float] = {}
    for line in host.read_text(Path("/proc/net/dev")).splitlines()[2:]:
        name, _, rest = line.partition(":")
        fields = rest.split()
        if name.strip() == "lo" or len(fields) < 10:
            continue
        for key, i in (("rx_bytes", 0), ("rx_packets", 1), ("tx_bytes", 8), ("tx_packets", 9)):
            out[f"{name.strip()}.{key}"] = float(fields[i])
    return out


def zfs_arc(host: Host, path: Path = Path("/proc/spl/kstat/zfs/arcstats")) -> dict[str, float]:
    """ARC hits and misses where ZFS (kernel or a kstat-exporting port) runs."""
    if host.lstat(path) is None:
        return {}
    out = {}
    for fields in (line.split() for line in host.read_text(path).splitlines()):
        if len(fields) == 3 and fields[0] in ("hits", "misses"):
            out[f"arc.{fields[0]}"] = float(fields[2])
    return out


def postgres(conn: Any, major: int, statements: bool = True) -> dict[str, float]:
    """WAL, checkpoint, buffer and database counters. PostgreSQL 17 moved the checkpointer's
    counters from pg_stat_bgwriter to pg_stat_checkpointer. With `statements`, first those
    of pg_stat_statements where the server preloads it (collect.statements: making the
    extension writes WAL, before this snapshot's WAL position)."""
    out: dict[str, float] = stmts.snapshot(conn, major) if statements else {}
    queries = [
        ("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn AS wal_lsn_bytes", None),
        (
            "SELECT sum(xact_commit) AS commits, sum(xact_rollback) AS rollbacks, "
            "sum(blks_hit) AS blks_hit, sum(blks_read) AS blks_read, "
            "sum(temp_bytes) AS temp_bytes FROM pg_stat_database",
            None,
        ),
        ("SELECT wal_bytes, wal_records, wal_fpi FROM pg_stat_wal", 14),
        ("SELECT buffers_clean, maxwritten_clean FROM pg_stat_bgwriter", None),
    ]
    if major >= 17:
        queries.append(
            (
                "SELECT num_timed AS checkpoints_timed, num_requested AS "
                "checkpoints_req, buffers_written AS buffers_checkpoint "
                "FROM pg_stat_checkpointer",
                None,
            )
        )
    else:
        queries.append(
            (
                "SELECT checkpoints_timed, checkpoints_req, buffers_checkpoint, "
                "buffers_backend FROM pg_stat_bgwriter",
                None,
            )
        )
    if 14 <= major < 18:  # PostgreSQL 18 counts WAL writes and syncs in pg_stat_io
        queries.append(("SELECT wal_write, wal_sync FROM pg_stat_wal", None))
    if major >= 15:  # this session's pending counts first (a closing snapshot sees all)
        conn.execute("SELECT pg_stat_force_next_flush()")
    for sql, since in queries:
        if since is not None and major < since:
            continue
        cur = conn.execute(sql)
        row = cur.fetchone()
        for col, value in zip([d.name for d in cur.description], row or (), strict=False):
            if value is not None:
                out[col] = float(value)
    if major >= 16:
        out.update(stat_io(conn))
    return out


# pg_stat_io's operations counted per (backend type, object, context); bytes are op_bytes
_IO_OPS = ("reads", "writes", "writebacks", "extends", "hits", "evictions", "fsyncs")


def stat_io(conn: Any) -> dict[str, float]:
    """pg_stat_io (PostgreSQL 16+): who did which I/O, as io.TYPE.OBJECT.CONTEXT.OP (only
    the non-zero ones: most of its cells stay 0), with the bytes of reads, writes and
    extends (op_bytes; PostgreSQL 18 counts them itself as read_bytes, ...)."""
    size = "op_bytes" if _has_op_bytes(conn) else "1"
    rows = conn.execute(f"SELECT backend_type, object, context, {size}, "
                        f"{', '.join(_IO_OPS)} FROM pg_stat_io").fetchall()  # fmt: skip
    out: dict[str, float] = {}
    for backend, obj, context, op_bytes, *ops in rows:
        for name, value in zip(_IO_OPS, ops, strict=True):
            if value:
                out[f"io.{backend}.{obj}.{context}.{name}"] = float(value)
                if name in ("reads", "writes", "extends") and op_bytes and op_bytes > 1:
                    out[f"io.{backend}.{obj}.{context}.{name[:-1]}_bytes"] = float(
                        value * op_bytes)
    return out


def _has_op_bytes(conn: Any) -> bool:
    row = conn.execute("SELECT count(*) FROM pg_attribute WHERE attrelid = "
                       "'pg_catalog.pg_stat_io'::regclass AND attname = 'op_bytes'").fetchone()
    return bool(row and row[0])


# counters a snapshot holds only while they are not 0 (pg_stat_io's cells): a name missing
# from the first snapshot counted 0 then
SPARSE = ("pg.io.", "pg." + stmts.PREFIX)  # a statement first run in the window: 0 before


def delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: after[k] - before.get(k, 0.0) for k in after
            if k in before or k.startswith(SPARSE)}  # fmt: skip
