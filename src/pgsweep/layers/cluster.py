"""The `cluster` layer: initdb options and the data. A change means a new cluster:
initdb, load with `pgbench -i` (or restore the pg_dump archive `from` names, or `sysbench
TEST prepare` with workload.tool = "sysbench"), snapshot of the loaded data directory."""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..core import Cost, Value
from ..errors import PgsweepError
from ..host import userfile
from ..postgres import dump as pgdump
from ..postgres.access import ClientAccess, ServerError
from ..postgres.binaries import Binaries
from ..postgres.cluster import PORT, Cluster
from ..postgres.startcheck import kept_template
from ..units import memory_total, parse_size, ram_share
from . import room
from .base import ResourceLayer, ValidationContext, check_table
from .cluster_load import load_pgbench, make_roles, prepare_sysbench, restore_dump
from .context import RunContext, Server, Storage, TrialContext, TrialFailure


class ClusterTable(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    scale: int = Field(10, ge=1, le=100_000, description="pgbench -i -s")
    size: str | None = Field(None, description='"200MB" or "50% of RAM": the scale is computed')
    data_checksums: bool = Field(False, description="initdb --data-checksums")
    wal_segsize: int | None = Field(None, description="initdb --wal-segsize, in MB")

    @field_validator("size")
    @classmethod
    def _size(cls, v: str | None) -> str | None:
        share = ram_share(v) if v is not None else None
        if share is not None and not 0 < share <= 10:
            raise ValueError('a share of RAM above 0% and at most 1000%, e.g. "50% of RAM"')
        if v is not None and share is None:
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


@dataclass(frozen=True)
class ClusterSettings:
    """One configuration's cluster: what initdb gets and how much data pgbench -i loads."""

    scale: int
    size_bytes: int | None  # cluster.size as bytes
    size_share: float | None  # cluster.size as a share of RAM (of os.memory_limit when set)
    data_checksums: bool
    wal_segsize: int | None
    dump: pgdump.Dump | None = None  # cluster.from: restored instead of pgbench -i

    def initdb_options(self) -> list[str]:
        opts = ["--data-checksums"] if self.data_checksums else []
        if self.wal_segsize is not None:
            opts += ["--wal-segsize", str(self.wal_segsize)]
        return opts

    def target_bytes(self, memory_limit: int | None) -> int | None:
        """cluster.size in bytes; a share of RAM is of the memory limit when one is set."""
        if self.size_share is not None:
            return int(self.size_share * (memory_limit or memory_total()))
        return self.size_bytes


def _create(cluster: Cluster, options: list[str]) -> None:
    """The data directory: a copy of the one the start checks keep for these binaries,
    initdb options and server user (startcheck.keep_templates, made by this run's checks
    or an earlier run's), or initdb. The copy has initdb's files, for a seventh of its CPU
    (0.14 CPU-s against 1.0 here, stop 41): the suite made about 240 clusters. pg_wal on a
    device of its own (initdb --waldir) is initdb's to place."""
    template = None
    if cluster.waldir is None:
        template = kept_template(cluster.binaries, cluster.user, tuple(options), cluster.host)
    if template is not None:
        try:
            cluster.create_from(template)
            return
        except ServerError:  # pruned while copied: initdb instead
            cluster.host.remove_tree(cluster.root)
    cluster.create(options)


def _memory_limit(config: Mapping[str, Any]) -> int | None:
    os_settings = config.get("os")
    return getattr(os_settings, "memory_limit", None)


class ClusterLayer(ResourceLayer):
    """Clusters are resources: initdb, pgbench -i and a snapshot of the loaded data, kept
    for the run and restored from the snapshot before a trial whose workload writes."""

    name = "cluster"

    def __init__(self) -> None:
        self.size_where = "[cluster] scale"  # the key that sets the data size, for errors
        self.dumps: dict[str, pgdump.Dump] = {}  # cluster.from as written -> the archive

    def validate(
        self, base: dict[str, Any], factors: dict[str, list[Any]], ctx: ValidationContext
    ) -> dict[str, Value]:
        base = dict(base)
        source = base.pop("from", None)
        if "from" in factors:
            raise ctx.source.error(("factors", "cluster", "from"),
                                   "cluster.from cannot be a factor (yet)",
                                   fix="compare two data sets in two experiments")  # fmt: skip
        if source is not None:
            for key in ("scale", "size"):
                if key in base or key in factors:
                    raise ctx.source.error(
                        ("factors", "cluster", key) if key in factors else ("cluster", key),
                        f"cluster.{key} and cluster.from both set the data",
                        fix=f"remove cluster.{key}: the dump's data is what is restored",
                    )  # fmt: skip
            self.dumps[str(source)] = _check_dump(source, ctx)
        table = check_table(ClusterTable, self.name, base, factors, ctx.source)
        key = "size" if "size" in base or "size" in factors else "scale"
        self.size_where = ctx.source.where(*(("factors", "cluster", key) if key in factors
                                             else ("cluster", key)))  # fmt: skip
        if ("size" in base or "size" in factors) and ("scale" in base or "scale" in factors):
            raise ctx.source.error(
                ("factors", "cluster", "size") if "size" in factors else ("cluster", "size"),
                "cluster.size and cluster.scale both set the data size",
                fix="keep one: size computes the scale that gives that many bytes",
            )
        values: dict[str, Value] = dict(table.model_dump())
        if source is not None:
            values["from"] = str(source)
        return values

    def settings(self, values: dict[str, Value]) -> ClusterSettings:
        size = values.get("size")
        share = ram_share(size) if size is not None else None
        wal = values.get("wal_segsize")
        return ClusterSettings(
            scale=int(values["scale"]),
            size_bytes=parse_size(size) if size is not None and share is None else None,
            size_share=share, data_checksums=bool(values["data_checksums"]),
            wal_segsize=int(wal) if wal is not None else None,
            dump=self.dumps[str(values["from"])] if "from" in values else None,
        )  # fmt: skip

    def level_identity(self, key: str, level: Value) -> object:
        if key == "size" and isinstance(level, str):
            share = ram_share(level)
            return ("share", share) if share is not None else parse_size(level)
        return repr(level)

    def cost(self, key: str) -> Cost:
        return Cost.CLUSTER

    def resource_key(self, settings: ClusterSettings, config: Mapping[str, Any]) -> str:
        target = settings.target_bytes(_memory_limit(config))
        return json.dumps({**asdict(settings), "target": target}, sort_keys=True)

    def coexist(self, configs: Sequence[Mapping[str, Any]], where: Path) -> str | None:
        """Can every cluster stay alive at once? Each needs its data twice (the snapshot),
        room for WAL (as much as max_wal_size lets it keep: three builds' clusters on a
        2 GiB device filled it while their snapshots were made) and its standbys' copies
        in the work area; clusters on one storage share it (layers/room.py)."""
        total: dict[str, room.Place] = {}
        held: dict[str, int] = {}  # place -> how many clusters put something there
        seen: set[str] = set()
        for config in configs:
            key = str(getattr(config.get("build"), "spec", None))  # each build: its own
            key += self.resource_key(config[self.name], config) + repr(config.get("storage"))
            if key in seen:
                continue
            seen.add(key)
            for name, place in room.places(config, where, most_wal=True).items():
                into = total.setdefault(name, room.Place(place.name, place.room))
                into.parts += [(f"{what} of cluster {len(seen)}", n) for what, n in place.parts]
                held[name] = held.get(name, 0) + 1
        for name, place in total.items():  # one cluster alone is check_room's question
            if held[name] > 1 and place.need > place.room:
                return f"{held[name]} clusters need {place.describe()}"
        return None

    def check_room(self, configs: Sequence[Mapping[str, Any]], where: Path) -> None:
        """Every configuration's data must fit where it will live, alone at least:
        otherwise exit 2 with the figures, before anything is made."""
        for config in configs:
            why = room.too_big(config, where)
            if why:
                raise PgsweepError(
                    f"a configuration's data cannot fit: it needs {why}",
                    where=self.size_where,
                    fix="a smaller cluster.size or scale, fewer standbys, a larger device, or "
                    "--results on a filesystem with more room",
                )  # fmt: skip

    def build(self, settings: ClusterSettings, config: Mapping[str, Any],
              below: Mapping[str, Any], run: RunContext) -> Server:  # fmt: skip
        storage: Storage = below["storage"]
        number = run.next_number("cluster")  # unique across storages: a scope in the store
        waldir = storage.wal_home / f"cluster-{number}-wal" if storage.wal_home else None
        binaries = below["build"].binaries if "build" in below else run.binaries
        remote = run.tcp_sides()  # pgbench or standbys on other hosts: TCP for them alone
        cluster = Cluster(binaries, run.user, storage.home / f"cluster-{number}",
                          run.socket_root / f"c{number}", waldir, host=run.host,
                          port=remote[0][0].port if remote else PORT)  # fmt: skip
        workload = config.get("workload")
        replay_roles = workload.replay_roles if workload is not None else ()
        cluster.peers = [ClientAccess(side.address, side.peer, what,
                                      replay_roles if what == "all" else ())
                         for side, what in remote]  # fmt: skip
        server = Server(cluster.root.name, cluster, binaries)
        try:
            _create(cluster, settings.initdb_options())
            cluster.start()
            if remote:  # one password for the run: every side's verifier is of it
                cluster.set_password(remote[0][0].verifier)
            target = settings.target_bytes(_memory_limit(config))
            loader = run.client(config, binaries)  # the load runs beside the server
            if settings.dump is not None:
                _dump_fits(settings.dump, binaries)  # a build's major is known by now
                server.load, server.load_argv = restore_dump(cluster, settings.dump,
                                                             storage.pool_devices)  # fmt: skip
            elif workload is not None and workload.tool == "sysbench":
                server.load, server.load_argv = prepare_sysbench(
                    cluster, workload.sysbench(), storage.pool_devices)
            else:
                server.load, server.load_argv = load_pgbench(
                    cluster, loader, settings.scale, target, storage.pool_devices)
            if replay_roles:  # a replay's sessions' roles
                make_roles(cluster, replay_roles)
                if remote:  # replayed from the client's host, with the run's password
                    cluster.set_password(remote[0][0].verifier, replay_roles)
            cluster.take_snapshot()
            # the loaded directory is no copy: a writing workload's first trial starts from
            # the snapshot too, so no trial's data state depends on its position
            server.dirty = True
        except ServerError as exc:
            tail = cluster.log_tail()
            cluster.destroy()
            raise TrialFailure(str(exc), tail) from exc
        return server

    def destroy(self, resource: Server, run: RunContext) -> None:
        resource.destroy()

    def prepare(self, settings: ClusterSettings, trial: TrialContext) -> None:
        """A writing workload starts from the loaded data: put the snapshot back."""
        server = trial.server
        if server.dirty and trial.settings["workload"].writes:
            server.stop()
            server.cluster.restore_snapshot()
            server.settings, server.dirty = None, False
            server.generation += 1
            trial.events.append("restore")

    def verify(self, settings: ClusterSettings, trial: TrialContext) -> None:
        """Which cluster ran the trial, as its server says: its data directory (every
        cluster has its own, under the run's work area) and initdb's system identifier
        (which the copies of one kept template share: layers/cluster._create)."""
        with trial.cluster.connect() as conn:
            row = conn.execute("SELECT system_identifier, current_setting('data_directory') "
                               "FROM pg_control_system()").fetchone()  # fmt: skip
        trial.effective["cluster.system_identifier"] = str(row[0]) if row else ""
        trial.effective["cluster.data_directory"] = str(row[1]) if row else ""
        trial.effective["cluster.name"] = trial.cluster.root.name  # its load phase's key
        if trial.server.load_argv:  # what loaded it: pgbench -i, pg_restore, psql, sysbench
            trial.effective["cluster.load_command"] = shlex.join(trial.server.load_argv)


def _dump_fits(dump: pgdump.Dump, binaries: Binaries) -> None:
    """A dump of a newer major version than the cluster's server is refused (pg_restore
    would fail part way): checked at plan for the installed server, here for a build."""
    if max(dump.majors) > binaries.major:
        raise ServerError(f"{dump.path} is a dump of PostgreSQL {dump.server_version} made "
                          f"by pg_dump {dump.pg_dump_version}, newer than this cluster's "
                          f"PostgreSQL {binaries.version} (its build)")  # fmt: skip


def _check_dump(value: object, ctx: ValidationContext) -> pgdump.Dump:
    """cluster.from: "dump:/abs/path" of an archive the server user may read, opened here
    without following a link, of no newer major version than the cluster's."""
    where = ("cluster", "from")
    expected = '"dump:/abs/path" of a pg_dump archive (custom, directory, tar or plain SQL)'
    text = value if isinstance(value, str) else ""
    path = Path(text.removeprefix("dump:"))
    if not text.startswith("dump:") or not path.is_absolute() or ".." in path.parts:
        raise ctx.source.error(where, f"not a dump to restore (got {value!r})",
                               expected=expected,
                               fix="name the archive by its absolute path")  # fmt: skip
    try:
        found = pgdump.identify(userfile.inspect(path, ctx.user))
    except (userfile.UserFileError, pgdump.DumpError) as exc:
        what = str(exc) if isinstance(exc, userfile.UserFileError) else f"{path} {exc}"
        raise ctx.source.error(where, f"the dump cannot be restored: {what}",
                               expected=expected,
                               fix="name a pg_dump archive (not a link) the server user may "
                               "read, in folders it may pass through") from None  # fmt: skip
    major = ctx.binaries.major
    if max(found.majors) > major and not ctx.catalog_deferred:  # every config builds: later
        raise ctx.source.error(
            where, f"{path} is a dump of PostgreSQL {found.server_version} made by pg_dump "
            f"{found.pg_dump_version}, newer than this cluster's PostgreSQL "
            f"{ctx.binaries.version}", fix=f"dump it again with PostgreSQL {major}'s pg_dump "
            "(it reads newer servers), or run a newer PostgreSQL (postgres.bin)",
        )  # fmt: skip
    return found

