"""`pgsweep doctor`: what this machine offers the layers, read without changing anything
(except that it asks for 1 GB huge pages and gives them back at once, see _gigantic_room):
PostgreSQL installations, root, huge page sizes and counts, THP, schedulers per device,
cgroup versions and memory controllers, filesystem tools and ZFS, and which layers can
run."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from ..collect import devices
from ..errors import PgsweepError
from ..host import blockdev, journal, netns, workarea, zfsfuse
from ..host.blockdev import PACKAGES
from ..host.journal import read_setting
from ..host.kernelfiles import HUGEPAGE_LEVELS, THP_FILES, hugepage_levels, hugepage_pool
from ..host.local import LOCAL

HUGEPAGES = Path("/sys/kernel/mm/hugepages")
CGROUP = Path("/sys/fs/cgroup")


def report() -> list[tuple[str, str, str]]:
    """(section, item, finding) rows."""
    rows: list[tuple[str, str, str]] = []
    installs = sorted(Path("/usr/lib/postgresql").glob("*/bin/postgres"))
    for postgres in installs:
        have = [p for p in ("pg_ctl", "initdb", "pgbench") if (postgres.parent / p).exists()]
        rows.append(("postgres", str(postgres.parent), f"has {', '.join(['postgres', *have])}"))
    if not installs:
        rows.append(
            ("postgres", "/usr/lib/postgresql", "no installation (apt-get install postgresql)")
        )
    root = os.geteuid() == 0
    rows.append(("privileges", "root", "yes" if root else "no: os.* factors are refused"))
    for size in sorted(HUGEPAGES.glob("hugepages-*")):
        total, free = (read_setting(size / f) for f in ("nr_hugepages", "free_hugepages"))
        rows.append(
            ("huge pages", size.name.removeprefix("hugepages-"), f"{total} reserved, {free} free")
        )
    room = _gigantic_room()
    if room:
        rows.append(("huge pages", "1048576kB now", room))
    rows.append(("huge pages", "os.huge_pages levels", ", ".join(hugepage_levels(LOCAL))))
    for key, path in THP_FILES.items():
        rows.append(("THP", key, path.read_text().strip() if path.exists() else "absent"))
    for queue in sorted(devices.SYS_BLOCK.glob("*/queue/scheduler")):
        dev = queue.parent.parent.name
        ahead = read_setting(queue.parent / "read_ahead_kb")
        rows.append(
            ("devices", dev, f"scheduler {queue.read_text().strip()}; read_ahead_kb {ahead}")
        )
    rows += _cgroups()
    rows += _storage()
    rows.append(
        ("layers", "cluster, server, workload", "can run" if installs else "need PostgreSQL")
    )
    rows.append(("layers", "os (huge pages, THP, scheduler, read-ahead, sysctl, drop_caches, "
                 "memory_limit)",
                 "can run" if root else "needs root"))  # fmt: skip
    loops = Path("/dev/loop-control").exists()
    rows.append(("layers", "storage (loop devices, mkfs, mount, zfs-fuse)",
                 "can run" if root and loops else "needs root and loop devices"))  # fmt: skip
    rows.append(("layers", "replication (standbys, sync modes)",
                 "can run" if installs else "needs PostgreSQL"))  # fmt: skip
    net = netns.features()
    rows += [("replication", f"network: {k}", v) for k, v in net.items()]
    ready = root and all(net[k] == "yes" for k in ("namespaces", "ip", "tc"))
    rows.append(("layers", "replication.network, replication.bandwidth (netns, veth, tc tbf)",
                 "can run" if ready else "needs root, namespaces, ip and tc"))  # fmt: skip
    return rows + _build() + _workload()


def _gigantic_room() -> str | None:
    """How many more 1 GB pages the kernel reserves right now. Nothing else can tell: free
    memory says 21 GiB on a machine whose kernel gives two, and the free lists stop at
    4 MiB blocks. So the pool is asked for what free memory could hold (less 1 GiB, at
    most 64) through the undo journal and given back at once: doctor's one change, undone
    before it prints (by `pgsweep restore` if it is killed in between)."""
    nr = hugepage_pool(HUGEPAGE_LEVELS["1GB"]) / "nr_hugepages"
    if os.geteuid() != 0 or not nr.exists():
        return None
    meminfo = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
    ask = min(64, (int(meminfo["MemFree"].split()[0]) // 1024**2) - 1)
    if ask <= 0:
        return "none: less than 2 GiB of memory is free"
    try:
        journal.hold_kernel_lock(f"PID {os.getpid()}, pgsweep doctor")
    except PgsweepError:
        return "not tried: a pgsweep run is changing kernel values"
    undo = journal.UndoJournal.for_this_run(LOCAL, "doctor")
    before = int(read_setting(nr))
    try:
        undo.set(nr, str(before + ask))
        got = int(read_setting(nr)) - before
    finally:
        undo.restore()
        if not undo.path.exists():
            workarea.forget_lock(workarea.this_run())
    return (f"{got} more can be reserved (asked for {ask}, as free memory allows; given back "
            "at once); a short reservation is retried after compacting memory")  # fmt: skip


def _build() -> list[tuple[str, str, str]]:
    """The build layer's tools and its cache (nothing is fetched or compiled)."""
    from ..host import builds

    tools = {t: shutil.which(t) for t in ("cc", "make", "tar", "perl", "git", "ccache")}
    rows = [("build", t, path or "missing") for t, path in tools.items()]
    missing = [t for t in ("cc", "make", "tar", "perl") if not tools[t]]
    rows.append(("layers", "build (PostgreSQL from source, cached)",
                 "can run" if not missing else f"needs {', '.join(missing)} (apt-get install "
                 "build-essential libreadline-dev zlib1g-dev)"))  # fmt: skip
    rows.append(("build", "cache", str(builds.cache_root())))
    return rows


def _workload() -> list[tuple[str, str, str]]:
    """The workload tools besides pgbench (workload.tool)."""
    from ..layers.workload_tools import PACKAGES, program

    found = {tool: program(tool) for tool in PACKAGES}
    return [("workload", tool, str(path) if path else f"missing (apt-get install "
             f"{PACKAGES[tool]})") for tool, path in found.items()]  # fmt: skip


def _storage() -> list[tuple[str, str, str]]:
    rows = []
    for fs, argv in blockdev.MKFS.items():
        tool = shutil.which(argv[0])
        rows.append(("storage", fs, tool or f"no {argv[0]} (apt-get install {PACKAGES[fs]})"))
    daemon = shutil.which("zfs-fuse")
    running = zfsfuse.running_daemons()
    state = (
        f"running (PID {running[0]}): a pgsweep run's, or one pgsweep will not share"
        if running
        else "not running (pgsweep starts its own)"
    )
    rows.append(("storage", "zfs", f"{daemon}: {state}" if daemon
                 else "no zfs-fuse (apt-get install zfs-fuse)"))  # fmt: skip
    kernel_zfs = Path("/sys/module/zfs").exists()
    rows.append(("storage", "kernel ZFS module", "loaded (not used yet)" if kernel_zfs
                 else "absent: zfs-fuse is used"))  # fmt: skip
    rows.append(("storage", "loop devices", "/dev/loop-control present"
                 if Path("/dev/loop-control").exists() else "no /dev/loop-control"))  # fmt: skip
    return rows


def _cgroups() -> list[tuple[str, str, str]]:
    rows = []
    v2 = CGROUP / "cgroup.controllers"
    if v2.exists():
        rows.append(("cgroups", "v2 (unified)", f"controllers: {v2.read_text().strip() or 'none'}"))
    v1_memory = CGROUP / "memory" / "memory.limit_in_bytes"
    if v1_memory.exists():
        rows.append(("cgroups", "v1 memory", f"{v1_memory.parent} (memory.limit_in_bytes present)"))
    for line in (
        Path("/proc/cgroups").read_text().splitlines()[1:] if Path("/proc/cgroups").exists() else []
    ):
        name, hierarchy, _, enabled = line.split()
        if name == "memory":
            where = "v1 hierarchy" if hierarchy != "0" else "v2 or unmounted"
            rows.append(("cgroups", "memory controller", f"enabled={enabled}, {where}"))
    return rows or [("cgroups", "-", "no cgroup filesystem found")]
