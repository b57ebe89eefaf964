"""Building and taking down one storage resource: a filesystem (and a WAL filesystem) on a
loop device or an allowed real device, or a zfs-fuse pool, mounted in the work area.

Everything here acts through the run's host (host/api.py: attach_loop, claim_device,
make_filesystem, mount, zfs_*). Every storage has its own journal (`RUN.storage-N.undo`):
its loop images, mounts, pool and daemon are recorded before they are made, so taking one
storage down (the engine keeps several alive) undoes exactly its own, and `pgsweep
restore` finds them all after a kill -9. Mount points are root-owned directories checked
right before mounting; a real device is checked again right before every mkfs."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from ..core import Value
from ..errors import internal
from ..host import blockdev, safefs, zfsfuse
from ..host.api import Host
from ..host.journal import UndoJournal
from .context import RunContext, Storage, TrialFailure
from .storage_tables import PROPERTIES


@dataclass(frozen=True)
class FsSettings:
    """One filesystem: the data's, or the WAL's ([storage.wal] over the data's)."""

    device: str  # "loop:SIZE" or a path under /dev
    loop_bytes: int | None
    filesystem: str
    mkfs_options: str
    mount_options: str
    sector_size: int | None
    loop_direct_io: bool
    btrfs_nocow: bool = False


@dataclass(frozen=True)
class StorageSettings:
    used: bool  # the file has [storage] or storage factors; otherwise the work area holds
    data: FsSettings | None  # the clusters, and the layer builds nothing
    wal: FsSettings | None
    zfs: dict[str, str] = field(default_factory=dict)  # property -> value, where set
    ashift: int | None = None
    arc_max_mb: int | None = None

    def live(self) -> dict[str, str]:
        """ZFS properties a live dataset takes (a change restarts the server only)."""
        from .storage_tables import LIVE

        return {k: v for k, v in self.zfs.items() if k in LIVE}


@dataclass
class Built:
    """What the storage layer made for one storage resource, on its run's host."""

    number: int
    journal: UndoJournal
    scratch: Path  # root's folder on the host for the tools' output (and zfs-fuse's pid)
    pool: str | None = None  # the zfs-fuse pool's name
    live: dict[str, str] = field(default_factory=dict)  # ZFS properties set on the dataset


def build(s: StorageSettings, number: int, run: RunContext, grant: blockdev.Grant,
          ours: dict[str, set[str]]) -> Storage:  # fmt: skip
    """The storage for settings `s` (number `number` in this run), made on the run's host,
    or TrialFailure with everything made so far taken down again."""
    journal = run.journal(f"storage-{number}", run.workdir)
    built = Built(number, journal, run.private / "storage-cmd")
    try:
        storage = _make(s, built, run, grant, ours)
    except (blockdev.DeviceError, zfsfuse.ZfsError, safefs.UnsafePath) as exc:
        journal.restore()
        raise TrialFailure(str(exc)) from exc
    except BaseException:  # Ctrl-C, a lost host, an OSError: what was made goes too
        journal.restore()
        raise
    storage.handle = built
    return storage


def destroy(storage: Storage) -> list[str]:
    """Take the storage down through its journal; what cannot be (a busy mount) fails the
    run, the journal keeping it for `pgsweep restore`."""
    built: Built = storage.handle
    done = built.journal.restore()
    failed = [line for line in done if line.startswith("could not")]
    if failed:
        raise internal("could not take a storage down: " + "; ".join(failed),
                       fix="stop what uses it, then run `pgsweep restore`")  # fmt: skip
    return done


def _make(s: StorageSettings, built: Built, run: RunContext, grant: blockdev.Grant,
          ours: dict[str, set[str]]) -> Storage:  # fmt: skip
    assert s.data is not None
    n, journal, host = built.number, built.journal, run.host
    host.private_dir_once(built.scratch, 0o700)
    folder = host.private_dir_once(run.workdir / "storage", 0o711)
    device = _device(s.data, f"disk-{n}.img", run, grant, ours, built)
    point = host.private_dir(folder / f"mnt-{n}", 0o711)
    pool_devices: list[str] = []
    if s.data.filesystem == "zfs":
        built.pool = f"pgsweep{os.getpid()}n{n}"
        values: dict[str, Value] = {f"zfs.{k}": v for k, v in s.zfs.items() if k in PROPERTIES}
        values |= {"zfs.ashift": s.ashift} if s.ashift else {}
        values |= {"zfs.arc_max": f"{s.arc_max_mb}MiB"} if s.arc_max_mb else {}
        journal.record({"zfs_daemon": str(built.scratch / "zfs-fuse.pid")})
        journal.record({"zpool": built.pool})
        host.zfs_create(built.pool, device, point, values, built.scratch)
        pool_devices = [device.name]  # FUSE hides the pool's device from stat
    else:
        _filesystem(s.data, device, point, host, ours, built)
    storage = Storage("", point, pool_devices=pool_devices)
    if s.wal is not None:
        wal_dev = _device(s.wal, f"disk-{n}-wal.img", run, grant, ours, built)
        storage.wal_home = host.private_dir(folder / f"mnt-{n}-wal", 0o711)
        _filesystem(s.wal, wal_dev, storage.wal_home, host, ours, built)
    return storage


def _device(fs: FsSettings, image_name: str, run: RunContext, grant: blockdev.Grant,
            ours: dict[str, set[str]], built: Built) -> Path:  # fmt: skip
    host = run.host
    if fs.loop_bytes is None:
        made = {device: frozenset(uuids) for device, uuids in ours.items()}
        return host.claim_device(Path(fs.device), grant, made, built.scratch)
    image = host.private_dir_once(run.private / "images", 0o700) / image_name
    built.journal.record({"loop_image": str(image)})
    return host.attach_loop(image, fs.loop_bytes, fs.sector_size, fs.loop_direct_io,
                            built.scratch)  # fmt: skip


def _filesystem(fs: FsSettings, device: Path, point: Path, host: Host,
                ours: dict[str, set[str]], built: Built) -> None:  # fmt: skip
    uuid = host.make_filesystem(fs.filesystem, device, fs.mkfs_options, built.scratch)
    if fs.loop_bytes is None and uuid:  # know our own filesystem again at the next check
        ours.setdefault(str(device), set()).add(uuid)  # by the device, however it was named
    built.journal.record({"mount": str(point)})
    host.mount(fs.filesystem, device, point, fs.mount_options, built.scratch,
               nocow=fs.filesystem == "btrfs" and fs.btrfs_nocow)  # fmt: skip


def set_live(storage: Storage, wanted: dict[str, str], drop_arc: bool, host: Host) -> list[str]:
    """Set the properties a live dataset takes; empty the ARC when asked (what the last
    level cached must not serve this one). Returns the events."""
    built: Built = storage.handle
    assert built.pool is not None
    changed = {k: v for k, v in wanted.items() if built.live.get(k) != v}
    try:
        host.zfs_change(built.pool, changed, drop_arc, built.scratch)
    except zfsfuse.ZfsError as exc:
        raise TrialFailure(str(exc)) from exc
    built.live.update(changed)
    return (["arc-drop"] if drop_arc else []) + (["zfs-set"] if changed else [])
