"""The load phase of a new cluster: pgbench -i (to a scale or a target size), a restored
dump or sysbench's prepare, then a settled state (prewarm, checkpoint), with the device
and PostgreSQL counters of the whole phase (the `load_counter` table)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from ..collect import counters, devices, metrics
from ..postgres import dump as pgdump
from ..postgres import sysbench
from ..postgres.access import ServerError
from ..postgres.binaries import Binaries
from ..postgres.cluster import Cluster
from .workload_tools import program as sysbench_program


def _settle(conn: Any) -> Any:
    """After loading: pg_prewarm where the server has it, a checkpoint (the load's pages
    written, not left to a window), and the database's size row."""
    has_prewarm = conn.execute(
        "SELECT count(*) FROM pg_available_extensions WHERE name = 'pg_prewarm'"
    ).fetchone()
    if has_prewarm and has_prewarm[0]:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_prewarm")
    conn.execute("CHECKPOINT")
    return conn.execute("SELECT pg_database_size('postgres')").fetchone()


def make_roles(cluster: Cluster, roles: Sequence[str]) -> None:
    """The roles a captured log's sessions connect as (superusers of a throwaway cluster:
    the data is pgsweep's, loaded or restored without owners), before the snapshot."""
    with cluster.connect() as conn:
        have = {r[0] for r in conn.execute("SELECT rolname FROM pg_roles").fetchall()}
        for role in roles:
            if role not in have:
                conn.execute(f'CREATE ROLE "{role.replace(chr(34), chr(34) * 2)}" LOGIN '
                             "SUPERUSER")  # fmt: skip


def _database_bytes(cluster: Cluster) -> int:
    with cluster.connect() as conn:
        row = conn.execute("SELECT pg_database_size('postgres')").fetchone()
    return int(row[0]) if row else 0


def _pgbench_init(cluster: Cluster, client: Binaries, scale: int) -> list[str]:
    argv = [client.path("pgbench"), *cluster.pgbench_conn_args()]
    argv += ["-i", "-q", "-s", str(scale), "postgres"]
    # ~2 s per 10 scale units here; allow slow disks a wide margin.
    res = cluster.host.run(argv, out=cluster.scratch / "load.out", timeout=120 + scale * 5,
                           user=cluster.user)  # fmt: skip
    if not res.ok:
        raise ServerError(f"loading the data failed: {res.describe_failure()}")
    return argv


def scale_for(cluster: Cluster, client: Binaries, target: int) -> int:
    """The scale that gives a database of `target` bytes, from the bytes one scale unit
    took here (a scale-2 load: its size less the empty database's, halved)."""
    empty = _database_bytes(cluster)
    _pgbench_init(cluster, client, 2)
    per_unit = max(1, (_database_bytes(cluster) - empty) // 2)
    return max(1, round((target - empty) / per_unit))


def load_pgbench(
    cluster: Cluster,
    client: Binaries,
    scale: int,
    target: int | None = None,
    pool: list[str] | None = None,
) -> tuple[dict[str, float], list[str]]:
    """pgbench -i (with its vacuum), pg_prewarm when installed, then a checkpoint. Returns
    the I/O of that phase (seed 3 compared bytes written while loading and while running):
    device and PostgreSQL counter deltas, seconds, scale and the database size; and the
    load's command. With a target size the scale is measured first (cluster.size)."""
    if target is not None:
        scale = scale_for(cluster, client, target)
    devs, primary = devices.for_cluster(cluster, pool)
    before = _load_snapshot(cluster, devs)
    started = time.monotonic()
    argv = _pgbench_init(cluster, client, scale)
    with cluster.connect() as conn:
        size = _settle(conn)
    deltas = counters.delta(before, _load_snapshot(cluster, devs))
    out = {f"load.{k}": v for k, v in deltas.items()}
    out.update(metrics.io(deltas, primary, 0))
    out["load.seconds"] = time.monotonic() - started
    out["load.scale"], out["load.database_bytes"] = float(scale), float(size[0] if size else 0)
    if target is not None:
        out["load.target_bytes"] = float(target)
    return out, argv


def restore_dump(cluster: Cluster, dump: pgdump.Dump,
                 pool: list[str] | None) -> tuple[dict[str, float], list[str]]:  # fmt: skip
    """The dump restored as the server user (pg_restore -j, or psql); and its command."""
    argv = pgdump.restore_argv(dump, cluster.binaries.path("pg_restore"),
                               cluster.binaries.path("psql"), cluster.pgbench_conn_args())
    timeout = 600 + dump.estimate_bytes() / 5e6  # 5 MB/s at the slowest
    out = _load_with(cluster, argv, timeout, pool, lambda res: pgdump.restore_failure(dump, res),
                     f"restoring {dump.path}")  # fmt: skip
    out["load.restore_seconds"] = out.pop("load.program_seconds")
    out["load.dump_bytes"] = float(dump.bytes)
    return out, argv


def prepare_sysbench(cluster: Cluster, w: sysbench.Workload,
                     pool: list[str] | None) -> tuple[dict[str, float], list[str]]:  # fmt: skip
    """sysbench's tables and rows (`sysbench TEST prepare`, as the server user); and its
    command."""
    found = sysbench_program()
    if found is None:
        raise ServerError(f"sysbench is not installed (apt-get install {sysbench.PACKAGE})")
    argv = w.prepare_argv(str(found), sysbench.conn_args(cluster.pgbench_conn_args()))
    timeout = 600 + w.tables * w.table_size / 20_000  # 20,000 rows/s at the slowest
    out = _load_with(cluster, argv, timeout, pool,
                     lambda res: None if res.ok else res.describe_failure(),
                     "sysbench prepare")  # fmt: skip
    out["load.prepare_seconds"] = out.pop("load.program_seconds")
    return out, argv


def _load_with(cluster: Cluster, argv: list[str], timeout: float, pool: list[str] | None,
               failure: Callable[[Any], str | None], what: str) -> dict[str, float]:  # fmt: skip
    """Data loaded by a program run as the server user (pg_restore, psql, sysbench), then
    VACUUM ANALYZE (as pgbench -i vacuums), pg_prewarm when installed and a checkpoint; the
    same counters as a pgbench load, with the tables and rows loaded."""
    devs, primary = devices.for_cluster(cluster, pool)
    before = _load_snapshot(cluster, devs)
    started = time.monotonic()
    res = cluster.host.run(argv, out=cluster.scratch / "restore.out", timeout=timeout,
                           user=cluster.user)  # fmt: skip
    why = failure(res)
    if why:
        raise ServerError(f"{what} failed: {why}")
    loaded = time.monotonic() - started
    with cluster.connect() as conn:
        conn.execute("VACUUM ANALYZE")
        size = _settle(conn)
        rows = conn.execute(
            "SELECT count(*), coalesce(sum(greatest(reltuples, 0)), 0) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.relkind IN ('r', 'm') "
            "AND n.nspname NOT IN ('pg_catalog', 'information_schema') "
            "AND n.nspname NOT LIKE 'pg_toast%'").fetchone()  # fmt: skip
    deltas = counters.delta(before, _load_snapshot(cluster, devs))
    out = {f"load.{k}": v for k, v in deltas.items()}
    out.update(metrics.io(deltas, primary, 0))
    out["load.seconds"], out["load.program_seconds"] = time.monotonic() - started, loaded
    out["load.database_bytes"] = float(size[0] if size else 0)
    out["load.tables"], out["load.rows"] = (float(rows[0]), float(rows[1])) if rows else (0, 0)
    return out


def _load_snapshot(cluster: Cluster, devs: list[str]) -> dict[str, float]:
    snap = {f"disk.{k}": v for k, v in counters.diskstats(cluster.host, devs).items()}
    with cluster.connect() as conn:
        pg = counters.postgres(conn, cluster.binaries.major, statements=False)
    snap.update({f"pg.{k}": v for k, v in pg.items()})
    return snap
