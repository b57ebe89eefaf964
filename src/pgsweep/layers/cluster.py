"""The `cluster` layer: initdb options and data size. A change means a new cluster:
initdb, load with `pgbench -i`, snapshot of the loaded data directory."""

from __future__ import annotations

import json
import time
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..collect import counters, devices, metrics
from ..core import Cost, Value
from ..host import proc
from ..postgres.cluster import Cluster, ServerError
from ..trialenv import TrialEnv, TrialFailure
from ..units import memory_total, parse_size, ram_share
from .base import Layer, ValidationContext, check_table


class ClusterTable(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    scale: int = Field(10, ge=1, le=100_000, description="pgbench -i -s")
    size: str | None = Field(None, description='"200MB" or "50% of RAM": the scale is computed')
    data_checksums: bool = Field(False, description="initdb --data-checksums")
    wal_segsize: int | None = Field(None, description="initdb --wal-segsize, in MB")

    @field_validator("size")
    @classmethod
    def _size(cls, v: str | None) -> str | None:
        if v is not None and ram_share(v) is None:
            try:
                if parse_size(v) < 20 * 1024**2:
                    raise ValueError("at least 20MB (an empty pgbench database is ~8MB)")
            except ValueError as exc:
                if "at least" in str(exc):
                    raise
                raise ValueError('a size such as "200MB", or "50% of RAM"') from None
        return v

    @field_validator("wal_segsize")
    @classmethod
    def _power_of_two(cls, v: int | None) -> int | None:
        if v is not None and (v < 1 or v > 1024 or v & (v - 1)):
            raise ValueError("a power of two between 1 and 1024 (MB)")
        return v


def initdb_options(values: dict[str, Value]) -> list[str]:
    opts = ["--data-checksums"] if values.get("data_checksums") else []
    if values.get("wal_segsize") is not None:
        opts += ["--wal-segsize", str(values["wal_segsize"])]
    return opts


class ClusterLayer(Layer):
    name = "cluster"

    def validate(
        self, base: dict[str, Any], factors: dict[str, list[Any]], ctx: ValidationContext
    ) -> dict[str, Value]:
        table = check_table(ClusterTable, self.name, base, factors, ctx.source)
        if ("size" in base or "size" in factors) and ("scale" in base or "scale" in factors):
            raise ctx.source.error(
                ("factors", "cluster", "size") if "size" in factors else ("cluster", "size"),
                "cluster.size and cluster.scale both set the data size",
                fix="keep one: size computes the scale that gives that many bytes",
            )
        return dict(table.model_dump())

    def level_identity(self, key: str, level: Value) -> object:
        if key == "size" and isinstance(level, str):
            share = ram_share(level)
            return ("share", share) if share is not None else parse_size(level)
        return repr(level)

    def cost(self, key: str) -> Cost:
        return Cost.CLUSTER

    def apply(self, values: dict[str, Value], env: TrialEnv) -> None:
        key = json.dumps(values, sort_keys=True) + env.storage_key
        if key in env.cluster_failures:
            raise TrialFailure(f"this cluster could not be built: {env.cluster_failures[key]}")
        if env.cluster_key == key and env.cluster is not None:
            if env.data_dirty:
                env.cluster.restore_snapshot()
                env.server_settings = None
                env.data_dirty = False
                env.events.append("restore")
            return
        self.undo(env)
        env.clusters_built += 1
        number = env.clusters_built
        home = env.cluster_home or env.workdir
        waldir = env.wal_home / f"cluster-{number}-wal" if env.wal_home else None
        cluster = Cluster(
            env.binaries, env.user, home / f"cluster-{number}", env.socket_root / f"c{number}",
            waldir,
        )  # fmt: skip
        env.cluster, env.cluster_key, env.devices = cluster, key, []
        try:
            cluster.create(initdb_options(values))
            cluster.start()
            target = target_bytes(values, env.values.get("os", {}))
            env.load_counters[cluster.root.name] = _load(
                cluster, int(values["scale"]), target, env.storage_devices
            )
            cluster.take_snapshot()
        except ServerError as exc:
            env.cluster_failures[key] = str(exc)
            self.undo(env)
            raise TrialFailure(str(exc), cluster.log_tail()) from exc
        env.server_settings = None
        env.data_dirty = False
        env.events.append("new-cluster")

    def verify(self, values: dict[str, Value], env: TrialEnv) -> None:
        """Which cluster ran the trial: initdb's system identifier is unique per cluster."""
        with env.require_cluster().connect() as conn:
            row = conn.execute("SELECT system_identifier FROM pg_control_system()").fetchone()
        env.effective["cluster.system_identifier"] = str(row[0]) if row else ""

    def undo(self, env: TrialEnv) -> None:
        if env.cluster is not None:
            env.cluster.destroy()
        env.cluster, env.cluster_key, env.server_settings = None, None, None


def target_bytes(values: dict[str, Value], os_values: dict[str, Value]) -> int | None:
    """cluster.size in bytes; a share of RAM is of os.memory_limit when one is set."""
    size = values.get("size")
    if size is None:
        return None
    share = ram_share(size)
    if share is None:
        return parse_size(size)
    limit = os_values.get("memory_limit")
    return int(share * (parse_size(limit) if limit is not None else memory_total()))


def _database_bytes(cluster: Cluster) -> int:
    with cluster.connect() as conn:
        row = conn.execute("SELECT pg_database_size('postgres')").fetchone()
    return int(row[0]) if row else 0


def _pgbench_init(cluster: Cluster, scale: int) -> None:
    argv = [cluster.binaries.path("pgbench"), *cluster.pgbench_conn_args()]
    argv += ["-i", "-q", "-s", str(scale), "postgres"]
    # ~2 s per 10 scale units here; allow slow disks a wide margin.
    res = proc.run(argv, out=cluster.scratch / "load.out", timeout=120 + scale * 5,
                   user=cluster.user)  # fmt: skip
    if not res.ok:
        raise ServerError(f"loading the data failed: {res.describe_failure()}")


def scale_for(cluster: Cluster, target: int) -> int:
    """The scale that gives a database of `target` bytes, from the bytes one scale unit
    took here (a scale-2 load: its size less the empty database's, halved)."""
    empty = _database_bytes(cluster)
    _pgbench_init(cluster, 2)
    per_unit = max(1, (_database_bytes(cluster) - empty) // 2)
    return max(1, round((target - empty) / per_unit))


def _load(
    cluster: Cluster, scale: int, target: int | None = None, pool: list[str] | None = None
) -> dict[str, float]:
    """pgbench -i (with its vacuum), pg_prewarm when installed, then a checkpoint. Returns
    the I/O of that phase (seed 3 compared bytes written while loading and while running):
    device and PostgreSQL counter deltas, seconds, scale and the database size. With a
    target size the scale is measured first (cluster.size)."""
    if target is not None:
        scale = scale_for(cluster, target)
    devs, primary = devices.for_cluster(cluster, pool)
    before = _load_snapshot(cluster, devs)
    started = time.monotonic()
    _pgbench_init(cluster, scale)
    with cluster.connect() as conn:
        has_prewarm = conn.execute(
            "SELECT count(*) FROM pg_available_extensions WHERE name = 'pg_prewarm'"
        ).fetchone()
        if has_prewarm and has_prewarm[0]:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_prewarm")
        conn.execute("CHECKPOINT")
        size = conn.execute("SELECT pg_database_size('postgres')").fetchone()
    deltas = counters.delta(before, _load_snapshot(cluster, devs))
    out = {f"load.{k}": v for k, v in deltas.items()}
    out.update(metrics.io(deltas, primary, 0))
    out["load.seconds"] = time.monotonic() - started
    out["load.scale"], out["load.database_bytes"] = float(scale), float(size[0] if size else 0)
    if target is not None:
        out["load.target_bytes"] = float(target)
    return out


def _load_snapshot(cluster: Cluster, devs: list[str]) -> dict[str, float]:
    snap = {f"disk.{k}": v for k, v in counters.diskstats(devs).items()}
    with cluster.connect() as conn:
        pg = counters.postgres(conn, cluster.binaries.major)
    snap.update({f"pg.{k}": v for k, v in pg.items()})
    return snap
