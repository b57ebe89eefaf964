"""Room for a configuration's data where it will live: its cluster and the cluster's
snapshot on the experiment's storage (a loop image, a real device, or the work area's own
filesystem without [storage]), its WAL with them or on the WAL device, and its standbys'
copies in the work area. `plan` refuses (exit 2, with the figures) a configuration that
cannot fit even alone, and the cluster layer's `coexist` uses the same sums to decide
whether every configuration's clusters can stay alive at once."""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..collect import devices
from ..units import parse_size

SPARE = 1024**3  # free space the work area's filesystem keeps (storage.SPARE too)
FS_USABLE = 0.9  # of a filesystem pgsweep makes: its metadata, journal and reserve take the rest
GiB = 1024**3


@dataclass
class Place:
    """Where part of the data lives, how much room it has, and what goes there."""

    name: str
    room: int
    parts: list[tuple[str, int]] = field(default_factory=list)

    @property
    def need(self) -> int:
        return sum(n for _, n in self.parts)

    def describe(self) -> str:
        shown = ", ".join(f"{what} {n / GiB:.1f} GiB" for what, n in self.parts)
        return (f"about {self.need / GiB:.1f} GiB ({shown}) on {self.name}, which has "
                f"{self.room / GiB:.1f} GiB")  # fmt: skip


# a sysbench row with its two indexes: 220 bytes in the table (id, k, c char(120), pad
# char(60) and the tuple header), about 36 in the primary key and the index on k
SYSBENCH_ROW_BYTES = 256

def data_bytes(config: Mapping[str, Any]) -> int:
    """The loaded database: the dump's guess, cluster.size, or about 16 MiB per scale unit
    and 24 MiB more (MACHINE-NOTES: scale 10 157 MB, scale 200 3.0 GB)."""
    cluster = config["cluster"]
    limit = getattr(config.get("os"), "memory_limit", None)
    if cluster.dump is not None:  # cluster.from: guessed from the archive's size
        return int(cluster.dump.estimate_bytes()) + 24 * 1024**2
    w = config.get("workload")
    if w is not None and w.tool == "sysbench":  # sysbench's own tables (`prepare`)
        return int(w.tables * w.table_size * SYSBENCH_ROW_BYTES) + 24 * 1024**2
    return int(cluster.target_bytes(limit) or cluster.scale * 16 * 1024**2 + 24 * 1024**2)


def wal_bytes(config: Mapping[str, Any], most: bool) -> int:
    """WAL a cluster keeps: up to max_wal_size between checkpoints (`most`), at least
    min_wal_size (recycled segments)."""
    key, default = ("max_wal_size", "1GB") if most else ("min_wal_size", "80MB")
    text = str((config.get("server") or {}).get(key, default))
    try:
        return int(text) * 1024**2 if text.isdigit() else parse_size(text)
    except ValueError:
        return parse_size(default)


def places(config: Mapping[str, Any], where: Path, most_wal: bool) -> dict[str, Place]:
    """What one configuration puts where: keyed by the place (a loop or device spec, or
    "work" for the work area's filesystem, which `where` is on)."""
    storage = config.get("storage")
    used = bool(getattr(storage, "used", False))
    data_fs = getattr(storage, "data", None) if used else None
    wal_fs = getattr(storage, "wal", None) if used else None
    out: dict[str, Place] = {}

    def at(fs: Any) -> Place:
        key = fs.device if fs is not None else "work"
        if key not in out:
            out[key] = Place(*_room(fs, where))
        return out[key]

    size, wal = data_bytes(config), wal_bytes(config, most_wal)
    at(data_fs).parts += [("data", size), ("its snapshot", size)]
    at(wal_fs if wal_fs is not None else data_fs).parts.append(("WAL", wal))
    n = getattr(config.get("replication"), "standbys", 0)
    if n:
        at(None).parts.append((f"{n} standby(s)", n * (size + wal)))
    return out


def _room(fs: Any, where: Path) -> tuple[str, int]:
    if fs is None:
        free = shutil.disk_usage(where).free - SPARE
        return f"the work area's filesystem ({where}, 1 GiB kept spare)", max(0, free)
    if fs.loop_bytes:
        return f"the loop device {fs.device}", int(fs.loop_bytes * FS_USABLE)
    size = _device_bytes(fs.device)
    return f"the device {fs.device}", int(size * FS_USABLE) if size else 1 << 62


def _device_bytes(device: str) -> int:
    """A real block device's size (0 when it cannot be read: its own check refuses it)."""
    try:
        name = Path(device).resolve().name
        return int((devices.SYS_BLOCK / name / "size").read_text()) * 512
    except (OSError, ValueError):
        return 0


def too_big(config: Mapping[str, Any], where: Path) -> str | None:
    """Why this configuration's data cannot fit even alone (at the least WAL it keeps)."""
    for place in places(config, where, most_wal=False).values():
        if place.need > place.room:
            return place.describe()
    return None
