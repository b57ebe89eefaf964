"""The `replication` layer: streaming standbys of the trial's primary, async or sync, with
settings of their own, optionally behind a private network link with a bandwidth limit.

Standbys are made with pg_basebackup from the running primary once every layer prepared
it (`attach`), and belong to the primary's Server (postgres.standby.ReplicaSet): the engine
stops and destroys them with it. They are made again when the set-up changes or when the
primary's data was put back from its snapshot (a writing trial ran): every trial starts
with standbys streaming and caught up with the primary it runs on."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..collect.replication import LagSampler
from ..core import Cost, Value
from ..engine.standby_load import StandbyLoad
from ..host import netns
from ..host.journal import UndoJournal
from ..postgres.cluster import ServerError
from ..postgres.standby import ReplicaSet, Standby, upstream_socket, wait_streaming
from ..units import parse_duration
from .base import Layer, ValidationContext, check_table
from .context import Demand, RunContext, Server, TrialContext, TrialFailure
from .server import ServerLayer, as_pg_value

# settings a standby may have of its own ([replication.standby])
STANDBY_SETTINGS = ("hot_standby_feedback", "max_standby_streaming_delay",
                    "max_standby_archive_delay", "wal_receiver_status_interval",
                    "recovery_min_apply_delay", "wal_receiver_timeout")  # fmt: skip
NO_DELAY = ("the kernel here has no netem (tc's latency emulation) and pgsweep has no latency "
            "proxy, so replication.delay cannot be honoured")  # fmt: skip


class ReplicationTable(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    standbys: int = Field(0, ge=0, le=8, description="streaming standbys of the primary")
    mode: Literal["async", "sync"] = "async"
    sync_standbys: str = Field("FIRST 1", description='"FIRST n" or "ANY n"')
    network: bool = Field(False, description="standbys in a network namespace, over veth")
    bandwidth: str | None = Field(None, description='tc tbf rate, e.g. "10mbit"')
    delay: str | None = Field(None, description="refused: no netem here")
    max_lag: int | float | str = Field("60s", description="replay lag that fails a trial")

    @field_validator("sync_standbys")
    @classmethod
    def _sync(cls, v: str) -> str:
        kind, _, n = v.strip().partition(" ")
        if kind.upper() not in ("FIRST", "ANY") or not n.strip().isdigit() or int(n) < 1:
            raise ValueError('"FIRST n" or "ANY n" with n at least 1')
        return f"{kind.upper()} {int(n)}"

    @field_validator("bandwidth")
    @classmethod
    def _rate(cls, v: str | None) -> str | None:
        if v is not None:
            netns.rate_bits(v)
        return v

    @field_validator("max_lag")
    @classmethod
    def _lag(cls, v: Any) -> Any:
        if parse_duration(v) < 1:
            raise ValueError('a duration of at least 1 s, e.g. "60s"')
        return v


@dataclass(frozen=True)
class ReplicationSettings:
    standbys: int
    mode: str
    sync_kind: str
    sync_count: int
    network: bool
    bandwidth_bits: int | None
    max_lag_s: float
    standby: dict[str, str] = field(default_factory=dict)

    @property
    def names(self) -> list[str]:
        return [f"s{i}" for i in range(1, self.standbys + 1)]

    def shape(self) -> str:
        """What makes a set of standbys: a trial with another shape needs another set."""
        own = sorted(self.standby.items())
        return repr((self.standbys, self.network, self.bandwidth_bits, own))

    def synchronous_standby_names(self) -> str:
        if self.mode != "sync" or not self.standbys:
            return ""
        return f"{self.sync_kind} {self.sync_count} ({', '.join(self.names)})"


class ReplicationLayer(Layer):
    name = "replication"

    def __init__(self) -> None:
        self.journal: UndoJournal | None = None
        self.sets = 0

    def validate(
        self, base: dict[str, Any], factors: dict[str, list[Any]], ctx: ValidationContext
    ) -> dict[str, Value]:
        standby = base.pop("standby", {}) if isinstance(base.get("standby"), dict) else {}
        own = {k: v for k, v in factors.items() if not k.startswith("standby.")}
        table = check_table(ReplicationTable, self.name, base, own, ctx.source)
        if base.get("delay") is not None or "delay" in factors:
            where = ("factors", "replication", "delay") if "delay" in factors else (
                "replication", "delay")  # fmt: skip
            raise ctx.source.error(where, NO_DELAY, fix="remove replication.delay; "
                                   "replication.bandwidth (tc tbf) works here")  # fmt: skip
        networked = table.network or any(factors.get("network", []))
        if networked and os.geteuid() != 0:
            raise ctx.source.error(
                ("replication", "network"),
                "a network namespace needs root",
                fix="run pgsweep as root, or remove replication.network",
            )
        out: dict[str, Value] = dict(table.model_dump())
        for key, levels in [(k, [v]) for k, v in standby.items()] + [
            (k.removeprefix("standby."), v) for k, v in factors.items() if k.startswith("standby.")
        ]:  # fmt: skip
            path = ("replication", "standby", key) if key in standby else (
                "factors", "replication", "standby", key)  # fmt: skip
            if key not in STANDBY_SETTINGS:
                raise ctx.source.error(path, "not a standby setting pgsweep sets",
                                       expected=f"one of {', '.join(STANDBY_SETTINGS)}",
                                       fix="primary settings go in [server]")  # fmt: skip
            for level in levels:
                ServerLayer.check_value(path, key, level, ctx)
        out.update({f"standby.{k}": v for k, v in standby.items()})
        return out

    def settings(self, values: dict[str, Value]) -> ReplicationSettings:
        kind, n = str(values["sync_standbys"]).split()
        bandwidth = values.get("bandwidth")
        return ReplicationSettings(
            standbys=int(values["standbys"]), mode=str(values["mode"]), sync_kind=kind,
            sync_count=int(n), network=bool(values["network"]),
            bandwidth_bits=netns.rate_bits(str(bandwidth)) if bandwidth else None,
            max_lag_s=parse_duration(values["max_lag"]),
            standby={k.removeprefix("standby."): as_pg_value(v) for k, v in values.items()
                     if k.startswith("standby.")},
        )  # fmt: skip

    def cost(self, key: str) -> Cost:
        # the sync mode is the primary's synchronous_standby_names (a reload); anything else
        # is a new set of standbys: a base backup and a start, about a restart's cost
        if key in ("mode", "sync_standbys"):
            return Cost.RELOAD
        return Cost.NOTHING if key == "max_lag" else Cost.RESTART

    def check_configurations(
        self, configs: Sequence[Mapping[str, Any]], ctx: ValidationContext
    ) -> None:
        for config in configs:
            s: ReplicationSettings = config[self.name]
            if s.mode == "sync" and s.sync_count > s.standbys:
                raise ctx.source.error(
                    ("replication", "mode"),
                    f'mode = "sync" with {s.sync_count} synchronous standby(s) needs as many '
                    f"standbys; a configuration has {s.standbys}",
                    fix="raise replication.standbys, or lower the n of sync_standbys",
                )
            if s.bandwidth_bits is not None and not s.network:
                raise ctx.source.error(("replication", "bandwidth"),
                                       "a bandwidth limit needs replication.network = true",
                                       fix="set network = true, or remove bandwidth")  # fmt: skip
            if "synchronous_standby_names" in config.get("server", {}) and s.standbys:
                raise ctx.source.error(
                    ctx.where.get("server.synchronous_standby_names", ("server",)),
                    "replication.mode and sync_standbys set synchronous_standby_names",
                    fix="remove server.synchronous_standby_names",
                )

    def start_run(self, run: RunContext) -> None:
        self.journal = UndoJournal.for_this_run("replication", run.workdir)

    def prepare(self, settings: ReplicationSettings, trial: TrialContext) -> Demand:
        """Drop a set of standbys this trial cannot use; make its network before the primary
        starts (the primary must listen on it); say what the primary runs with."""
        server = trial.server
        current: ReplicaSet | None = server.replicas
        if current is not None and (current.shape != settings.shape()
                                    or current.generation != server.generation):  # fmt: skip
            server.replicas = None
            current.destroy()
            current = None
        if current is not None and not settings.standbys:
            current.stop()
        demand = Demand({"synchronous_standby_names": settings.synchronous_standby_names()})
        if not settings.standbys:
            return demand
        if current is None:
            current = ReplicaSet(settings.shape(), [], server.generation)
            if settings.network:
                assert self.journal is not None
                self.sets += 1
                current.network = netns.create(self.journal, self.sets, settings.bandwidth_bits,
                                               trial.run.private / "netns")  # fmt: skip
            server.replicas = current
        if current.network is not None:
            demand.listen = (current.network.host_ip, current.network.peer_ip)
        return demand

    def attach(self, settings: ReplicationSettings, trial: TrialContext) -> None:
        """With the primary running: make the standbys if needed, start them, wait until they
        stream, caught up, in the sync state asked for."""
        server = trial.server
        replicas: ReplicaSet | None = server.replicas
        if not settings.standbys or replicas is None:
            return
        try:
            if not replicas.standbys:
                self._make(settings, trial, server, replicas)
                trial.events.append("new-standbys")
            replicas.start()
            sync = settings.sync_count if settings.mode == "sync" else 0
            wait_streaming(trial.cluster, settings.names, sync)
        except ServerError as exc:
            tails = "\n".join(s.log_tail(8) for s in replicas.standbys)
            server.replicas = None
            replicas.destroy()
            raise TrialFailure(str(exc).splitlines()[0], tails) from exc
        standbys = {s.name: s for s in replicas.standbys}
        trial.demand.watchers.append(LagSampler(trial.cluster, standbys, settings.max_lag_s))
        if trial.demand.standby_workload is not None:
            trial.demand.watchers.append(StandbyLoad(standbys, trial.demand.standby_workload))

    def _make(self, settings: ReplicationSettings, trial: TrialContext, server: Server,
              replicas: ReplicaSet) -> None:  # fmt: skip
        primary = server.cluster
        link = replicas.network
        upstream = (f"host={link.host_ip} port=5432 user=pgsweep sslmode=disable"
                    if link is not None else upstream_socket(primary))  # fmt: skip
        for name in settings.names:
            standby = Standby(trial.run.binaries, trial.run.user,
                              primary.root.with_name(f"{primary.root.name}-{name}"),
                              primary.socket_dir.with_name(f"{primary.socket_dir.name}{name}"),
                              name, upstream, link.netns if link is not None else None)  # fmt: skip
            replicas.standbys.append(standby)
            replicas.clone_seconds += standby.clone(primary)
            standby.write_settings(settings.standby)
        trial.effective["replication.clone_seconds"] = f"{replicas.clone_seconds:.2f}"

    def verify(self, settings: ReplicationSettings, trial: TrialContext) -> None:
        replicas: ReplicaSet | None = trial.server.replicas
        trial.effective["replication.standbys"] = str(settings.standbys)
        if not settings.standbys or replicas is None:
            return
        with trial.cluster.connect() as conn:
            rows = conn.execute("SELECT application_name, state, sync_state "
                                "FROM pg_stat_replication ORDER BY 1").fetchall()  # fmt: skip
        trial.effective["replication.state"] = ", ".join(f"{r[0]}: {r[1]} {r[2]}" for r in rows)
        for standby in replicas.standbys:
            with standby.connect() as conn:
                for name in settings.standby:
                    row = conn.execute("SELECT current_setting(%s)", (name,)).fetchone()
                    trial.effective[f"replication.standby.{name}"] = str(row[0]) if row else ""
        if replicas.network is not None:
            trial.effective["replication.rtt_ms"] = f"{replicas.network.rtt_ms():.3f}"

    def finish_run(self, run: RunContext) -> None:
        """The engine destroyed the primaries and their standbys; the journal takes down any
        network a failure left behind."""
        if self.journal is not None:
            self.journal.restore()
