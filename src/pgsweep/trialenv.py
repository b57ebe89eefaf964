"""The state layers act on during a run: the current cluster, what the server runs with,
and what happened while preparing the current trial."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from .host.proc import RunAs
from .postgres.binaries import Binaries
from .postgres.cluster import Cluster
from .postgres.pgbench import Workload


class TrialFailure(Exception):
    """This trial cannot be measured; the run stores it as failed and goes on."""

    def __init__(self, reason: str, log_tail: str = "") -> None:
        super().__init__(reason)
        self.reason = reason
        self.log_tail = log_tail


@dataclass
class TrialEnv:
    binaries: Binaries
    user: RunAs | None
    workdir: Path
    socket_root: Path
    # server setting -> {level as written: value in base units} from `postgres -C`
    canonical: dict[str, dict[str, str]]
    private: Path = Path("/nonexistent")  # root's 0700 scratch in the work area
    cluster: Cluster | None = None
    cluster_key: str | None = None
    cluster_failures: dict[str, str] = field(default_factory=dict)
    data_dirty: bool = False  # a writing workload ran since the snapshot was restored
    server_settings: dict[str, str] | None = None  # in force on the running server
    server_started_at: datetime | None = None
    prewarmed_for: datetime | None = None
    workload: Workload | None = None
    workload_writes: bool = True
    warmup_seconds: int = 0
    # What preparing the current trial did, e.g. ["restore", "restart"]; reset per trial.
    events: list[str] = field(default_factory=list)
    effective: dict[str, str] = field(default_factory=dict)  # SHOW of every server.* key
    devices: list[str] = field(default_factory=list)  # block devices under PGDATA and pg_wal
    primary_devices: list[str] = field(default_factory=list)  # the ones filesystems sit on
    latency_log: str | float = "auto"  # workload.latency_log
    load_counters: dict[str, dict[str, float]] = field(default_factory=dict)  # not yet saved
    cgroup: Path | None = None  # the memory cgroup the server runs in (os.memory_limit)
    cluster_home: Path | None = None  # where clusters are made: the storage layer's mount
    wal_home: Path | None = None  # where their pg_wal goes, when on a device of its own
    storage_key: str = ""  # the storage a cluster was built on: a new one needs a new cluster
    storage_devices: list[str] = field(default_factory=list)  # a ZFS pool's devices
    clusters_built: int = 0
    settings_recorded: set[str] = field(default_factory=set)  # configurations already recorded
    # This trial's values of every layer: a lower layer may depend on an upper one's (the
    # huge pages the os layer reserves depend on the server's settings).
    values: dict[str, dict[str, str | int | float | bool]] = field(default_factory=dict)
    # Server settings a lower layer decided (os.huge_pages -> huge_pages, huge_page_size).
    server_overrides: dict[str, str] = field(default_factory=dict)

    def require_cluster(self) -> Cluster:
        if self.cluster is None:
            raise TrialFailure("internal: no cluster was prepared for this trial")
        return self.cluster
