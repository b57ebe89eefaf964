"""Which block devices hold a path: mount -> device; partition -> also its disk; loop ->
also the devices under its backing file; device-mapper -> also the devices it maps."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

SYS_BLOCK = Path("/sys/class/block")


def _device_of(path: Path) -> str | None:
    st = os.stat(path)
    link = Path(f"/sys/dev/block/{os.major(st.st_dev)}:{os.minor(st.st_dev)}")
    if link.exists():
        return link.resolve().name
    return _from_mountinfo(path)  # btrfs and FUSE report anonymous device numbers


@dataclass(frozen=True)
class Mount:
    point: str
    fstype: str
    options: str  # per-mount and superblock options
    source: str


def mount_of(path: Path) -> Mount:
    """The mount holding `path`: the longest mount point that contains it."""
    target = str(path.resolve())
    best = Mount("", "", "", "")
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        point, sep = fields[4], fields.index("-")
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best.point):
            extra = fields[sep + 3] if len(fields) > sep + 3 else ""
            options = ",".join(dict.fromkeys(f"{fields[5]},{extra}".strip(",").split(",")))
            best = Mount(point, fields[sep + 1], options, fields[sep + 2])
    return best


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
    (pg_wal may point to another device)."""
    first = _device_of(path.resolve())
    found: list[str] = []
    if first:
        _expand(first, found)
    return found


def for_cluster(datadir: Path, pool: list[str] | None = None) -> tuple[list[str], list[str]]:
    """All block devices under PGDATA and pg_wal, and the ones their filesystems sit on
    (whose counters do not repeat the writes that the disks below them also count).
    `pool`: the devices of a FUSE filesystem (zfs-fuse), which stat cannot see."""
    found, primary = devices_for(datadir), []
    if not found and pool:
        for dev in pool:
            _expand(dev, found)
        primary += pool
    elif found:
        primary.append(found[0])
    wal = devices_for(datadir / "pg_wal")
    if wal and wal[0] not in primary:
        primary.append(wal[0])
    found += [d for d in wal if d not in found]
    return found, primary
