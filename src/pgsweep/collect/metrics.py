"""Per-trial figures derived from what the measured window recorded: transaction counts,
latency, stability, bytes per transaction, host shares. Pure functions over numbers, so
every name here is one a report or an export can rely on."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..host.api import Host
from ..postgres.pgbench import Summary

if TYPE_CHECKING:
    from .txlog import Reduction

SECTOR = 512  # /proc/diskstats counts 512-byte sectors whatever the device's sector size
STALL_SHARE = 0.10  # a second below 10% of the window's median TPS is a stall
MEMINFO = {
    "Cached": "mem.cached_kb",
    "Dirty": "mem.dirty_kb",
    "HugePages_Total": "mem.hugepages_total",
    "HugePages_Free": "mem.hugepages_free",
    "HugePages_Rsvd": "mem.hugepages_rsvd",
    "AnonHugePages": "mem.anon_hugepages_kb",
}
ARCSTATS = Path("/proc/spl/kstat/zfs/arcstats")


def transactions(summary: Summary, log: Reduction | None, sampling_rate: float) -> dict[str, float]:
    """Counts from the log when every transaction was logged, from pgbench's summary
    otherwise; the window TPS from the log's completions (scaled up when sampled)."""
    out = {
        "tx.ok": float(summary.transactions),
        "tx.failed": float(summary.failed),
        "tx.skipped": float(summary.skipped),
        "tx.retried": float(summary.retried),
        "tx.retries": float(summary.retries),
        "tx.late": float(summary.late),
    }
    if summary.lag_avg_ms is not None:
        out["lag.mean_ms"] = summary.lag_avg_ms
        out["lag.max_ms"] = summary.lag_max_ms or 0.0
    if log is None:
        return out
    out["log.sampling_rate"] = sampling_rate
    out["log.lines"] = float(log.lines)
    out["log.outside_window"] = float(log.outside_window)
    out["window.tps"] = log.window_tps / sampling_rate
    if sampling_rate == 1 and summary.tps > 0:
        # both count the same transactions over nearly the same span: a gap means the
        # log, the window or the parse went wrong (the report warns above 2%)
        out["window.tps_vs_summary"] = out["window.tps"] / summary.tps
    out["window.seconds"] = log.window_s
    out.update({f"latency.{k}_ms": v for k, v in log.latency.items()})
    if log.lag:
        out["lag.mean_ms"], out["lag.max_ms"] = log.lag["mean"], log.lag["max"]
    if sampling_rate == 1:
        out.update({"tx.ok": log.ok, "tx.failed": log.failed, "tx.skipped": log.skipped})
        if log.retries:
            out.update({"tx.retried": log.retried, "tx.retries": log.retries})
    return out


def stability(per_second_tps: list[float], counters: dict[str, float]) -> dict[str, float]:
    """CV of the per-second TPS, stall seconds, checkpoints that started in the window."""
    out: dict[str, float] = {}
    tps = np.array(per_second_tps, dtype=float)
    if len(tps) >= 2 and tps.mean() > 0:
        out["stability.tps_cv"] = float(tps.std(ddof=1) / tps.mean())
        out["stability.stall_seconds"] = float((tps < STALL_SHARE * np.median(tps)).sum())
    if len(tps):
        # seconds in which nothing committed at all (a sync standby holding every commit)
        out["stability.zero_tps_seconds"] = float((tps <= 0).sum())
    if "pg.checkpoints_timed" in counters:
        out["stability.checkpoints_timed"] = counters["pg.checkpoints_timed"]
        out["stability.checkpoints_req"] = counters.get("pg.checkpoints_req", 0.0)
        out["stability.checkpoints"] = (
            out["stability.checkpoints_timed"] + out["stability.checkpoints_req"]
        )
    return out


def io(counters: dict[str, float], primary: list[str], ok: float) -> dict[str, float]:
    """Bytes on the devices the data and WAL filesystems sit on (not the disks under them,
    which see the same writes again), WAL bytes, and both per transaction."""
    out: dict[str, float] = {}
    written = sum(counters.get(f"disk.{d}.sectors_written", 0.0) for d in primary) * SECTOR
    read = sum(counters.get(f"disk.{d}.sectors_read", 0.0) for d in primary) * SECTOR
    if primary:
        out["io.device_bytes_written"], out["io.device_bytes_read"] = written, read
    wal = counters.get("pg.wal_bytes", counters.get("pg.wal_lsn_bytes"))
    if wal is not None:
        out["io.wal_bytes"] = wal
    hit, miss = counters.get("pg.blks_hit"), counters.get("pg.blks_read")
    if hit is not None and miss is not None and hit + miss > 0:
        out["pg.cache_hit_ratio"] = hit / (hit + miss)
    if ok > 0:
        if primary:
            out["io.device_bytes_written_per_tx"] = written / ok
        if wal is not None:
            out["io.wal_bytes_per_tx"] = wal / ok
    if primary and wal:
        out["io.device_bytes_per_wal_byte"] = written / wal
    return out


def host_shares(counters: dict[str, float]) -> dict[str, float]:
    """CPU busy, iowait and steal as shares of all CPU time in the window."""
    states = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
    jiffies = {s: counters.get(f"host.cpu.{s}", 0.0) for s in states}
    total = sum(jiffies.values())
    if total <= 0:
        return {}
    busy = total - jiffies["idle"] - jiffies["iowait"]
    out = {
        "host.cpu_busy_share": busy / total,
        "host.iowait_share": jiffies["iowait"] / total,
        "host.steal_share": jiffies["steal"] / total,
    }
    hits, misses = counters.get("zfs.arc.hits"), counters.get("zfs.arc.misses")
    if hits is not None and misses is not None and hits + misses > 0:
        out["zfs.arc_hit_ratio"] = hits / (hits + misses)
    return out


def host_memory(host: Host) -> dict[str, float]:
    """`memory` of a host's /proc/meminfo and, where ZFS runs there, its ARC statistics."""
    return memory(host.read_text(Path("/proc/meminfo")), host.read_optional(ARCSTATS) or "")


def memory(meminfo_text: str, arcstats_text: str = "") -> dict[str, float]:
    """Page cache, dirty pages and huge pages at the end of the window (levels, not
    deltas); the ZFS ARC size where ZFS runs."""
    out: dict[str, float] = {}
    for line in meminfo_text.splitlines():
        key, _, rest = line.partition(":")
        if key in MEMINFO:
            out[MEMINFO[key]] = float(rest.split()[0])
    for fields in (line.split() for line in arcstats_text.splitlines()):
        if len(fields) == 3 and fields[0] in ("size", "c_max"):
            out[f"zfs.arc_{fields[0]}_bytes"] = float(fields[2])
    return out


def cgroup_memory(host: Host, group: Path) -> dict[str, float]:
    """A cgroup v1 memory group's limit, peak usage, page-cache and anonymous bytes, and how
    often the limit was hit (failcnt), over the trial (peak and failcnt reset at its start),
    read on its host."""
    stat = {}
    for line in host.read_text(group / "memory.stat").splitlines():
        key, _, value = line.partition(" ")
        stat[key] = float(value)
    return {
        "cgroup.limit_bytes": float(host.read_text(group / "memory.limit_in_bytes")),
        "cgroup.peak_bytes": float(host.read_text(group / "memory.max_usage_in_bytes")),
        "cgroup.cache_bytes": stat.get("cache", 0.0),
        "cgroup.rss_bytes": stat.get("rss", 0.0),
        "cgroup.failcnt": float(host.read_text(group / "memory.failcnt")),
    }
