"""Rows of the per-trial series tables, as `Results` returns them (the dataclass fields
name the columns)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Second:
    """One second of the measured window, from pgbench's transaction log."""

    second: int
    tps: float
    failed: int
    skipped: int
    latency_mean_ms: float | None
    latency_p50_ms: float | None
    latency_p90_ms: float | None
    latency_p99_ms: float | None
    latency_max_ms: float | None
    lag_mean_ms: float | None


@dataclass(frozen=True)
class Sample:
    """One pgbench progress line (-P): the per-second view of trials without a log."""

    at_s: float
    tps: float
    latency_ms: float | None
    stddev_ms: float | None
    failed: int | None
    lag_ms: float | None
    skipped: int | None


@dataclass(frozen=True)
class StandbySecond:
    """One standby in one second of the measured window (the primary's pg_stat_replication);
    lags are None when PostgreSQL shows NULL (caught up and idle)."""

    standby: str
    second: int
    state: str | None
    sync_state: str | None
    write_lag_ms: float | None
    flush_lag_ms: float | None
    replay_lag_ms: float | None
    sent_bytes_behind: float | None
    write_bytes_behind: float | None
    flush_bytes_behind: float | None
    replay_bytes_behind: float | None


@dataclass(frozen=True)
class Wait:
    """Where one process type's sessions were, on average, over a trial's window: average
    sessions (samples of pg_stat_activity in that state / samples taken)."""

    backend_type: str
    wait_class: str  # "CPU" (running, no wait event), "Idle", or PostgreSQL's wait class
    wait_event: str
    sessions: float


@dataclass(frozen=True)
class ProcessCpu:
    """One process type's CPU over a trial's window (None: /proc keeps no such figure)."""

    process_type: str
    processes: int
    user_s: float | None
    system_s: float | None
    voluntary_switches: float | None
    involuntary_switches: float | None
    minor_faults: float | None
    major_faults: float | None


@dataclass(frozen=True)
class LatencyBin:
    low_ms: float
    high_ms: float
    n: int


@dataclass(frozen=True)
class DeviceSecond:
    """One device in one second of the measured window (collect.device_series): as iostat
    derives them from /proc/diskstats; the device "memory" carries the machine's Dirty and
    Writeback instead (kB), the device figures None."""

    device: str
    second: int
    reads_s: float | None
    writes_s: float | None
    read_kb_s: float | None
    write_kb_s: float | None
    await_ms: float | None  # None: no I/O completed in that second
    queue_depth: float | None
    util_pct: float | None
    dirty_kb: float | None
    writeback_kb: float | None


@dataclass(frozen=True)
class ToolSecond:
    """One of the workload tool's own figures in one second of the measured window
    (sysbench's `--report-interval=1` lines: qps, reads_s, writes_s, other_s, errors_s,
    reconnects_s)."""

    second: int
    name: str
    value: float
