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
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..core import Cost, Value
from ..errors import PgsweepError
from ..host import netns
from ..host.journal import UndoJournal
from ..postgres.access import Listen, ServerError
from ..postgres.standby import (
    AT_LEAST_PRIMARY,
    ReplicaSet,
    Standby,
    drop_slots,
    upstream,
    upstream_socket,
    wait_streaming,
)
from ..units import parse_duration
from .base import Layer, ValidationContext, check_table
from .context import Demand, RunContext, Server, TrialContext, TrialFailure
from .replication_watch import LagSampler, lost_first
from .server import ServerLayer, as_pg_value
from .standby_load import StandbyLoad

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
    def apply_delay_s(self) -> float:
        delay = self.standby.get("recovery_min_apply_delay")
        return parse_duration(delay, default_unit="ms") if delay else 0.0

    @property
    def names(self) -> list[str]:
        return [f"s{i}" for i in range(1, self.standbys + 1)]

    def shape(self) -> str:
        """What makes a set of standbys: a trial with another shape needs another set (a
        change of settings only restarts them)."""
        return repr((self.standbys, self.network, self.bandwidth_bits))

    def synchronous_standby_names(self) -> str:
        if self.mode != "sync" or not self.standbys:
            return ""
        return f"{self.sync_kind} {self.sync_count} ({', '.join(self.names)})"


class ReplicationLayer(Layer):
    name = "replication"

    def __init__(self) -> None:
        self.active = False  # some configuration has a standby (what the file says)

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
        for key in base:  # where a combination refused later names the key (with its line)
            ctx.where[f"replication.{key}"] = ("replication", key)
        for key in own:
            ctx.where[f"replication.{key}"] = ("factors", "replication", key)
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
        self.active = any(c[self.name].standbys for c in configs)
        for config in configs:
            self._check(config[self.name], config, ctx)
        workload = [c.get("workload") for c in configs]
        if not self.active and any(getattr(w, "standby_script", None) for w in workload):
            raise ctx.source.error(
                ctx.where.get("workload.standby_script", ("workload", "standby_script")),
                "a standby read load, but no configuration has a standby",
                fix="set replication.standbys, or remove standby_script",
            )

    def _check(self, s: ReplicationSettings, config: Mapping[str, Any],
               ctx: ValidationContext) -> None:  # fmt: skip
        def fail(key: str, what: str, fix: str) -> PgsweepError:
            where = ctx.where.get(key, (key.split(".")[0], key.split(".", 1)[1]))
            return ctx.source.error(where, what, fix=fix)

        server: Mapping[str, str] = config.get("server", {})
        if s.mode == "sync" and s.sync_count > s.standbys:
            raise fail("replication.mode", f'mode = "sync" with {s.sync_count} synchronous '
                       f"standby(s) needs as many standbys; a configuration has {s.standbys}",
                       "raise replication.standbys, or lower the n of sync_standbys")  # fmt: skip
        if s.bandwidth_bits is not None and not s.network:
            raise fail("replication.bandwidth", "a bandwidth limit needs replication.network "
                       "= true", "set network = true, or remove bandwidth")  # fmt: skip
        if self.active and "synchronous_standby_names" in server:
            raise fail("server.synchronous_standby_names", "replication.mode and "
                       "sync_standbys set synchronous_standby_names",
                       "remove server.synchronous_standby_names")  # fmt: skip
        if not s.standbys:
            return
        if server.get("wal_level") == "minimal":
            raise fail("server.wal_level", "standbys need wal_level = replica or logical",
                       "remove wal_level = minimal, or replication.standbys")  # fmt: skip
        senders = _int(server.get("max_wal_senders"))
        if senders is not None and senders < s.standbys + 2:
            raise fail("server.max_wal_senders", f"max_wal_senders = {senders} cannot serve "
                       f"{s.standbys} standby(s) and a base backup's two connections",
                       f"set it to at least {s.standbys + 2}")  # fmt: skip
        load = config.get("workload")
        limit = _int(s.standby.get("max_connections", server.get("max_connections"))) or 100
        if load is not None and load.standby_script and load.standby_clients >= limit - 3:
            raise fail("workload.standby_clients", f"{load.standby_clients} clients on each "
                       f"standby, whose max_connections is {limit} (3 are reserved)",
                       "lower standby_clients, or raise max_connections")  # fmt: skip

    def start_run(self, run: RunContext) -> None:
        state = run.state_of(self.name, lambda: ReplicationRun(
            run.journal("replication", run.workdir), run.workdir / "standbys"))  # fmt: skip
        if self.active:
            run.host.private_dir(state.home, 0o711)

    def prepare(self, settings: ReplicationSettings, trial: TrialContext) -> Demand | None:
        """Drop a set of standbys this trial cannot use (another set-up, or the primary's
        data was put back from its snapshot); make its network before the primary starts
        (the primary listens on it); say what the primary runs with."""
        if not self.active:
            return None  # no standby anywhere: the primary's settings are the file's alone
        server = trial.server
        current: ReplicaSet | None = server.replicas
        if current is not None and (current.shape != settings.shape()
                                    or current.generation != server.generation
                                    or current.epochs != trial.run.standby_epochs()):  # fmt: skip
            server.replicas = None
            current.destroy()
            current = None
        demand = Demand({"synchronous_standby_names": settings.synchronous_standby_names()})
        if not settings.standbys:
            return demand
        if current is None:
            current = ReplicaSet(settings.shape(), [], server.generation,
                                 epochs=trial.run.standby_epochs())  # fmt: skip
            if settings.network:
                run = trial.run
                state: ReplicationRun = run.state[self.name]
                current.network = netns.create(state.journal, run.run_id,
                                               run.next_number("netns"),
                                               settings.bandwidth_bits,
                                               run.private / "netns", run.host)  # fmt: skip
            server.replicas = current
        if current.network is not None:
            link = current.network
            demand.listen = Listen(link.host_ip, link.peer_ip, link.primary_ns)
        return demand

    def attach(self, settings: ReplicationSettings, trial: TrialContext) -> None:
        """With the primary running: drop slots nobody streams from, make the standbys if
        needed, give them their settings, start them, wait until they stream, caught up, in
        the sync state asked for."""
        if not self.active:
            return
        server = trial.server
        replicas: ReplicaSet | None = server.replicas
        live = [s.slot for s in replicas.standbys] if replicas is not None else []
        dropped = drop_slots(trial.cluster, live if settings.standbys else [])
        trial.events += ["drop-slots"] if dropped else []
        if not settings.standbys or replicas is None:
            return
        try:
            if not replicas.standbys:
                self._make(settings, trial, server, replicas)
                trial.events.append("new-standbys")
            wanted = _standby_settings(settings, server.settings or {})
            if wanted != replicas.settings:  # None: new standbys, written the first time
                for standby in replicas.standbys:
                    standby.write_settings(wanted)
                if replicas.settings is not None:
                    replicas.restart()
                replicas.settings = wanted
            replicas.start()
            sync = settings.sync_count if settings.mode == "sync" else 0
            wait_streaming(trial.cluster, settings.names, sync, 60 + settings.apply_delay_s)
        except ServerError as exc:
            first, *rest = str(exc).splitlines() or [""]
            first = lost_first(replicas.standbys, first)
            tails = "\n".join([*rest, *(s.log_tail(8) for s in replicas.standbys
                                         if s.host.alive())])  # fmt: skip
            server.replicas = None
            replicas.destroy()
            raise TrialFailure(first, tails) from exc
        standbys = {s.name: s for s in replicas.standbys}
        trial.demand.watchers.append(LagSampler(trial.cluster, standbys, settings.max_lag_s))
        if trial.demand.standby_workload is not None:
            trial.demand.watchers.append(StandbyLoad(standbys, trial.demand.standby_workload))

    def _make(self, settings: ReplicationSettings, trial: TrialContext, server: Server,
              replicas: ReplicaSet) -> None:  # fmt: skip
        """Standbys live in the work area, not on the experiment's storage: their writes
        stay out of the primary's device counters, and out of its space."""
        primary, link = server.cluster, replicas.network
        home = trial.run.state[self.name].home
        up = upstream(link.host_ip, primary.port) if link is not None else upstream_socket(primary)
        for number, name in enumerate(settings.names, 1):
            side = trial.run.standby_side(number)
            folder = f"{primary.root.name}-{server.generation}-{name}"
            sockets = f"{primary.socket_dir.name}{name}"
            if side is None:  # here, beside the primary (or behind replication.network)
                standby = Standby(server.binaries, trial.run.user, home / folder,
                                  primary.socket_dir.with_name(sockets), name, up,
                                  link.standby_ns if link is not None else None,
                                  host=trial.run.host)  # fmt: skip
                over = None
            else:  # on its own host, over the real network with the run's password
                standby = Standby(server.binaries, trial.run.user,
                                  side.workdir / "standbys" / folder, side.socket_root / sockets,
                                  name, upstream(side.address, side.port, str(side.passfile)),
                                  host=side.host)  # fmt: skip
                over = (side.conn_args(), side.env())
            replicas.standbys.append(standby)
            replicas.clone_seconds += standby.clone(primary, over)
        trial.effective["replication.clone_seconds"] = f"{replicas.clone_seconds:.2f}"

    def verify(self, settings: ReplicationSettings, trial: TrialContext) -> None:
        """What streams from the primary and what its commits wait for, read back from it
        (never the file's request: `run --against` once recorded a standby that did not
        run); a trial whose standbys are not the ones asked for fails."""
        with trial.cluster.connect() as conn:
            rows = conn.execute("SELECT application_name, state, sync_state "
                                "FROM pg_stat_replication ORDER BY 1").fetchall()  # fmt: skip
            row = conn.execute("SELECT current_setting('synchronous_standby_names')").fetchone()
        waits_for = str(row[0]) if row else ""
        streaming = [r for r in rows if r[1] == "streaming"]
        trial.effective["replication.standbys"] = str(len(streaming))
        trial.effective["replication.synchronous_standby_names"] = waits_for
        if rows:
            trial.effective["replication.state"] = ", ".join(f"{r[0]}: {r[1]} {r[2]}" for r in rows)
        replicas: ReplicaSet | None = trial.server.replicas
        if self.active and (len(streaming) != settings.standbys
                            or waits_for != settings.synchronous_standby_names()):  # fmt: skip
            raise TrialFailure(lost_first(replicas.standbys if replicas else [], (
                f"replication.standbys = {settings.standbys} (synchronous_standby_names "
                f"{settings.synchronous_standby_names()!r}), but {len(streaming)} standby(s) "
                f"stream from the primary and it waits for {waits_for!r}")))  # fmt: skip
        if not settings.standbys or replicas is None:
            return
        for standby in replicas.standbys:
            with standby.connect() as conn:
                for name in settings.standby:
                    got = conn.execute("SELECT current_setting(%s)", (name,)).fetchone()
                    trial.effective[f"replication.standby.{name}"] = str(got[0]) if got else ""
        if replicas.network is not None:
            trial.effective["replication.rtt_ms"] = f"{replicas.network.rtt_ms():.3f}"
        remote = [s for n in range(1, settings.standbys + 1) if (s := trial.run.standby_side(n))]
        if remote:  # the round trip from each standby's host to the primary, the slowest
            rtt = max(s.host.tcp_rtt(s.address, s.port) for s in remote)
            trial.effective["replication.rtt_ms"] = f"{rtt:.3f}"

    def finish_run(self, run: RunContext) -> None:
        """The engine destroyed the primaries and their standbys; the journal takes down any
        network a failure left behind."""
        state: ReplicationRun | None = run.state.get(self.name)
        if state is not None:
            state.journal.restore()


@dataclass
class ReplicationRun:
    """What the replication layer keeps in one run on one host: the journal of its
    networks, and the work area's folder for standbys' data."""

    journal: UndoJournal
    home: Path


def _standby_settings(s: ReplicationSettings, primary: Mapping[str, str]) -> dict[str, str]:
    """What a standby runs with: the primary's values of the settings PostgreSQL requires a
    hot standby to have at least as high, then [replication.standby]."""
    return {k: primary[k] for k in AT_LEAST_PRIMARY if k in primary} | s.standby


def _int(text: str | None) -> int | None:
    return int(text) if text is not None and text.isdigit() else None
