"""The environment next to the numbers: the host (kernel, CPU, memory, THP, huge pages,
PostgreSQL build), the storage under each cluster (device model, rotational, scheduler,
sector sizes, filesystem and mount options) and, per configuration, every server setting
whose source is not `default`. Values are read, never changed."""

from __future__ import annotations

import re
from collections.abc import Collection
from pathlib import Path
from typing import Any

from ..host.api import Host
from ..host.proc import RunAs
from ..postgres.binaries import Binaries
from .devices import SYS_BLOCK, mount_on
from .hostfacts import count_list

MM = Path("/sys/kernel/mm")


def _read(host: Host, path: Path) -> str:
    """A kernel file's text, "" where there is none."""
    return (host.read_optional(path) or "").strip()


def _selected(text: str) -> str:
    """ "always [madvise] never" -> "madvise"."""
    m = re.search(r"\[([^\]]+)\]", text)
    return m.group(1) if m else text


def host(on: Host, binaries: Binaries, scratch: Path, user: RunAs | None = None) -> dict[str, str]:
    """The machine `on` is, read through it: kernel, CPU, memory, THP, huge page pools, and
    the PostgreSQL build the experiment runs there."""
    meminfo = dict(line.split(":", 1) for line in _read(on, Path("/proc/meminfo")).splitlines()
                   if ":" in line)  # fmt: skip
    models = re.findall(r"^model name\s*:\s*(.+)$", _read(on, Path("/proc/cpuinfo")), re.M)
    env = {
        "kernel": _read(on, Path("/proc/sys/kernel/osrelease")),
        "kernel_version": _read(on, Path("/proc/sys/kernel/version")),
        "cpu_model": models[0] if models else "(unknown)",
        "cpu_count": str(count_list(_read(on, Path("/sys/devices/system/cpu/online")))),
        "memory_total": meminfo.get("MemTotal", "").strip(),
        "thp_enabled": _selected(_read(on, MM / "transparent_hugepage/enabled")),
        "thp_defrag": _selected(_read(on, MM / "transparent_hugepage/defrag")),
        "thp_shmem_enabled": _selected(_read(on, MM / "transparent_hugepage/shmem_enabled")),
        "postgres_version": binaries.version,
        "postgres_bindir": str(binaries.bindir),
    }
    pools = on.list_owned(MM / "hugepages") if on.lstat(MM / "hugepages") is not None else []
    for size in sorted(n for n in pools if n.startswith("hugepages-")):
        env[f"{size}.nr"] = _read(on, MM / "hugepages" / size / "nr_hugepages")
        env[f"{size}.free"] = _read(on, MM / "hugepages" / size / "free_hugepages")
    for name, argv in (
        ("pg_config_configure", ["pg_config", "--configure"]),
        ("pgbench_version", ["pgbench", "--version"]),
    ):
        program = binaries.bindir / argv[0]
        if on.lstat(program) is not None:
            res = on.run([str(program), *argv[1:]], out=scratch / f"{argv[0]}.out", timeout=30,
                         user=user)  # fmt: skip
            env[name] = res.stdout.strip() if res.ok else f"(failed: {res.tail(1)})"
    return env


def storage(cluster: Any, devices: list[str]) -> dict[str, str]:
    """Filesystems (from the directories pgsweep made for the cluster) and devices, read
    through the cluster's host."""
    on: Host = cluster.host
    env: dict[str, str] = {}
    wal_home = cluster.waldir.parent if cluster.waldir is not None else cluster.root
    for label, path in (("pgdata", cluster.root), ("pg_wal", wal_home)):
        mount = mount_on(on, path)
        env[f"{label}.mount"] = mount.point
        env[f"{label}.fstype"] = mount.fstype
        env[f"{label}.mount_options"] = mount.options
    for dev in devices:
        sys = SYS_BLOCK / dev
        # a partition has no queue of its own: its disk's (the folder above it in sysfs)
        queue = sys / "queue" if on.lstat(sys / "queue") is not None else sys / ".." / "queue"
        env[f"device.{dev}.model"] = (
            _read(on, sys / "device" / "model") or _read(on, sys / "device" / "vendor")
            or "(unknown)"
        )  # fmt: skip
        env[f"device.{dev}.rotational"] = _read(on, queue / "rotational")
        env[f"device.{dev}.scheduler"] = _selected(_read(on, queue / "scheduler"))
        env[f"device.{dev}.logical_block_size"] = _read(on, queue / "logical_block_size")
        env[f"device.{dev}.physical_block_size"] = _read(on, queue / "physical_block_size")
    return env


def settings(conn: Any, written: Collection[str] = ()) -> dict[str, str]:
    """Every setting the server reports with a source other than `default`, and those of
    `written` (the configuration's) whose value the server derived from the level it was
    given (wal_buffers = -1 runs as 1/32 of shared_buffers: source `override`)."""
    rows = conn.execute(
        "SELECT name, setting, coalesce(unit, ''), source FROM pg_settings "
        "WHERE source NOT IN ('default', 'override') OR name = ANY(%s) ORDER BY name",
        (list(written),),
    ).fetchall()
    return {
        name: f"{setting}{' ' + unit if unit else ''} "
        + (f"({source})" if source not in ("default", "override") else "(derived by the server)")
        for name, setting, unit, source in rows
    }
