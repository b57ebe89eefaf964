"""The `storage` layer: the filesystems clusters live on. pgsweep builds each itself on a
loop device over a sparse file (`device = "loop:8GiB"`) or on a real device the command
line allowed (`--allow-device`), mounts it inside the work area, and takes it down again
through its own undo journal (storage_build.py). A storage is a resource the engine keeps:
several can be alive at once unless they share a real device, are zfs-fuse pools, or
could outgrow the free space together. ZFS properties a live dataset takes only restart
the server."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ..collect import devices
from ..core import Cost, Value
from ..errors import PgsweepError
from ..host import blockdev
from ..host.api import Host
from ..units import parse_size
from . import storage_build
from .base import ResourceLayer, ValidationContext, check_subtable, check_table
from .context import RunContext, Storage, TrialContext
from .storage_build import FsSettings, StorageSettings
from .storage_tables import LIVE, StorageTable, WalTable, ZfsTable, check_mkfs_options

SUBTABLES = {"zfs": ZfsTable, "wal": WalTable}
SPARE = 1024**3  # free space loop images must leave on the work area's filesystem


def wal_values(values: dict[str, Value]) -> dict[str, Value]:
    """The WAL filesystem's settings: storage.wal.* over the data device's."""
    keys = ("filesystem", "mkfs_options", "mount_options", "sector_size")
    return {k: values[f"wal.{k}"] if values.get(f"wal.{k}") is not None else values[k]
            for k in keys} | {"loop_direct_io": values["loop_direct_io"]}  # fmt: skip


def _fs(device: Value | None, v: dict[str, Value], nocow: bool = False) -> FsSettings | None:
    if device is None:
        return None
    spec = str(device)
    sector = v.get("sector_size")
    return FsSettings(spec, parse_size(spec[5:]) if spec.startswith("loop:") else None,
                      str(v["filesystem"]), str(v["mkfs_options"] or ""),
                      str(v["mount_options"] or ""), int(sector) if sector else None,
                      bool(v["loop_direct_io"]), nocow)  # fmt: skip


class StorageLayer(ResourceLayer):
    name = "storage"
    needs_root = True

    def __init__(self) -> None:
        # what the file says; what a run made on its host is in its context (StorageRun)
        self.used = False
        self.where: dict[str, str] = {}

    def validate(
        self, base: dict[str, Any], factors: dict[str, list[Any]], ctx: ValidationContext
    ) -> dict[str, Value]:
        plain_base = {k: v for k, v in base.items() if k not in SUBTABLES}
        plain = {k: v for k, v in factors.items() if k.split(".")[0] not in SUBTABLES}
        table = check_table(StorageTable, self.name, plain_base, plain, ctx.source)
        values: dict[str, Value] = dict(table.model_dump())
        for sub, model in SUBTABLES.items():
            levels = {k[len(sub) + 1 :]: v for k, v in factors.items() if k.startswith(f"{sub}.")}
            checked = check_subtable(model, ("storage", sub), base.get(sub, {}), levels,
                                     ctx.source)  # fmt: skip
            values.update({f"{sub}.{k}": v for k, v in checked.items()})
        self.used = bool(base or factors)
        if not self.used:
            return values
        devices_given = factors.get("device") or [values["device"]]
        if any(d is None for d in devices_given):
            raise ctx.source.error(
                ("storage", "device"), "the storage layer needs a device",
                fix='add device = "loop:8GiB" (a sparse file) to [storage]',
            )  # fmt: skip
        if ctx.host.ids(None)[0] != 0:
            raise ctx.source.error(("storage",), "the storage layer (mkfs, mount) needs root",
                                   fix="run pgsweep as root, or remove [storage]")  # fmt: skip
        for fs in [values["filesystem"], *factors.get("filesystem", [])]:
            tool = blockdev.MKFS.get(str(fs), ["zfs-fuse"])[0]
            if ctx.host.which(tool) is None:
                raise ctx.source.error(
                    ("factors", "storage", "filesystem") if "filesystem" in factors
                    else ("storage", "filesystem"),
                    f"{fs} needs {tool}, which is not installed{ctx.host.on}",
                    fix=f"apt-get install {blockdev.PACKAGES[str(fs)]}",
                )  # fmt: skip
        self.where = {k: ctx.source.where(*(("factors", "storage", k) if k in factors
                                            else ("storage", k)))
                      for k in ("device", "wal_device")}  # fmt: skip
        return values

    def settings(self, values: dict[str, Value]) -> StorageSettings:
        if not self.used:
            return StorageSettings(False, None, None)
        zfs = {k[4:]: str(v) for k, v in values.items() if k.startswith("zfs.")
               and v is not None and k[4:] not in ("ashift", "arc_max")}  # fmt: skip
        arc = values.get("zfs.arc_max")
        ashift = values.get("zfs.ashift")
        return StorageSettings(
            True, _fs(values["device"], values, bool(values["btrfs_nocow"])),
            _fs(values.get("wal_device"), wal_values(values)), zfs,
            int(ashift) if ashift is not None else None,
            parse_size(arc) // 1024**2 if arc is not None else None,
        )  # fmt: skip

    def check_configurations(self, configs: Sequence[Mapping[str, Any]],
                             ctx: ValidationContext) -> None:  # fmt: skip
        """Settings of one filesystem apply where a configuration uses it ([storage.zfs]
        beside filesystem = ["ext4", "zfs"] is fine); settings no configuration can use
        are refused; per configuration, mkfs options suit its filesystem and the WAL device
        is not the data device."""
        mine: list[StorageSettings] = [c[self.name] for c in configs if c[self.name].used]
        data = [s.data for s in mine if s.data is not None]
        nocow = [d for d in data if d.btrfs_nocow]
        if nocow and all(d.filesystem != "btrfs" for d in nocow):
            raise ctx.source.error(
                ("storage", "btrfs_nocow"),
                f"storage.btrfs_nocow applies to btrfs, not {nocow[0].filesystem}",
                fix='set filesystem = "btrfs", or remove btrfs_nocow',
            )
        zfs = [s for s in mine if s.zfs or s.ashift or s.arc_max_mb]
        if zfs and all(s.data is None or s.data.filesystem != "zfs" for s in zfs):
            other = zfs[0].data.filesystem if zfs[0].data else ""
            raise ctx.source.error(
                ("storage", "zfs"),
                f"[storage.zfs] applies to zfs, not {other}",
                fix='set filesystem = "zfs", or remove the zfs settings',
            )
        for s in mine:
            self._check_pairing(s, ctx)

    def _check_pairing(self, s: StorageSettings, ctx: ValidationContext) -> None:
        if s.wal is not None and s.wal.filesystem == "zfs":
            raise ctx.source.error(
                ("storage", "wal_device"),
                "a WAL device on zfs is not supported (one pool per run here)",
                fix='set [storage.wal] filesystem = "ext4" (or xfs, btrfs)',
            )
        for key, fs in (("mkfs_options", s.data), ("wal.mkfs_options", s.wal)):
            if fs is None:
                continue
            try:
                check_mkfs_options(fs.filesystem, fs.mkfs_options)
            except ValueError as exc:
                raise ctx.source.error(
                    ("storage", *key.split(".")), str(exc),
                    fix="use options this filesystem's mkfs takes that name no device or file",
                ) from None  # fmt: skip
        if s.data and s.wal and s.data.loop_bytes is None and s.wal.loop_bytes is None \
                and _same_disk(s.data.device, s.wal.device):  # fmt: skip
            raise ctx.source.error(
                ("storage", "wal_device"),
                f"storage.wal_device {s.wal.device} is the data device {s.data.device}, or "
                "shares its disk",
                fix="give pg_wal a device of its own, or remove wal_device",
            )

    def check_host(self, host: Host, where: Path, settings: list[StorageSettings],
                   grant: blockdev.Grant | None = None) -> None:  # fmt: skip
        """Real devices: named on the command line, and not in use; zfs-fuse usable; each
        configuration's loop images fit. Read-only."""
        used = [s for s in settings if s.used]
        if any(s.data and s.data.filesystem == "zfs" for s in used):
            from ..host import zfsfuse

            zfsfuse.check_host()
        for s in used:
            _check_space(host, where, [s], self.where.get("device", "storage.device"))
        if host.on:  # a server elsewhere: loop devices alone (spec.hosts)
            return
        with tempfile.TemporaryDirectory(prefix="pgsweep-devcheck-") as scratch:
            for key, attr in (("device", "data"), ("wal_device", "wal")):
                for device in sorted({fs.device for s in used if (fs := getattr(s, attr))
                                      and fs.loop_bytes is None}):  # fmt: skip
                    where_key = self.where.get(key, f"storage.{key}")
                    blockdev.check_real_device(Path(device), grant or blockdev.Grant(),
                                               Path(scratch), where_key)  # fmt: skip

    def coexist(self, configs: Sequence[Mapping[str, Any]], where: Path) -> str | None:
        storages = {self.resource_key(c[self.name], c): c[self.name] for c in configs}
        used = [s for s in storages.values() if s.used]
        if len(used) < 2:
            return None
        real = [fs.device for s in used for fs in (s.data, s.wal) if fs and fs.loop_bytes is None]
        if real:
            return f"a real device ({real[0]}) holds one filesystem at a time"
        if sum(1 for s in used if s.data and s.data.filesystem == "zfs") > 1:
            return "pgsweep runs one zfs-fuse pool at a time"
        need = sum(fs.loop_bytes or 0 for s in used for fs in (s.data, s.wal) if fs)
        free = shutil.disk_usage(where).free
        if need > free - SPARE:
            return (f"the loop images of all {len(used)} storages may grow to "
                    f"{need / 1024**3:.1f} GiB; {free / 1024**3:.1f} GiB are free")  # fmt: skip
        return None

    def level_identity(self, key: str, level: Value) -> object:
        if key in ("device", "wal_device") and str(level).startswith("loop:"):
            return ("loop", parse_size(str(level)[5:]))
        if key in ("device", "wal_device"):
            return os.path.realpath(str(level))
        if key in ("zfs.recordsize", "zfs.arc_max"):
            return parse_size(level)
        return repr(level)

    def cost(self, key: str) -> Cost:
        return Cost.RESTART if key.removeprefix("zfs.") in LIVE else Cost.CLUSTER

    def resource_key(self, settings: StorageSettings, config: Mapping[str, Any]) -> str:
        """Everything but the properties a live dataset takes."""
        shape = asdict(settings)
        shape["zfs"] = {k: v for k, v in settings.zfs.items() if k not in LIVE}
        return json.dumps(shape, sort_keys=True)

    def build(self, settings: StorageSettings, config: Mapping[str, Any],
              below: Mapping[str, Any], run: RunContext) -> Storage:  # fmt: skip
        if not settings.used:
            home = run.workdir / "clusters"
            return Storage("", run.host.private_dir_once(home, 0o711))
        ours: dict[str, set[str]] = run.state_of(self.name, dict)  # device -> UUIDs we made
        storage = storage_build.build(settings, run.next_number("storage"), run,
                                      run.grant or blockdev.Grant(), ours)  # fmt: skip
        storage.key = self.resource_key(settings, config)
        return storage

    def built_event(self, settings: StorageSettings) -> str | None:
        return "new-storage" if settings.used else None  # the work area itself: nothing made

    def destroy(self, resource: Storage, run: RunContext) -> None:
        if resource.handle is not None:
            storage_build.destroy(resource)

    def prepare(self, settings: StorageSettings, trial: TrialContext) -> None:
        """ZFS properties a live dataset takes: set them, restart the server if any changed.
        The ARC is emptied when a cache property changed (what the last level cached must
        not serve this one) and before every trial under os.drop_caches = "before_trial"
        (on ZFS the ARC is the cache to drop)."""
        storage: Storage = trial.resources[self.name]
        if not settings.used or storage.handle is None or storage.handle.pool is None:
            return
        live = storage.handle.live
        wanted = settings.live()
        changed = {k for k, v in wanted.items() if live.get(k) != v}
        cold = bool(getattr(trial.settings.get("os"), "drop_caches", False))
        drop = cold or bool(live and {"primarycache", "secondarycache"} & changed)
        if not changed and not drop:
            return
        if trial.server.running():
            trial.server.stop()
        trial.events += storage_build.set_live(storage, wanted, drop, trial.run.host)

    def verify(self, settings: StorageSettings, trial: TrialContext) -> None:
        """Record what the data directory really sits on."""
        if not settings.used:
            return
        cluster, host = trial.cluster, trial.run.host
        storage: Storage = trial.resources[self.name]
        mount = devices.mount_on(host, cluster.root)
        trial.effective["storage.filesystem"] = mount.fstype
        trial.effective["storage.mount_options"] = mount.options
        trial.effective["storage.device"] = mount.source
        if cluster.waldir is not None:
            wal = devices.mount_on(host, cluster.waldir.parent)
            trial.effective["storage.wal.filesystem"] = wal.fstype
            trial.effective["storage.wal.mount_options"] = wal.options
            trial.effective["storage.wal.device"] = wal.source
        _, primary = devices.for_cluster(cluster, storage.pool_devices)
        for dev in primary:
            sysfs = devices.SYS_BLOCK / dev
            size = host.read_optional(sysfs / "queue" / "logical_block_size")
            if size is not None:
                trial.effective[f"storage.sector_size.{dev}"] = size.strip()
            sectors = host.read_optional(sysfs / "size")  # 512-byte units, whatever the sector
            if sectors is not None:
                trial.effective[f"storage.size_bytes.{dev}"] = str(int(sectors) * 512)
            dio = host.read_optional(sysfs / "loop" / "dio")
            if dio is not None:
                trial.effective[f"storage.loop_direct_io.{dev}"] = dio.strip()
        if settings.data and settings.data.filesystem == "btrfs":
            trial.effective["storage.btrfs_nocow"] = str(host.has_nocow(cluster.datadir))
        if storage.pool_devices:
            trial.effective["storage.pool_devices"] = ",".join(storage.pool_devices)
        root = host.lstat(storage.home)  # the new filesystem's root: root's 0711, as made
        if root is not None:
            trial.effective["storage.root"] = f"{root.mode & 0o7777:04o} uid {root.uid}"
        built = storage.handle
        if built is not None and built.pool is not None:
            trial.effective["storage.zfs.implementation"] = "zfs-fuse (FUSE page cache off)"
            props = host.zfs_properties(built.pool, built.scratch)
            trial.effective.update({f"storage.zfs.{k}": v for k, v in props.items()})


def _same_disk(a: str, b: str) -> bool:
    """Two device paths name the same device, or partitions of one disk."""
    ra, rb = os.path.realpath(a), os.path.realpath(b)
    if ra == rb:
        return True
    disks = []
    for real in (ra, rb):
        entry = devices.SYS_BLOCK / Path(real).name
        disks.append(entry.resolve().parent.name if (entry / "partition").exists()
                     else Path(real).name)  # fmt: skip
    return disks[0] == disks[1]


def _check_space(host: Host, where: Path, settings: list[StorageSettings], key: str) -> None:
    """A sparse image can grow to its full size: refuse images the work area's filesystem
    (on the server's host) could not hold (with a GiB to spare), rather than fill the disk
    mid-run."""
    free = host.free_bytes(where)
    for s in settings:
        specs = [fs for fs in (s.data, s.wal) if fs is not None and fs.loop_bytes]
        need = sum(fs.loop_bytes or 0 for fs in specs)
        if need and need > free - SPARE:
            raise PgsweepError(
                f"{' + '.join(fs.device for fs in specs)} may grow to {need / 1024**3:.1f} GiB "
                f"in {where}{host.on}, "
                f"whose filesystem has {free / 1024**3:.1f} GiB free (pgsweep keeps "
                "1 GiB spare)",
                where=key,
                fix="a smaller loop device, or --results on a filesystem with more room",
            )
