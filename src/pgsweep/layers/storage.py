"""The `storage` layer: the filesystem the cluster lives on. pgsweep builds it itself on a
loop device over a sparse file (`device = "loop:8GiB"`) or on a real device the command
line allowed (`--allow-device`), mounts it inside the work area, and takes it down again
through its own undo journal. A new filesystem means a new cluster; ZFS properties that
apply to a live dataset only restart the server."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..collect import devices
from ..core import Cost, Value
from ..errors import PgsweepError
from ..host import blockdev, zfsfuse
from ..host.journal import UndoJournal
from ..trialenv import TrialEnv, TrialFailure
from ..units import parse_size
from .base import Layer, ValidationContext, check_subtable, check_table

PACKAGES = {"ext4": "e2fsprogs", "xfs": "xfsprogs", "btrfs": "btrfs-progs", "zfs": "zfs-fuse"}


class StorageTable(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    device: str | None = Field(None, description='"loop:8GiB" or a block device path')
    sector_size: Literal[512, 4096] | None = None
    filesystem: Literal["ext4", "xfs", "btrfs", "zfs"] = "ext4"
    mkfs_options: str = ""
    mount_options: str = ""
    btrfs_nocow: bool = False
    loop_direct_io: bool = True  # the loop device bypasses the host page cache
    wal_device: str | None = Field(None, description="a device of its own for pg_wal")

    @field_validator("device", "wal_device")
    @classmethod
    def _device(cls, v: str | None) -> str | None:
        if v is None:
            return v
        if v.startswith("loop:"):
            if parse_size(v.removeprefix("loop:")) < 256 * 1024**2:
                raise ValueError('a loop device of at least 256MiB, e.g. "loop:8GiB"')
        elif not v.startswith("/dev/"):
            raise ValueError('"loop:SIZE" (e.g. "loop:8GiB") or a device path under /dev')
        return v


class WalTable(BaseModel):
    """[storage.wal]: the WAL device's filesystem; unset keys follow the data device's."""

    model_config = ConfigDict(extra="forbid", strict=True)

    filesystem: Literal["ext4", "xfs", "btrfs"] | None = None
    mkfs_options: str | None = None
    mount_options: str | None = None
    sector_size: Literal[512, 4096] | None = None


SUBTABLES = {"zfs": zfsfuse.ZfsTable, "wal": WalTable}


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
        devices_given = [values["device"], *factors.get("device", [])]
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

    def authorize(self, grant: blockdev.Grant) -> None:
        self.grant = grant

    def check_host(self, workdir: Path, values: list[dict[str, Value]]) -> None:
        """Real devices: named on the command line, and not in use. Changes nothing."""
        if any(v.get("filesystem") == "zfs" for v in values):
            zfsfuse.check_host()
        _check_space(workdir, values, self.where.get("device", "storage.device"))
        for key in ("device", "wal_device"):
            for device in sorted({str(v[key]) for v in values if v.get(key)}):
                if not device.startswith("loop:"):
                    blockdev.check_real_device(Path(device), self.grant, workdir / "storage-cmd",
                                               self.where.get(key, f"storage.{key}"))  # fmt: skip

    def cost(self, key: str) -> Cost:
        return Cost.RESTART if key.removeprefix("zfs.") in zfsfuse.LIVE else Cost.CLUSTER

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
        scratch = env.workdir / "storage-cmd"
        try:
            home = self._build(values, env, scratch)
        except (blockdev.DeviceError, zfsfuse.ZfsError) as exc:
            self.failures[key] = str(exc)
            self.undo(env)
            raise TrialFailure(str(exc)) from exc
        if env.user is not None:
            os.chown(home, env.user.uid, env.user.gid)
        env.cluster_home, self.key, self.live = home, key, {}
        env.events.append("new-storage")

    def _build(self, values: dict[str, Value], env: TrialEnv, scratch: Path) -> Path:
        """Data filesystem (and WAL filesystem) for this configuration; returns the data
        mount point, sets env.wal_home."""
        n = self.built
        env.storage_devices, env.wal_home = [], None
        device = self._device(str(values["device"]), values, f"disk-{n}.img", env, scratch)
        point = env.workdir / "storage" / f"mnt-{n}"
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
            env.wal_home = env.workdir / "storage" / f"mnt-{n}-wal"
            self._filesystem(wal, wal_dev, env.wal_home, scratch)
            if env.user is not None:
                os.chown(env.wal_home, env.user.uid, env.user.gid)
        return point

    def _device(
        self, spec: str, values: dict[str, Value], image_name: str, env: TrialEnv, scratch: Path
    ) -> Path:
        assert self.journal is not None
        if not spec.startswith("loop:"):
            if self.grant.wipe:
                blockdev.wipe(Path(spec), scratch)
            return Path(spec)
        image = env.workdir / "storage" / image_name
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
        self.journal.record({"mount": str(point)})
        blockdev.mount(fs, device, point, str(values["mount_options"]), scratch)
        if fs == "btrfs" and values.get("btrfs_nocow"):
            blockdev.set_nocow(point, scratch)  # inherited by every file the cluster makes

    def _live_properties(self, values: dict[str, Value], env: TrialEnv) -> None:
        """Properties a live dataset takes: set them, restart the server if any changed.
        The ARC is emptied when a cache property changed (what the last level cached must
        not serve this one) and before every trial under os.drop_caches = "before_trial"
        (on ZFS the ARC is the cache to drop)."""
        assert self.pool is not None
        wanted = {k[4:]: str(v) for k, v in values.items()
                  if k.startswith("zfs.") and k[4:] in zfsfuse.LIVE and v is not None}  # fmt: skip
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
        datadir = env.require_cluster().datadir
        mount = devices.mount_of(datadir)
        env.effective["storage.filesystem"] = mount.fstype
        env.effective["storage.mount_options"] = mount.options
        env.effective["storage.device"] = mount.source
        if env.wal_home is not None:
            wal = devices.mount_of(datadir / "pg_wal")
            env.effective["storage.wal.filesystem"] = wal.fstype
            env.effective["storage.wal.mount_options"] = wal.options
            env.effective["storage.wal.device"] = wal.source
        _, primary = devices.for_cluster(datadir, env.storage_devices)
        for dev in primary:
            size = devices.SYS_BLOCK / dev / "queue" / "logical_block_size"
            if size.exists():
                env.effective[f"storage.sector_size.{dev}"] = size.read_text().strip()
            dio = devices.SYS_BLOCK / dev / "loop" / "dio"
            if dio.exists():
                env.effective[f"storage.loop_direct_io.{dev}"] = dio.read_text().strip()
        if values["filesystem"] == "btrfs":
            env.effective["storage.btrfs_nocow"] = str(blockdev.has_nocow(datadir / "base"))
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
