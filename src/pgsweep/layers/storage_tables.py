"""The storage layer's tables ([storage], [storage.wal], [storage.zfs]) and what their
strings may say. Nothing in them may name a path or device beyond what its key is for:
`device` names the one device to format, and mkfs and mount options are checked against
lists of options that cannot name another device or file (xfs `-l logdev=`, ext4
`-J device=`, a second `-F`, a device path among mkfs.btrfs's arguments, mount
`logdev=`...)."""

from __future__ import annotations

import re
import shlex
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..units import parse_size

# Characters an option value may hold: no slash (paths), no whitespace, no quotes.
_PLAIN = re.compile(r"^[A-Za-z0-9_.,:=+@%^-]+$")
_SUB = frozenset
_DEVICE = re.compile(r"/dev/[A-Za-z0-9_.:+-]+(/[A-Za-z0-9_.:+-]+)*")

# option -> "value" (takes one plain value), None (a flag), or the sub-option keys allowed
# in its comma-separated key[=value] list.
# fmt: off
MKFS_OPTIONS: dict[str, dict[str, Any]] = {
    "ext4": {
        # no -L/-U (a label or UUID another filesystem uses can be mounted in its place at
        # boot), no -e (errors=panic halts the machine), no -E root_owner (the filesystem's
        # root must stay root's)
        **dict.fromkeys(("-b", "-C", "-g", "-G", "-i", "-I", "-m", "-N", "-O", "-T", "-o",
                         "-r"), "value"),
        "-j": None,
        "-E": _SUB({"stride", "stripe_width", "stripe-width", "resize", "lazy_itable_init",
                    "lazy_journal_init", "num_backup_sb", "packed_meta_blocks", "discard",
                    "nodiscard", "quotatype", "encoding", "encoding_flags",
                    "assume_storage_prezeroed", "orphan_file_size", "test_fs"}),
        "-J": _SUB({"size", "fast_commit_size"}),  # not device= (an external journal)
    },
    "xfs": {
        "-b": _SUB({"size"}),
        # no uuid= (a UUID another filesystem uses can be mounted in its place by UUID)
        "-m": _SUB({"crc", "finobt", "rmapbt", "reflink", "bigtime", "inobtcount"}),
        "-d": _SUB({"agcount", "agsize", "su", "sunit", "sw", "swidth", "size", "noalign",
                    "cowextsize", "extszinherit"}),  # not file, name=
        "-i": _SUB({"size", "maxpct", "align", "attr", "projid32bit", "sparse", "nrext64",
                    "perblock"}),
        "-l": _SUB({"size", "version", "su", "sunit", "lazy-count", "agnum"}),  # not logdev=
        "-n": _SUB({"size", "version", "ftype"}),
        "-s": _SUB({"size"}),
        "-K": None,
        # no -r (a realtime section lives on another device), no -L (labels)
    },
    "btrfs": {
        **dict.fromkeys(("-n", "--nodesize", "-s", "--sectorsize", "-d", "--data", "-m",
                         "--metadata", "-O", "--features", "-R", "--runtime-features",
                         "--csum", "--checksum", "-b", "--byte-count"), "value"),
        **dict.fromkeys(("-K", "--nodiscard", "-M", "--mixed"), None),
    },
}
# fmt: on
# Mount options that name another device or file, or change what mount(8) does.
# fmt: off
MOUNT_REFUSED = {"logdev", "rtdev", "journal_path", "journal_dev", "device", "loop", "offset",
                 "sizelimit", "helper", "uhelper", "bind", "rbind", "move", "remount",
                 "subvol", "subvolid", "context", "fscontext", "rootcontext", "defcontext",
                 "uid", "gid", "owner", "user", "users", "group",
                 "suid", "dev", "exec"}  # pgsweep mounts nosuid,nodev: these would lift it
# fmt: on


def check_mkfs_options(fs: str, text: str) -> str:
    """The options as given, or ValueError naming the first one that is not allowed."""
    allowed = MKFS_OPTIONS.get(fs, {})
    try:
        tokens = shlex.split(text)
    except ValueError as exc:
        raise ValueError(f"options that split like a command line ({exc})") from None
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if token.startswith("--"):
            name, _, attached = token.partition("=")
        else:
            name, attached = token[:2], token[2:]
        if not token.startswith("-") or name not in allowed:
            what = "a device or file" if not token.startswith("-") else "an option"
            raise ValueError(
                f"{token!r} is {what} mkfs.{fs} may not be given here; allowed: "
                f"{' '.join(sorted(allowed))} (none can name another device or file)"
            )
        kind, value = allowed[name], attached or None
        if kind is None:
            if value:
                raise ValueError(f"{name} takes no value (got {token!r})")
        else:
            if value is None:
                i += 1
                if i >= len(tokens):
                    raise ValueError(f"{name} needs a value")
                value = tokens[i]
            _check_value(fs, name, kind, value)
        i += 1
    return text


def _check_value(fs: str, name: str, kind: Any, value: str) -> None:
    if kind != "value":
        for item in value.split(","):
            key = item.partition("=")[0]
            if key not in kind:
                raise ValueError(
                    f"mkfs.{fs} {name} {key}: not allowed here: it can name another device, file "
                    f"or identity (a UUID, a label) or is not known (allowed: "
                    f"{', '.join(sorted(kind))})"
                )
    if not _PLAIN.fullmatch(value):
        raise ValueError(f"{name} {value!r}: values may not hold paths, spaces or quotes")


def check_mount_options(text: str) -> str:
    if not text:
        return text
    for item in text.split(","):
        key, _, value = item.partition("=")
        if key.lower() in MOUNT_REFUSED or key.lower().startswith("x-"):
            raise ValueError(f"mount option {key!r} names a device or file, changes what mount "
                             "does or lifts nosuid/nodev; it cannot be used here")  # fmt: skip
        if value.lower() == "panic":
            raise ValueError(f"mount option {item!r} would halt the machine on an error")
    if not _PLAIN.fullmatch(text):
        raise ValueError("comma-separated options without paths, spaces or quotes")
    return text


def check_device(v: str | None) -> str | None:
    if v is None:
        return v
    if v.startswith("loop:"):
        if parse_size(v.removeprefix("loop:")) < 256 * 1024**2:
            raise ValueError('a loop device of at least 256MiB, e.g. "loop:8GiB"')
    elif not re.fullmatch(r"/dev/[A-Za-z0-9_.:+-]+(/[A-Za-z0-9_.:+-]+)*", v) or ".." in v.split(
        "/"
    ):
        raise ValueError('"loop:SIZE" (e.g. "loop:8GiB") or a device path under /dev')
    return v


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
        return check_device(v)

    @field_validator("mount_options")
    @classmethod
    def _mount(cls, v: str) -> str:
        return check_mount_options(v)

    @field_validator("mkfs_options")
    @classmethod
    def _mkfs(cls, v: str, info: Any) -> str:
        return check_mkfs_options(str(info.data.get("filesystem", "ext4")), v)


class WalTable(BaseModel):
    """[storage.wal]: the WAL device's filesystem; unset keys follow the data device's."""

    model_config = ConfigDict(extra="forbid", strict=True)

    filesystem: Literal["ext4", "xfs", "btrfs"] | None = None
    mkfs_options: str | None = None
    mount_options: str | None = None
    sector_size: Literal[512, 4096] | None = None

    @field_validator("mount_options")
    @classmethod
    def _mount(cls, v: str | None) -> str | None:
        return v if v is None else check_mount_options(v)

    @field_validator("mkfs_options")
    @classmethod
    def _mkfs(cls, v: str | None, info: Any) -> str | None:
        fs = info.data.get("filesystem")
        if v is None or fs is None:  # following the data device's filesystem: checked per
            return v  # configuration once the filesystem is known (check_configurations)
        return check_mkfs_options(str(fs), v)


# Properties a live dataset takes without new data: changing them restarts the server only.
LIVE = {"primarycache", "secondarycache", "logbias", "atime", "sync"}
PROPERTIES = ("recordsize", "primarycache", "secondarycache", "compression", "logbias", "atime")
COMPRESSION = {"on", "off", "lzjb", "gzip", "zle", *(f"gzip-{n}" for n in range(1, 10))}
Cache = Literal["all", "metadata", "none"]


class ZfsTable(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    recordsize: str | int | None = Field(None, description='"8K" .. "128K"')
    primarycache: Cache | None = None
    secondarycache: Cache | None = None
    compression: str | None = None
    logbias: Literal["latency", "throughput"] | None = None
    atime: Literal["on", "off"] | None = None
    sync: str | None = None
    ashift: int | None = Field(None, ge=9, le=16)
    arc_max: str | int | None = Field(None, description='ARC limit, e.g. "512MiB" (zfs-fuse -m)')

    @field_validator("recordsize")
    @classmethod
    def _recordsize(cls, v: Any) -> Any:
        if v is not None:
            size = parse_size(v)
            if size < 512 or size > 128 * 1024 or size & (size - 1):
                raise ValueError('a power of two from 512 to 128K, e.g. "8K"')
        return v

    @field_validator("compression")
    @classmethod
    def _compression(cls, v: str | None) -> str | None:
        if v is not None and v not in COMPRESSION:
            raise ValueError(
                f"zfs-fuse 0.7 compresses with {', '.join(sorted(COMPRESSION))} (no lz4)"
            )
        return v

    @field_validator("sync")
    @classmethod
    def _sync(cls, v: str | None) -> str | None:
        if v is not None:
            raise ValueError("zfs-fuse 0.7 has no sync property (kernel ZFS has; not supported)")
        return v

    @field_validator("arc_max")
    @classmethod
    def _arc(cls, v: Any) -> Any:
        if v is not None and not 16 <= parse_size(v) // 1024**2 <= 16384:
            raise ValueError('between 16MiB and 16GiB (zfs-fuse -m), e.g. "512MiB"')
        return v
