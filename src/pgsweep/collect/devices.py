"""Which block devices hold a path: mount -> device; partition -> also its disk; loop ->
also the devices under its backing file; device-mapper -> also the devices it maps."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..host.mounts import Mount, mount_of

SYS_BLOCK = Path("/sys/class/block")
__all__ = ["SYS_BLOCK", "Mount", "devices_for", "for_cluster", "mount_of"]


def _device_of(path: Path) -> str | None:
    st = os.stat(path)
    link = Path(f"/sys/dev/block/{os.major(st.st_dev)}:{os.minor(st.st_dev)}")
    if link.exists():
        return link.resolve().name
    return _from_mountinfo(path)  # btrfs and FUSE report anonymous device numbers


def _from_mountinfo(path: Path) -> str | None:
    source = mount_of(path).source
    if source.startswith("/dev/"):
        real = Path(source).resolve()
        if (SYS_BLOCK / real.name).exists():
            return real.name
    return None


def _expand(name: str, seen: list[str]) -> None:
    if name in seen:
        return
    seen.append(name)
    entry = SYS_BLOCK / name
    if (entry / "partition").exists():
        _expand(entry.resolve().parent.name, seen)
    backing = entry / "loop" / "backing_file"
    if backing.exists():
        backing_path = Path(backing.read_text().strip())
        if backing_path.exists():
            for dev in devices_for(backing_path):
                _expand(dev, seen)
    slaves = entry / "slaves"
    if slaves.is_dir():
        for slave in sorted(slaves.iterdir()):
            _expand(slave.name, seen)


def devices_for(path: Path) -> list[str]:
    """Block device names for `path`, the one it lives on first. Symlinks are followed
    (pg_wal may point to another device). A path not made yet (a dry run's cluster) is
    on the device of its nearest ancestor that exists."""
    where = path.resolve()
    while not where.exists() and where != where.parent:
        where = where.parent
    first = _device_of(where)
    found: list[str] = []
    if first:
        _expand(first, found)
    return found


def for_cluster(cluster: Any, pool: list[str] | None = None) -> tuple[list[str], list[str]]:
    """All block devices under a cluster's data and WAL, and the ones their filesystems sit
    on (whose counters do not repeat the writes that the disks below them also count).
    Resolved from the directories pgsweep made for it (root's), never through paths inside
    PGDATA. `pool`: the devices of a FUSE filesystem (zfs-fuse), which stat cannot see."""
    found, primary = devices_for(cluster.root), []
    if not found and pool:
        for dev in pool:
            _expand(dev, found)
        primary += pool
    elif found:
        primary.append(found[0])
    wal = devices_for(cluster.waldir.parent) if cluster.waldir is not None else []
    if wal and wal[0] not in primary:
        primary.append(wal[0])
    found += [d for d in wal if d not in found]
    return found, primary
