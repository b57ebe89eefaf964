"""Which block devices hold a path: mount -> device; partition -> also its disk; loop ->
also the devices under its backing file; device-mapper -> also the devices it maps."""

from __future__ import annotations

import os
from pathlib import Path

SYS_BLOCK = Path("/sys/class/block")


def _device_of(path: Path) -> str | None:
    st = os.stat(path)
    link = Path(f"/sys/dev/block/{os.major(st.st_dev)}:{os.minor(st.st_dev)}")
    if link.exists():
        return link.resolve().name
    return _from_mountinfo(path)  # btrfs and FUSE report anonymous device numbers


def _from_mountinfo(path: Path) -> str | None:
    best, source = "", None
    target = str(path.resolve())
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        mount_point = fields[4]
        src = fields[fields.index("-") + 2]
        inside = target == mount_point or target.startswith(mount_point.rstrip("/") + "/")
        if inside and len(mount_point) >= len(best):
            best, source = mount_point, src
    if source and source.startswith("/dev/"):
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
