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

from .. import blockdev, zfsfuse
from ..collect import devices
from ..journal import UndoJournal
from ..trialenv import TrialEnv, TrialFailure
from ..units import parse_size
from .base import Cost, Layer, ValidationContext, Value, check_table

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

    @field_validator("device")
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
        zfs_base = base.get("zfs", {})
        plain_base = {k: v for k, v in base.items() if k != "zfs"}
        plain = {k: v for k, v in factors.items() if not k.startswith("zfs.")}
        table = check_table(StorageTable, self.name, plain_base, plain, ctx.source)
        values: dict[str, Value] = dict(table.model_dump())
        zfs = zfsfuse.validate(zfs_base, {k[4:]: v for k, v in factors.items()
                                          if k.startswith("zfs.")}, ctx.source)  # fmt: skip
        values.update({f"zfs.{k}": v for k, v in zfs.items()})
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
                                            else ("storage", k))) for k in ("device",)}  # fmt: skip
        return values

    def check_configurations(
        self, configs: list[dict[str, dict[str, Value]]], ctx: ValidationContext
    ) -> None:
        for values in configs:
            mine = values[self.name]
            if mine.get("btrfs_nocow") and mine.get("filesystem") != "btrfs":
                raise ctx.source.error(
                    ("storage", "btrfs_nocow"),
                    f"storage.btrfs_nocow applies to btrfs, not {mine.get('filesystem')}",
                    fix="vary btrfs_nocow in an experiment whose filesystem is btrfs",
                )
            zfs = [k for k, v in mine.items() if k.startswith("zfs.") and v is not None]
            if zfs and mine.get("filesystem") != "zfs":
                raise ctx.source.error(
                    ("storage", "zfs"),
                    f"storage.{zfs[0]} applies to zfs, not {mine.get('filesystem')}",
                    fix='set filesystem = "zfs", or remove the zfs settings',
                )

    def authorize(self, grant: blockdev.Grant) -> None:
        self.grant = grant

    def check_host(self, workdir: Path, values: list[dict[str, Value]]) -> None:
        """Real devices: named on the command line, and not in use. Changes nothing."""
        if any(v.get("filesystem") == "zfs" for v in values):
            zfsfuse.check_host()
        for device in sorted({str(v["device"]) for v in values if v.get("device")}):
            if not device.startswith("loop:"):
                blockdev.check_real_device(Path(device), self.grant, workdir / "storage-cmd",
                                           self.where.get("device", "storage.device"))  # fmt: skip

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
        assert self.journal is not None
        device_spec, n = str(values["device"]), self.built
        env.storage_devices = []
        if device_spec.startswith("loop:"):
            image = env.workdir / "storage" / f"disk-{n}.img"
            self.journal.record({"loop_image": str(image)})
            sector = values.get("sector_size")
            device = blockdev.attach_loop(image, parse_size(device_spec[5:]),
                                          int(sector) if sector else None,
                                          bool(values["loop_direct_io"]), scratch)  # fmt: skip
        else:
            device = Path(device_spec)
            if self.grant.wipe:
                blockdev.wipe(device, scratch)
        point = env.workdir / "storage" / f"mnt-{n}"
        if values["filesystem"] == "zfs":
            name = f"pgsweep{os.getpid()}n{n}"
            self.pool = zfsfuse.Pool.create(name, device, point, values, self.journal, scratch)
            env.storage_devices = [device.name]  # FUSE hides the pool's device from stat
            return point
        blockdev.make_filesystem(str(values["filesystem"]), device, str(values["mkfs_options"]),
                                 scratch)  # fmt: skip
        self.journal.record({"mount": str(point)})
        blockdev.mount(str(values["filesystem"]), device, point, str(values["mount_options"]),
                       scratch)  # fmt: skip
        if values["filesystem"] == "btrfs" and values["btrfs_nocow"]:
            blockdev.set_nocow(point, scratch)  # inherited by every file the cluster makes
        return point

    def _live_properties(self, values: dict[str, Value], env: TrialEnv) -> None:
        """Properties a live dataset takes: set them, restart the server if any changed."""
        assert self.pool is not None
        wanted = {k[4:]: str(v) for k, v in values.items()
                  if k.startswith("zfs.") and k[4:] in zfsfuse.LIVE and v is not None}  # fmt: skip
        changed = {k: v for k, v in wanted.items() if self.live.get(k) != v}
        if not changed:
            return
        if env.cluster is not None and env.cluster.postmaster_pid():
            env.cluster.stop()
            env.server_settings = None
        try:
            self.pool.set_properties(changed)
            if self.live and {"primarycache", "secondarycache"} & set(changed):
                self.pool.drop_arc()  # what the last level cached must not serve this one
                env.events.append("arc-drop")
        except zfsfuse.ZfsError as exc:
            raise TrialFailure(str(exc)) from exc
        self.live.update(changed)
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
            env.effective.update({f"storage.zfs.{k}": v
                                  for k, v in self.pool.properties().items()})  # fmt: skip

    def undo(self, env: TrialEnv) -> None:
        if env.cluster is not None and self.key is not None:
            env.cluster.stop()  # a mounted filesystem in use cannot be unmounted
        if self.journal is not None:
            self.journal.restore()
        self.key, self.pool = None, None
