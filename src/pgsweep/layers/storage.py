"""The `storage` layer: the filesystem the cluster lives on. pgsweep builds it itself on a
loop device over a sparse file (`device = "loop:8GiB"`) or on a real device the command
line allowed (`--allow-device`), mounts it inside the work area, and takes it down again
through its own undo journal. A new filesystem means a new cluster; ZFS properties that
apply to a live dataset only restart the server."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from ..collect import devices
from ..core import Cost, Value
from ..errors import PgsweepError
from ..host import blockdev, safefs, zfsfuse
from ..host.journal import UndoJournal
from ..trialenv import TrialEnv, TrialFailure
from ..units import parse_size
from .base import Layer, ValidationContext, check_subtable, check_table
from .storage_tables import LIVE, StorageTable, WalTable, ZfsTable, check_mkfs_options

PACKAGES = {"ext4": "e2fsprogs", "xfs": "xfsprogs", "btrfs": "btrfs-progs", "zfs": "zfs-fuse"}


SUBTABLES = {"zfs": ZfsTable, "wal": WalTable}


def wal_values(values: dict[str, Value]) -> dict[str, Value]:
    """The WAL filesystem's settings: storage.wal.* over the data device's."""
    keys = ("filesystem", "mkfs_options", "mount_options", "sector_size")
    return {k: values[f"wal.{k}"] if values.get(f"wal.{k}") is not None else values[k]
            for k in keys} | {"loop_direct_io": values["loop_direct_io"]}  # fmt: skip


class StorageLayer(Layer):
    name = "storage"

    def __init__(self) -> None:
        self.used = False
        self.grant = blockdev.Grant()
        self.journal: UndoJournal | None = None
        self.key: str | None = None  # what the current filesystem was built for
        self.live: dict[str, str] = {}  # ZFS properties set on the live dataset
        self.failures: dict[str, str] = {}
        self.built = 0
        self.pool: zfsfuse.Pool | None = None
        self.ours: dict[str, set[str]] = {}  # real device -> UUIDs of filesystems we made
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
        if os.geteuid() != 0:
            raise ctx.source.error(("storage",), "the storage layer (mkfs, mount) needs root",
                                   fix="run pgsweep as root, or remove [storage]")  # fmt: skip
        for fs in [values["filesystem"], *factors.get("filesystem", [])]:
            tool = blockdev.MKFS.get(str(fs), ["zfs-fuse"])[0]
            if shutil.which(tool) is None:
                raise ctx.source.error(
                    ("factors", "storage", "filesystem") if "filesystem" in factors
                    else ("storage", "filesystem"),
                    f"{fs} needs {tool}, which is not installed",
                    fix=f"apt-get install {PACKAGES[str(fs)]}",
                )  # fmt: skip
        self.where = {k: ctx.source.where(*(("factors", "storage", k) if k in factors
                                            else ("storage", k)))
                      for k in ("device", "wal_device")}  # fmt: skip
        return values

    def check_configurations(
        self, configs: list[dict[str, dict[str, Value]]], ctx: ValidationContext
    ) -> None:
        """Settings of one filesystem apply where a configuration uses it ([storage.zfs]
        beside filesystem = ["ext4", "zfs"] is fine); settings no configuration can use
        are refused."""
        mine = [values[self.name] for values in configs]
        nocow = [v for v in mine if v.get("btrfs_nocow")]
        if nocow and all(v.get("filesystem") != "btrfs" for v in nocow):
            raise ctx.source.error(
                ("storage", "btrfs_nocow"),
                f"storage.btrfs_nocow applies to btrfs, not {nocow[0].get('filesystem')}",
                fix='set filesystem = "btrfs", or remove btrfs_nocow',
            )
        zfs = [v for v in mine if any(k.startswith("zfs.") and x is not None for k, x in v.items())]
        if zfs and all(v.get("filesystem") != "zfs" for v in zfs):
            raise ctx.source.error(
                ("storage", "zfs"),
                f"[storage.zfs] applies to zfs, not {zfs[0].get('filesystem')}",
                fix='set filesystem = "zfs", or remove the zfs settings',
            )
        for v in mine:
            if v.get("wal_device") and wal_values(v)["filesystem"] == "zfs":
                raise ctx.source.error(
                    ("storage", "wal_device"),
                    "a WAL device on zfs is not supported (one pool per run here)",
                    fix='set [storage.wal] filesystem = "ext4" (or xfs, btrfs)',
                )
            self._check_pairing(v, ctx)

    def _check_pairing(self, v: dict[str, Value], ctx: ValidationContext) -> None:
        """Per configuration: mkfs options suit its filesystem, and the WAL device is not
        the data device (nor a partition of the same disk)."""
        for key, values in (("mkfs_options", v), ("wal.mkfs_options", wal_values(v))):
            try:
                check_mkfs_options(str(values["filesystem"]), str(values["mkfs_options"] or ""))
            except ValueError as exc:
                raise ctx.source.error(
                    ("storage", *key.split(".")), str(exc),
                    fix="use options this filesystem's mkfs takes that name no device or file",
                ) from None  # fmt: skip
        data, wal = str(v.get("device") or ""), str(v.get("wal_device") or "")
        if data.startswith("/dev/") and wal.startswith("/dev/") and _same_disk(data, wal):
            raise ctx.source.error(
                ("storage", "wal_device"),
                f"storage.wal_device {wal} is the data device {data}, or shares its disk",
                fix="give pg_wal a device of its own, or remove wal_device",
            )

    def authorize(self, grant: blockdev.Grant) -> None:
        self.grant = grant

    def check_host(self, workdir: Path, values: list[dict[str, Value]]) -> None:
        """Real devices: named on the command line, and not in use. Changes nothing."""
        if any(v.get("filesystem") == "zfs" for v in values):
            zfsfuse.check_host()
        _check_space(workdir, values, self.where.get("device", "storage.device"))
        with tempfile.TemporaryDirectory(prefix="pgsweep-devcheck-") as scratch:
            for key in ("device", "wal_device"):
                for device in sorted({str(v[key]) for v in values if v.get(key)}):
                    if not device.startswith("loop:"):
                        where = self.where.get(key, f"storage.{key}")
                        blockdev.check_real_device(Path(device), self.grant, Path(scratch), where)

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

    def apply(self, values: dict[str, Value], env: TrialEnv) -> None:
        if not self.used:
            env.cluster_home, env.storage_key = env.workdir, ""
            return
        key = json.dumps({k: v for k, v in values.items() if self.cost(k) is Cost.CLUSTER},
                         sort_keys=True)  # fmt: skip
        if key in self.failures:
            raise TrialFailure(f"this storage could not be built: {self.failures[key]}")
        if key != self.key:
            self._rebuild(key, values, env)
        if values["filesystem"] == "zfs":
            self._live_properties(values, env)
        env.storage_key = key

    def _rebuild(self, key: str, values: dict[str, Value], env: TrialEnv) -> None:
        if env.cluster is not None:  # its files live on the filesystem about to go
            env.cluster.destroy()
            env.cluster, env.cluster_key, env.server_settings = None, None, None
        self.undo(env)
        self.journal = UndoJournal.for_this_run("storage")
        self.built += 1
        scratch = env.private / "storage-cmd"
        try:
            home = self._build(values, env, scratch)
        except (blockdev.DeviceError, zfsfuse.ZfsError, safefs.UnsafePath) as exc:
            self.failures[key] = str(exc)
            self.undo(env)
            raise TrialFailure(str(exc)) from exc
        env.cluster_home, self.key, self.live = home, key, {}
        env.events.append("new-storage")

    def _build(self, values: dict[str, Value], env: TrialEnv, scratch: Path) -> Path:
        """Data filesystem (and WAL filesystem) for this configuration; returns the data
        mount point, sets env.wal_home."""
        n = self.built
        env.storage_devices, env.wal_home = [], None
        device = self._device(str(values["device"]), values, f"disk-{n}.img", env, scratch)
        (env.workdir / "storage").mkdir(mode=0o711, exist_ok=True)
        point = safefs.private_dir(env.workdir / "storage" / f"mnt-{n}", 0o711)
        if values["filesystem"] == "zfs":
            assert self.journal is not None
            name = f"pgsweep{os.getpid()}n{n}"
            self.pool = zfsfuse.Pool.create(name, device, point, values, self.journal, scratch)
            env.storage_devices = [device.name]  # FUSE hides the pool's device from stat
        else:
            self._filesystem(values, device, point, scratch)
        if values.get("wal_device"):
            wal = wal_values(values)
            wal_dev = self._device(str(values["wal_device"]), wal, f"disk-{n}-wal.img", env,
                                   scratch)  # fmt: skip
            env.wal_home = safefs.private_dir(env.workdir / "storage" / f"mnt-{n}-wal", 0o711)
            self._filesystem(wal, wal_dev, env.wal_home, scratch)
        return point

    def _device(
        self, spec: str, values: dict[str, Value], image_name: str, env: TrialEnv, scratch: Path
    ) -> Path:
        assert self.journal is not None
        if not spec.startswith("loop:"):
            device = blockdev.real_device(Path(spec))
            ours = frozenset(self.ours.get(str(device), set()))
            if self.grant.wipe and not ours:
                blockdev.wipe(device, scratch)
            blockdev.check_before_format(device, scratch, ours)
            return device
        images = env.private / "images"
        images.mkdir(mode=0o700, exist_ok=True)
        image = images / image_name
        self.journal.record({"loop_image": str(image)})
        sector = values.get("sector_size")
        return blockdev.attach_loop(image, parse_size(spec[5:]), int(sector) if sector else None,
                                    bool(values["loop_direct_io"]), scratch)  # fmt: skip

    def _filesystem(
        self, values: dict[str, Value], device: Path, point: Path, scratch: Path
    ) -> None:
        assert self.journal is not None
        fs = str(values["filesystem"])
        blockdev.make_filesystem(fs, device, str(values["mkfs_options"]), scratch)
        if not device.name.startswith("loop"):  # know our own filesystem at the next rebuild
            uuid = blockdev.filesystem_uuid(device, scratch)
            if uuid:
                self.ours.setdefault(str(device), set()).add(uuid)
        self.journal.record({"mount": str(point)})
        blockdev.mount(fs, device, point, str(values["mount_options"]), scratch)
        os.chmod(point, 0o711)  # the new filesystem's root: root's, the server passes through
        if fs == "btrfs" and values.get("btrfs_nocow"):
            blockdev.set_nocow(point, scratch)  # inherited by every file the cluster makes

    def _live_properties(self, values: dict[str, Value], env: TrialEnv) -> None:
        """Properties a live dataset takes: set them, restart the server if any changed.
        The ARC is emptied when a cache property changed (what the last level cached must
        not serve this one) and before every trial under os.drop_caches = "before_trial"
        (on ZFS the ARC is the cache to drop)."""
        assert self.pool is not None
        wanted = {k[4:]: str(v) for k, v in values.items()
                  if k.startswith("zfs.") and k[4:] in LIVE and v is not None}  # fmt: skip
        changed = {k: v for k, v in wanted.items() if self.live.get(k) != v}
        cold = env.values.get("os", {}).get("drop_caches") == "before_trial"
        drop = cold or bool(self.live and {"primarycache", "secondarycache"} & set(changed))
        if not changed and not drop:
            return
        if env.cluster is not None and env.cluster.postmaster_pid():
            env.cluster.stop()
            env.server_settings = None
        try:
            self.pool.set_properties(changed)
            if drop:
                self.pool.drop_arc()
                env.events.append("arc-drop")
        except zfsfuse.ZfsError as exc:
            raise TrialFailure(str(exc)) from exc
        self.live.update(changed)
        if changed:
            env.events.append("zfs-set")

    def verify(self, values: dict[str, Value], env: TrialEnv) -> None:
        """Record what the data directory really sits on."""
        if not self.used:
            return
        cluster = env.require_cluster()
        mount = devices.mount_of(cluster.root)
        env.effective["storage.filesystem"] = mount.fstype
        env.effective["storage.mount_options"] = mount.options
        env.effective["storage.device"] = mount.source
        if cluster.waldir is not None:
            wal = devices.mount_of(cluster.waldir.parent)
            env.effective["storage.wal.filesystem"] = wal.fstype
            env.effective["storage.wal.mount_options"] = wal.options
            env.effective["storage.wal.device"] = wal.source
        _, primary = devices.for_cluster(cluster, env.storage_devices)
        for dev in primary:
            size = devices.SYS_BLOCK / dev / "queue" / "logical_block_size"
            if size.exists():
                env.effective[f"storage.sector_size.{dev}"] = size.read_text().strip()
            dio = devices.SYS_BLOCK / dev / "loop" / "dio"
            if dio.exists():
                env.effective[f"storage.loop_direct_io.{dev}"] = dio.read_text().strip()
        if values["filesystem"] == "btrfs":
            env.effective["storage.btrfs_nocow"] = str(blockdev.has_nocow(cluster.datadir))
        if env.storage_devices:
            env.effective["storage.pool_devices"] = ",".join(env.storage_devices)
        if self.pool is not None:
            env.effective["storage.zfs.implementation"] = "zfs-fuse (FUSE page cache off)"
            env.effective.update({f"storage.zfs.{k}": v
                                  for k, v in self.pool.properties().items()})  # fmt: skip

    def undo(self, env: TrialEnv) -> None:
        if env.cluster is not None and self.key is not None:
            env.cluster.stop()  # a mounted filesystem in use cannot be unmounted
        if self.journal is not None:
            self.journal.restore()
        self.key, self.pool = None, None


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


SPARE = 1024**3  # free space a loop image must leave on the work area's filesystem


def _check_space(workdir: Path, values: list[dict[str, Value]], where: str) -> None:
    """A sparse image can grow to its full size: refuse images the work area's filesystem
    could not hold (with a GiB to spare), rather than fill the disk mid-run."""
    free = shutil.disk_usage(workdir).free
    for v in values:
        specs = [str(v[k]) for k in ("device", "wal_device") if str(v.get(k)).startswith("loop:")]
        need = sum(parse_size(spec[5:]) for spec in specs)
        if need and need > free - SPARE:
            raise PgsweepError(
                f"{' + '.join(specs)} may grow to {need / 1024**3:.1f} GiB in {workdir}, whose "
                f"filesystem has {free / 1024**3:.1f} GiB free (pgsweep keeps 1 GiB spare)",
                where=where,
                fix="a smaller loop device, or --results on a filesystem with more room",
            )
