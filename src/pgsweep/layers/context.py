"""What layers act on while a run goes on, passed to them through the layer interface:

- `RunContext`: one run on one host: its fixed facts (binaries, server user, work area,
  journals' home) and what each layer keeps while the run goes on (`state_of`): layer
  objects hold no run state, so one experiment can prepare a layer on several hosts, or
  in two runs, without one seeing what the other did;
- resources the engine owns and keeps alive across trials, keyed by the levels that shape
  them: a `Storage` (a filesystem to build clusters on) and a `Server` (a loaded cluster
  and what its server runs with now);
- `TrialContext`: one trial: every layer's typed settings for its configuration (read
  only), the resources it runs on, what earlier layers demand of later ones (`Demand`),
  and what preparing it did and found (events, effective settings) for the record.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from ..host.journal import UndoJournal

if TYPE_CHECKING:
    from ..host.api import Host
    from ..host.blockdev import Grant
    from ..host.proc import RunAs
    from ..postgres import pgreplay, sysbench
    from ..postgres.access import Listen
    from ..postgres.binaries import Binaries
    from ..postgres.cluster import Cluster
    from ..postgres.pgbench import Workload
    from ..store import TrialRecord


class TrialFailure(Exception):
    """This trial cannot be measured; the run stores it as failed and goes on."""

    def __init__(self, reason: str, log_tail: str = "") -> None:
        super().__init__(reason)
        self.reason = reason
        self.log_tail = log_tail


@dataclass
class HostSide:
    """A role's part of the run on another host ([roles] client or standbys): that host,
    this run's work area there, and how it reaches the server: the server listens on
    `address` (its own, as that host reaches it) at `port`, and admits `peer` (that host's
    address) alone, with a password made for this run, which only its SCRAM verifier (set
    on each cluster) and the 0600 passfile there hold. After a lost connection the engine
    opens the host again: `host`, `workdir`, `socket_root`, `passfile` change and `epoch`
    counts up (what lived in the old work area is gone); the rest stays."""

    host: Host
    workdir: Path
    address: str
    peer: str
    port: int
    passfile: Path
    verifier: str
    password: str = field(repr=False)  # kept in memory only, to reach the host again
    socket_root: Path = Path("/nonexistent")  # servers' socket folders there (standbys)
    epoch: int = 0

    def conn_args(self) -> list[str]:
        return ["-h", self.address, "-p", str(self.port), "-U", "pgsweep"]

    def env(self) -> dict[str, str]:
        return {"PGPASSFILE": str(self.passfile), "PGSSLMODE": "disable"}


T = TypeVar("T")


@dataclass(frozen=True)
class RunContext:
    binaries: Binaries  # the installed PostgreSQL the experiment names (postgres.bin)
    user: RunAs | None  # the server user; None: the user running pgsweep
    workdir: Path  # the run's work area (root-owned, 0711)
    private: Path  # root's own scratch in it (0700): command output, images, pid files
    socket_root: Path  # /tmp/pgsweep-XXXX: socket paths must stay short
    # server setting -> {level as written: value in base units} from `postgres -C`
    canonical: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    # builds made before the first trial (BuildSpec -> layers.build.PreparedBuild)
    builds: Mapping[Any, Any] = field(default_factory=dict)
    host: Host = field(kw_only=True)  # the server's machine: every effect goes through it
    client_side: HostSide | None = field(default=None, kw_only=True)  # pgbench elsewhere
    # standby s1's side, s2's, ... when [roles] puts it on another host (None: here)
    standby_sides: tuple[HostSide | None, ...] = field(default=(), kw_only=True)
    # this run's id ("PID-STARTTIME", its lock held) and the registry its journals go in
    # on `host`: made by the work area before the first trial (a dry run makes neither)
    run_id: str = field(default="", kw_only=True)
    registry: Path = field(default=Path("/nonexistent"), kw_only=True)
    grant: Grant | None = field(default=None, kw_only=True)  # --allow-device, --wipe
    cpu_profile_s: int = field(default=0, kw_only=True)  # [experiment] cpu_profile
    io_latency_s: int = field(default=0, kw_only=True)  # [experiment] io_latency
    # layer name -> what that layer keeps for this run on this host (its journal, what
    # it reserved, how many of a thing it made); see `state_of`
    state: dict[str, Any] = field(default_factory=dict, kw_only=True, repr=False,
                                  compare=False)  # fmt: skip

    def state_of(self, layer: str, make: Callable[[], T]) -> T:
        """The run state `layer` keeps on this run's host, made by `make` on first use."""
        if layer not in self.state:
            self.state[layer] = make()
        return self.state[layer]  # type: ignore[no-any-return]

    def journal(self, part: str = "", work_root: Path | None = None) -> UndoJournal:
        """An undo journal of this run on its host (`part` keeps a resource's apart, see
        host/journal.py): its path is the run's, in the registry; nothing is written to it
        before its first entry."""
        suffix = f".{part}" if part else ""
        return UndoJournal(self.registry / f"{self.run_id}{suffix}.undo", work_root, self.host)

    def tcp_sides(self) -> list[tuple[HostSide, str]]:
        """Every other host the server admits over TCP, with what for: "all" (the client's
        pgbench) or "replication" (a standby's base backup and stream)."""
        out = [(self.client_side, "all")] if self.client_side is not None else []
        return out + [(s, "replication") for s in self.standby_sides if s is not None]

    def standby_side(self, number: int) -> HostSide | None:
        """Standby s`number`'s host, when [roles] puts it on another (None: here)."""
        sides = self.standby_sides
        return sides[number - 1] if number <= len(sides) else None

    def standby_epochs(self) -> tuple[int, ...]:
        """Which connection to each standby host a set of standbys is made over: a host
        reached again has lost what lived in its old work area."""
        return tuple(s.epoch if s is not None else 0 for s in self.standby_sides)

    def next_number(self, kind: str) -> int:
        """1, 2, ... for each `kind` of thing made in this run (cluster-N, storage-N)."""
        counts: dict[str, int] = self.state_of("numbers", dict)
        counts[kind] = counts.get(kind, 0) + 1
        return counts[kind]

    def canonical_for(self, binaries: Binaries) -> Mapping[str, Mapping[str, str]]:
        """What each level means to these binaries (a build with other block sizes reads
        "128MB" of shared_buffers as another number of pages)."""
        for prepared in self.builds.values():
            if prepared.binaries is not None and prepared.binaries.bindir == binaries.bindir:
                return prepared.canonical  # type: ignore[no-any-return]
        return self.canonical

    def client(self, config: Mapping[str, Any], server: Binaries) -> Binaries:
        """The pgbench every configuration runs: the installed one (postgres.bin), so a
        faster client never passes for a faster server; a build's own with
        build.pgbench = "own"."""
        build = config.get("build")
        return server if getattr(build, "pgbench", "shared") == "own" else self.binaries


@dataclass
class Storage:
    """A filesystem clusters are built on (or the work area itself, without [storage])."""

    key: str
    home: Path  # root-owned directory clusters are made in
    wal_home: Path | None = None  # where their pg_wal goes, on a device of its own
    pool_devices: list[str] = field(default_factory=list)  # FUSE hides these from stat
    handle: Any = None  # the storage layer's own record of what it made


@dataclass
class Server:
    """A loaded cluster and its server's state. Only one server runs at a time: the engine
    stops the others before a trial starts this one."""

    key: str
    cluster: Cluster
    binaries: Binaries
    settings: dict[str, str] | None = None  # in force on the running server; None: restart
    started_at: datetime | None = None
    prewarmed_for: datetime | None = None
    dirty: bool = False  # a writing workload ran since the snapshot was restored
    devices: list[str] = field(default_factory=list)  # block devices under data and WAL
    primary_devices: list[str] = field(default_factory=list)  # the ones filesystems sit on
    load: dict[str, float] = field(default_factory=dict)  # the load phase's I/O, not yet saved
    load_argv: list[str] = field(default_factory=list)  # the command that loaded its data
    recorded: bool = False  # its storage environment is in the store
    generation: int = 0  # how many times its loaded data was put back from the snapshot
    # its streaming standbys (postgres.standby.ReplicaSet), owned with it: stopped and
    # destroyed before it
    replicas: Any = None

    def stop(self) -> None:
        if self.replicas is not None:
            self.replicas.stop()
        self.cluster.stop()
        self.settings = None

    def destroy(self) -> None:
        try:
            if self.replicas is not None:
                replicas, self.replicas = self.replicas, None
                replicas.destroy()
        finally:
            self.cluster.destroy()

    def running(self) -> bool:
        return self.cluster.postmaster_pid() is not None


@dataclass
class Demand:
    """What a layer decides for the layers after it in a trial: server settings it owns
    (os.huge_pages sets huge_pages and huge_page_size), the cgroup the server must start
    in, the pgbench workload to measure."""

    server_settings: dict[str, str] = field(default_factory=dict)
    cgroup: Path | None = None
    workload: Workload | None = None
    # watch the measured window beside pgbench (replication lag), see measure.py
    watchers: list[Watcher] = field(default_factory=list)
    # the primary's TCP side, for its standbys only (replication.network)
    listen: Listen | None = None
    standby_workload: Workload | None = None  # a read load on each standby during the window
    # workload.tool = "sysbench" or "pgreplay": what runs the window instead of pgbench
    tool_workload: sysbench.Workload | pgreplay.Replay | None = None

    def merged(self, other: Demand | None) -> Demand:
        if other is None:
            return self
        return Demand(
            {**self.server_settings, **other.server_settings},
            other.cgroup if other.cgroup is not None else self.cgroup,
            other.workload if other.workload is not None else self.workload,
            self.watchers + other.watchers,
            other.listen if other.listen is not None else self.listen,
            other.standby_workload if other.standby_workload is not None
            else self.standby_workload,
            other.tool_workload if other.tool_workload is not None else self.tool_workload,
        )  # fmt: skip


class Watcher(Protocol):
    """Something sampled while the measured pgbench runs."""

    def begin(self, trial: TrialContext) -> None:
        """Right before the measured run starts."""

    def end(self, trial: TrialContext, record: TrialRecord, abort: bool = False) -> None:
        """Right after it ended: stop, put figures into `record`, raise TrialFailure when
        what was watched makes the trial unusable. With `abort` (the measured run failed,
        or Ctrl-C): only stop, at once, and raise nothing."""


@dataclass
class TrialContext:
    id: str
    settings: Mapping[str, Any]  # layer name -> that layer's typed settings, read only
    resources: Mapping[str, Any]  # layer name -> the resource it built for this trial
    run: RunContext
    server: Server
    demand: Demand = field(default_factory=Demand)
    events: list[str] = field(default_factory=list)  # what preparing it did
    effective: dict[str, str] = field(default_factory=dict)  # what is in force, read back

    @property
    def cluster(self) -> Cluster:
        return self.server.cluster

    @property
    def client(self) -> Binaries:
        return self.run.client(self.settings, self.server.binaries)
