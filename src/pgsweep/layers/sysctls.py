"""The sysctls an experiment may set (`os.sysctl`), each with a documented safe range.

A name must resolve under /proc/sys (`sysctl_file`), be one that shapes performance
(`refusal`: none that runs a program as root, weakens a protection or pgsweep manages),
and have a range here: values outside it are refused before anything runs (`check`),
and checked again right before they are written. Limits on what the whole machine may
hold (open files, memory maps, shared memory and semaphore sets, TCP memory) have a floor
of at least what is in use now, with headroom, and never below the kernel's default, so
that no level can stop the host (or pgsweep's own restore). `table()` prints the ranges
for SECURITY.md."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..host.journal import SYSCTLS
from ..host.kernelfiles import SYSCTL

if TYPE_CHECKING:
    from ..host.api import Host
    from .base import ValidationContext

_NAME = re.compile(r"^[a-z][a-z0-9_]*(\.[A-Za-z0-9_-]+)+$")
INT = 2**31 - 1
ULONG_MAX_SHM = 2**64 - 2**24 - 1  # the kernel's default (and largest) shmmax and shmall


def sysctl_file(name: str) -> Path:
    """/proc/sys/NAME with dots as slashes; ValueError when the name is not a sysctl's, or
    the file it names is not under /proc/sys."""
    if not _NAME.fullmatch(name):
        raise ValueError("letters, digits, _ and -, joined by dots (e.g. vm.swappiness)")
    path = SYSCTL / name.replace(".", "/")
    if not str(path.resolve()).startswith(f"{SYSCTL}/"):
        raise ValueError(f"{path} resolves outside {SYSCTL}")
    return path


def refusal(name: str) -> str | None:
    """Why an experiment may not set this sysctl, or None: pgsweep sets only those that
    shape performance and have a safe range here, never one that runs a program as root,
    weakens a protection, opens the network or can halt the machine."""
    if SYSCTLS.fullmatch(name) and name in RANGES:
        return None
    return ("pgsweep sets only sysctls that shape performance and have a documented safe "
            "range (vm.swappiness, vm.dirty_*, kernel.sched_*, kernel.shm*, fs.file-max, "
            "net.core.somaxconn, net.ipv4.tcp_*mem, ...; SECURITY.md lists them), none that "
            "run programs, weaken a protection or can halt the machine")  # fmt: skip


# ---- what the machine uses now (floors) -------------------------------------------------


def _lines(host: Host, path: str) -> list[list[str]]:
    text = host.read_optional(Path(path)) or ""
    return [line.split() for line in text.splitlines()[1:] if line.strip()]


def _meminfo(host: Host, key: str) -> int:
    """A /proc/meminfo figure in kB (0 when absent)."""
    for line in host.read_text(Path("/proc/meminfo")).splitlines():
        if line.startswith(f"{key}:"):
            return int(line.split()[1])
    return 0


def _first(host: Host, path: str) -> int:
    return int(host.read_text(Path(path)).split()[0])


def _largest_map_count(host: Host) -> int:
    """The most memory maps any process holds now."""
    most = 0
    for d in host.list_owned(Path("/proc")):
        if d.isdigit():
            text = host.read_optional(Path(f"/proc/{d}/maps"))  # None: it ended meanwhile
            most = max(most, len(text.splitlines()) if text else 0)
    return most


def _tcp_pages(host: Host) -> int:
    for line in host.read_text(Path("/proc/net/sockstat")).splitlines():
        if line.startswith("TCP:"):
            fields = line.split()
            return int(fields[fields.index("mem") + 1]) if "mem" in fields else 0
    return 0


# per field, and how it was found, from what the host (the server's machine) uses now
Floor = Callable[["Host"], tuple[list[int], str]]


def _shm_floor(host: Host) -> tuple[list[int], str]:
    segs = _lines(host, "/proc/sysvipc/shm")
    return [max(64, len(segs) + 16)], f"{len(segs)} shared memory segments in use now, + 16"


def _shmmax_floor(host: Host) -> tuple[list[int], str]:
    largest = max((int(s[3]) for s in _lines(host, "/proc/sysvipc/shm")), default=0)
    return [max(1 << 20, largest)], f"the largest segment in use now is {largest} bytes"


def _shmall_floor(host: Host) -> tuple[list[int], str]:
    page = os.sysconf("SC_PAGE_SIZE")  # 4 KiB on every machine pgsweep runs on
    used = sum(-(-int(s[3]) // page) for s in _lines(host, "/proc/sysvipc/shm"))
    return [2 * used], f"{used} pages of shared memory in use now, x2"


def _sem_floor(host: Host) -> tuple[list[int], str]:
    sets = _lines(host, "/proc/sysvipc/sem")
    sizes = [int(s[3]) for s in sets]
    total = sum(sizes)
    return ([max(32, max(sizes, default=0)), max(256, 2 * total), 32, max(128, len(sets) + 16)],
            f"{len(sets)} semaphore sets of up to {max(sizes, default=0)} in use now, "
            f"{total} semaphores")  # fmt: skip


def _msg_floor(host: Host) -> tuple[list[int], str]:
    queues = _lines(host, "/proc/sysvipc/msg")
    return [max(32, len(queues) + 16)], f"{len(queues)} message queues in use now, + 16"


def _files_floor(host: Host) -> tuple[list[int], str]:
    now = _first(host, "/proc/sys/fs/file-nr")
    return [max(65536, 2 * now)], f"{now} files open now, x2"


def _nr_open_floor(host: Host) -> tuple[list[int], str]:
    """The hard limit of the process that reads the host's /proc/self/limits: pgsweep's
    own here, its agent's there."""
    limits = host.read_text(Path("/proc/self/limits"))
    m = re.search(r"^Max open files\s+\S+\s+(\S+)", limits, re.M)
    hard = int(m.group(1)) if m and m.group(1).isdigit() else 1 << 20
    return [max(65536, hard)], f"pgsweep's own limit on open files is {hard}"


def _aio_floor(host: Host) -> tuple[list[int], str]:
    now = _first(host, "/proc/sys/fs/aio-nr")
    return [max(65536, 2 * now)], f"{now} AIO requests in flight now, x2"


def _maps_floor(host: Host) -> tuple[list[int], str]:
    most = _largest_map_count(host)
    return [max(65530, 2 * most)], f"a process holds {most} memory maps now, x2"


def _tcp_floor(host: Host) -> tuple[list[int], str]:
    used = _tcp_pages(host)
    low = max(4096, 2 * used)
    return [low, low, low], f"TCP holds {used} pages now, x2"


@dataclass(frozen=True)
class Range:
    """Each whitespace-separated field of the value within [low, high]; `floor` raises
    the lows to what the machine uses now; `ordered`: fields must not decrease;
    `zero`: 0 is allowed too (the feature off, or the other key of a pair in charge)."""

    low: tuple[int, ...]
    high: tuple[int, ...]
    meaning: str
    floor: Floor | None = None
    rule: str = ""  # the floor in words, for SECURITY.md
    ordered: bool = False
    zero: bool = False


def _r(low: int, high: int, meaning: str, **kw: object) -> Range:
    return Range((low,), (high,), meaning, **kw)  # type: ignore[arg-type]


MIB = 1 << 20
RANGES: dict[str, Range] = {
    "vm.swappiness": _r(0, 200, "swap eagerness"),
    "vm.dirty_ratio": _r(1, 100, "% of memory dirty before writers block"),
    "vm.dirty_background_ratio": _r(1, 100, "% of memory dirty before background writeback"),
    "vm.dirty_bytes": _r(MIB, 2**40, "bytes; 0: dirty_ratio governs", zero=True),
    "vm.dirty_background_bytes": _r(MIB, 2**40, "bytes; 0: the ratio governs", zero=True),
    "vm.dirty_expire_centisecs": _r(1, 360_000, "age at which dirty data is written"),
    "vm.dirty_writeback_centisecs": _r(1, 60_000, "writeback wake-up interval"),
    "vm.overcommit_memory": _r(0, 2, "0 heuristic, 1 always, 2 strict (see overcommit_ratio)"),
    "vm.overcommit_ratio": _r(1, 1000, "% of RAM committable under overcommit_memory = 2"),
    "vm.overcommit_kbytes": _r(1, 2**48, "kB committable; 0: overcommit_ratio", zero=True),
    "vm.vfs_cache_pressure": _r(1, 1000, "dentry/inode reclaim (0 would never reclaim)"),
    "vm.zone_reclaim_mode": _r(0, 7, "bit mask"),
    "vm.page-cluster": _r(0, 6, "log2 of pages read from swap at once"),
    "vm.max_map_count": _r(65530, INT, "memory maps per process", floor=_maps_floor,
                           rule="twice the most maps a process holds now"),
    "vm.watermark_scale_factor": _r(1, 3000, "kswapd aggressiveness (kernel's range)"),
    "vm.watermark_boost_factor": _r(0, 100_000, "watermark boost after fragmentation"),
    "vm.stat_interval": _r(1, 3600, "seconds between VM statistics updates"),
    "vm.compaction_proactiveness": _r(0, 100, "background compaction"),
    "vm.numa_stat": _r(0, 1, "NUMA statistics on/off"),
    "kernel.sched_autogroup_enabled": _r(0, 1, "on/off"),
    "kernel.sched_cfs_bandwidth_slice_us": _r(1000, 1_000_000, "µs"),
    "kernel.sched_rr_timeslice_ms": _r(1, 1000, "ms"),
    "kernel.sched_migration_cost_ns": _r(0, 100_000_000, "ns"),
    "kernel.sched_min_granularity_ns": _r(100_000, 1_000_000_000, "ns"),
    "kernel.sched_latency_ns": _r(100_000, 1_000_000_000, "ns"),
    "kernel.sched_wakeup_granularity_ns": _r(0, 1_000_000_000, "ns"),
    "kernel.sched_child_runs_first": _r(0, 1, "on/off"),
    "kernel.sched_schedstats": _r(0, 1, "on/off"),
    "kernel.sched_tunable_scaling": _r(0, 2, "0 none, 1 log, 2 linear"),
    "kernel.sched_nr_migrate": _r(1, 4096, "tasks moved per balance"),
    "kernel.sched_energy_aware": _r(0, 1, "on/off"),
    "kernel.sched_util_clamp_min": _r(0, 1024, "utilisation clamp"),
    "kernel.sched_util_clamp_max": _r(0, 1024, "utilisation clamp"),
    "kernel.numa_balancing": _r(0, 3, "bit mask"),
    "kernel.numa_balancing_scan_delay_ms": _r(100, 600_000, "ms"),
    "kernel.numa_balancing_scan_period_min_ms": _r(100, 600_000, "ms"),
    "kernel.numa_balancing_scan_period_max_ms": _r(100, 3_600_000, "ms"),
    "kernel.numa_balancing_scan_size_mb": _r(1, 65536, "MB"),
    "kernel.shmmax": _r(MIB, ULONG_MAX_SHM, "bytes per segment", floor=_shmmax_floor,
                       rule="the largest segment in use now"),
    "kernel.shmall": _r(4096, ULONG_MAX_SHM, "pages of shared memory", floor=_shmall_floor,
                       rule="twice the pages in use now"),
    "kernel.shmmni": _r(64, 32768, "shared memory segments", floor=_shm_floor,
                       rule="the segments in use now + 16"),
    "kernel.sem": Range((32, 256, 32, 128), (65536, INT, 65536, 32768),
                        "SEMMSL SEMMNS SEMOPM SEMMNI", floor=_sem_floor,
                        rule="the largest set in use, twice the semaphores in use, the "
                        "sets in use + 16"),
    "kernel.msgmax": _r(8192, INT, "bytes per message"),
    "kernel.msgmnb": _r(16384, INT, "bytes per queue"),
    "kernel.msgmni": _r(32, 32768, "message queues", floor=_msg_floor,
                       rule="the queues in use now + 16"),
    "fs.aio-max-nr": _r(65536, 2**40, "AIO requests", floor=_aio_floor,
                       rule="twice the requests in flight now"),
    "fs.file-max": _r(65536, 2**63 - 1, "open files, machine-wide", floor=_files_floor,
                       rule="twice the files open now"),
    "fs.nr_open": _r(65536, 1_073_741_816, "open files per process", floor=_nr_open_floor,
                       rule="pgsweep's own hard limit on open files"),
    "net.core.somaxconn": _r(128, 65535, "listen backlog"),
    "net.core.rmem_default": _r(4096, 256 * MIB, "bytes"),
    "net.core.wmem_default": _r(4096, 256 * MIB, "bytes"),
    "net.core.rmem_max": _r(4096, INT, "bytes"),
    "net.core.wmem_max": _r(4096, INT, "bytes"),
    "net.core.netdev_max_backlog": _r(100, 1_000_000, "packets"),
    "net.core.busy_poll": _r(0, 10_000, "µs"),
    "net.core.busy_read": _r(0, 10_000, "µs"),
    "net.ipv4.tcp_mem": Range((4096,) * 3, (2**40,) * 3, "pages: min pressure max",
                              floor=_tcp_floor, ordered=True,
                              rule="twice the pages TCP holds now"),
    "net.ipv4.tcp_rmem": Range((4096,) * 3, (INT,) * 3, "bytes: min default max",
                               ordered=True),
    "net.ipv4.tcp_wmem": Range((4096,) * 3, (INT,) * 3, "bytes: min default max",
                               ordered=True),
    "net.ipv4.tcp_fin_timeout": _r(1, 600, "s"),
    "net.ipv4.tcp_keepalive_time": _r(1, 32767, "s"),
    "net.ipv4.tcp_keepalive_intvl": _r(1, 32767, "s"),
    "net.ipv4.tcp_keepalive_probes": _r(1, 127, "probes"),
    "net.ipv4.tcp_tw_reuse": _r(0, 2, "0 off, 1 on, 2 loopback only"),
    "net.ipv4.tcp_max_syn_backlog": _r(128, 1_000_000, "half-open connections"),
    "net.ipv4.tcp_slow_start_after_idle": _r(0, 1, "on/off"),
    "net.ipv4.tcp_autocorking": _r(0, 1, "on/off"),
    "net.ipv4.tcp_timestamps": _r(0, 2, "0 off, 1 on, 2 without random offsets"),
    "net.ipv4.tcp_sack": _r(0, 1, "on/off"),
    "net.ipv4.tcp_window_scaling": _r(0, 1, "on/off"),
    "net.ipv4.tcp_no_metrics_save": _r(0, 1, "on/off"),
    "net.ipv4.tcp_notsent_lowat": _r(16384, 2**32 - 1, "bytes"),
}


def expected(name: str, host: Host) -> str:
    """The range of `name` in words, with the floors the host sets now."""
    rng = RANGES[name]
    lows, why = _lows(rng, host)
    parts = [f"{lo}..{hi}" for lo, hi in zip(lows, rng.high, strict=True)]
    text = " ".join(parts) + (" (or 0)" if rng.zero else "") + f": {rng.meaning}"
    text += ", each at least the one before" if rng.ordered else ""
    return text + (f"; floor: {why}" if why else "")


def _lows(rng: Range, host: Host) -> tuple[list[int], str]:
    if rng.floor is None:
        return list(rng.low), ""
    floors, why = rng.floor(host)
    return [max(a, b) for a, b in zip(rng.low, floors, strict=True)], why


def check(name: str, value: object, host: Host) -> str | None:
    """Why `value` is outside the safe range of `name` on `host` (refused), or None."""
    rng = RANGES[name]
    fields = str(value).split()
    if len(fields) != len(rng.low) or not all(re.fullmatch(r"-?[0-9]+", f) for f in fields):
        n = len(rng.low)
        return f"{value!r} is not {'an integer' if n == 1 else f'{n} integers'}"
    numbers = [int(f) for f in fields]
    if rng.zero and numbers == [0]:
        return None
    lows, _ = _lows(rng, host)
    for i, (n, lo, hi) in enumerate(zip(numbers, lows, rng.high, strict=True)):
        if not lo <= n <= hi:
            which = f"field {i + 1} of " if len(numbers) > 1 else ""
            return f"{which}{value!r} is outside the safe range"
    if rng.ordered and numbers != sorted(numbers):
        return f"{value!r}: each field must be at least the one before"
    return None


def check_overcommit(sysctl: dict[str, str], host: Host) -> str | None:
    """vm.overcommit_memory = 2 caps what all processes may commit: the cap this
    configuration's ratio (or kbytes) gives, plus swap, must leave room for twice what
    is committed now and a quarter of RAM more (the servers pgsweep starts commit their
    shared memory), or no process (pgsweep's restore included) could start."""
    def now(name: str) -> str:
        return sysctl.get(name) or host.read_text(sysctl_file(name)).strip()

    if not any(k.startswith("vm.overcommit_") for k in sysctl):
        return None  # the machine's own policy, which pgsweep does not change
    if now("vm.overcommit_memory") != "2":
        return None
    kbytes, ratio = int(now("vm.overcommit_kbytes")), int(now("vm.overcommit_ratio"))
    ram, committed = _meminfo(host, "MemTotal"), _meminfo(host, "Committed_AS")
    limit = (kbytes or ram * ratio // 100) + _meminfo(host, "SwapTotal")
    need = 2 * committed + ram // 4
    if limit < need:
        return (f"vm.overcommit_memory = 2 would cap committed memory at {limit >> 10} MiB; "
                f"{committed >> 10} MiB is committed now, and pgsweep needs twice that and "
                f"a quarter of RAM more ({need >> 10} MiB)")  # fmt: skip
    return None


def check_levels(key: str, levels: list[Any], ctx: ValidationContext, in_factors: bool) -> None:
    """`os.sysctl.NAME` (its base value or factor levels): a sysctl pgsweep may set, each
    level inside its safe range; PgsweepError naming the key and line otherwise."""
    name = key.split(".", 1)[1]
    where = ("factors", "os", "sysctl", name) if in_factors else ("os", "sysctl", name)
    try:
        path = sysctl_file(name)
    except ValueError as exc:
        raise ctx.source.error(where, f"{name!r} is not a sysctl name: {exc}",
                               expected="a name such as vm.swappiness") from None  # fmt: skip
    st = ctx.host.lstat(path)
    if st is None or not st.is_file:
        raise ctx.source.error(where, f"there is no sysctl {name!r} ({path} does not exist)",
                               fix="check the name with `sysctl -a`")  # fmt: skip
    why = refusal(name)
    if why:
        raise ctx.source.error(where, f"sysctl {name} cannot be set here: {why}",
                               fix="remove it from the experiment file")  # fmt: skip
    if not st.mode & 0o200:
        raise ctx.source.error(where, f"sysctl {name} is read-only",
                               fix="remove it from the experiment file")  # fmt: skip
    for level in levels:
        why = check(name, level, ctx.host)
        if why:
            raise ctx.source.error(where, f"sysctl {name}: {why}",
                                   expected=expected(name, ctx.host),
                                   fix="choose a value inside the range (SECURITY.md lists "
                                   "every sysctl's), or remove it")  # fmt: skip


def recheck(sysctl: dict[str, str], host: Host) -> str | None:
    """Right before a configuration's values are written on `host`: still inside their
    ranges (the floors follow what the machine uses, which moves)? The reason a trial
    fails, or None."""
    for name, value in sysctl.items():
        why = check(name, value, host)
        if why:
            return f"os.sysctl.{name}: {why} (now {expected(name, host)})"
    why = check_overcommit(sysctl, host)
    return f"os.sysctl.vm.overcommit_memory: {why}" if why else None


def table() -> str:
    """The ranges as a Markdown table (SECURITY.md holds it; a test keeps the two equal)."""
    rows = ["| sysctl | safe range | meaning | floor: at least |", "|---|---|---|---|"]
    for name, rng in RANGES.items():
        span = " ".join(f"{lo}..{hi}" for lo, hi in zip(rng.low, rng.high, strict=True))
        span += " or 0" if rng.zero else ""
        span += ", non-decreasing" if rng.ordered else ""
        rows.append(f"| `{name}` | {span} | {rng.meaning} | {rng.rule or '-'} |")
    return "\n".join(rows) + "\n"
