"""Which block devices hold a path on a host: mount -> device; partition -> also its disk;
loop -> also the devices under its backing file; device-mapper -> also the devices it maps.
Read through the host (its mountinfo and sysfs), so another machine's are read the same
way, and a recording host serves them from a script.

Paths are those pgsweep made (its work area, a cluster's folders, a mount point): they are
looked up as given, never resolved through links inside them."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ..host.api import Host
from ..host.mounts import MOUNTINFO, Mount, parse

SYS_BLOCK = Path("/sys/class/block")
SYS_DEV = Path("/sys/dev/block")
_NAME = re.compile(r"^DEVNAME=(\S+)$", re.M)
__all__ = ["SYS_BLOCK", "Mount", "devices_for", "for_cluster", "mount_on"]


def mount_on(host: Host, path: Path) -> Mount:
    """The mount holding `path` on `host`: the longest mount point that contains it."""
    target = str(path)
    best = Mount("", "", "", "", "")
    for m in parse(host.read_text(MOUNTINFO)):
        if m.contains(target) and len(m.point) >= len(best.point):
            best = m
    return best


def _device_of(host: Host, path: Path) -> str | None:
    """The block device of the mount holding `path`: by the device number mountinfo gives
    it, or (btrfs and FUSE report anonymous numbers) by the mount's source."""
    mount = mount_on(host, path)
    uevent = host.read_optional(SYS_DEV / mount.device / "uevent") if mount.device else None
    m = _NAME.search(uevent or "")
    if m and host.lstat(SYS_BLOCK / m.group(1)) is not None:
        return m.group(1)
    if mount.source.startswith("/dev/"):
        name = Path(mount.source).name
        if "/" not in name and host.lstat(SYS_BLOCK / name) is not None:
            return name
    return None


def _expand(host: Host, name: str, seen: list[str]) -> None:
    if name in seen:
        return
    seen.append(name)
    entry = SYS_BLOCK / name
    if host.lstat(entry / "partition") is not None:  # the disk it is part of
        m = _NAME.search(host.read_optional(entry / ".." / "uevent") or "")
        if m:
            _expand(host, m.group(1), seen)
    backing = host.read_optional(entry / "loop" / "backing_file")
    if backing and backing.strip().startswith("/"):
        path = Path(backing.strip())
        if host.lstat(path) is not None:
            for dev in devices_for(host, path):
                _expand(host, dev, seen)
    if host.lstat(entry / "slaves") is not None:
        for slave in sorted(host.list_owned(entry / "slaves")):
            _expand(host, slave, seen)


def devices_for(host: Host, path: Path) -> list[str]:
    """Block device names for `path` on `host`, the one it lives on first. A path not made
    yet (a dry run's cluster) is on the mount that would hold it."""
    first = _device_of(host, path)
    found: list[str] = []
    if first:
        _expand(host, first, found)
    return found


def for_cluster(cluster: Any, pool: list[str] | None = None) -> tuple[list[str], list[str]]:
    """All block devices under a cluster's data and WAL, and the ones their filesystems sit
    on (whose counters do not repeat the writes that the disks below them also count).
    Resolved from the directories pgsweep made for it (root's), never through paths inside
    PGDATA, on the cluster's host. `pool`: the devices of a FUSE filesystem (zfs-fuse),
    which mountinfo does not name."""
    host: Host = cluster.host
    found, primary = devices_for(host, cluster.root), []
    if not found and pool:
        for dev in pool:
            _expand(host, dev, found)
        primary += pool
    elif found:
        primary.append(found[0])
    wal = devices_for(host, cluster.waldir.parent) if cluster.waldir is not None else []
    if wal and wal[0] not in primary:
        primary.append(wal[0])
    found += [d for d in wal if d not in found]
    return found, primary
