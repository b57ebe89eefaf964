"""Block devices for the storage layer: a sparse file attached as a loop device, or a real
device the user named with --allow-device; the checks that refuse a device in use; mkfs
and mount. Every loop device and mount is written to the undo journal before it is made,
and `undo_entry` takes it down again (also for runs that died: `pgsweep restore`)."""

from __future__ import annotations

import fcntl
import json
import os
import re
import stat
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ..errors import PgsweepError
from . import mounts, proc, safefs
from .mounts import Mount

MKFS = {
    "ext4": ["mkfs.ext4", "-F", "-q"],
    "xfs": ["mkfs.xfs", "-f", "-q"],
    "btrfs": ["mkfs.btrfs", "-f", "-q"],
}
PACKAGES = {"ext4": "e2fsprogs", "xfs": "xfsprogs", "btrfs": "btrfs-progs", "zfs": "zfs-fuse"}
SYS_BLOCK = Path("/sys/class/block")


class DeviceError(Exception):
    """A device step failed; the message quotes the tool (and so the kernel)."""


@dataclass(frozen=True)
class Grant:
    """What the command line allows: devices named with --allow-device, and --wipe."""

    devices: tuple[Path, ...] = ()
    wipe: bool = False

    def allows(self, device: Path) -> bool:
        try:
            real = real_device(device)
        except DeviceError:
            return False
        return any(os.path.realpath(d) == str(real) for d in self.devices)


# ---- refusing a device in use ----------------------------------------------------------


@dataclass(frozen=True)
class BlockView:
    """What the kernel says about block devices: sysfs, the mount table, swap. The real
    one by default; tests of partition layouts this kernel cannot make build their own."""

    sysfs: Path = SYS_BLOCK
    mount_table: tuple[Mount, ...] | None = None
    swaps: str | None = None

    def mount_list(self) -> tuple[Mount, ...]:
        return self.mount_table if self.mount_table is not None else tuple(mounts.mounts())

    def swap_names(self) -> list[str]:
        text = self.swaps if self.swaps is not None else Path("/proc/swaps").read_text()
        return [Path(line.split()[0]).name for line in text.splitlines()[1:] if line.strip()]

    def disk_of(self, name: str) -> str:
        """A partition's disk (sda1 -> sda); a disk is its own."""
        entry = self.sysfs / name
        return entry.resolve().parent.name if (entry / "partition").exists() else name

    def partitions(self, disk: str) -> list[str]:
        return sorted(p.name for p in (self.sysfs / disk).glob(f"{disk}*")
                      if (p / "partition").exists())  # fmt: skip

    def users(self, names: set[str]) -> list[str]:
        """Mounts, swap and holders of any of these devices (by name or device number)."""
        numbers = {(self.sysfs / n / "dev").read_text().strip() for n in names
                   if (self.sysfs / n / "dev").exists()}  # fmt: skip
        found = []
        for m in self.mount_list():
            if Path(m.source).name in names or m.device in numbers:
                root = " (the root filesystem)" if m.point == "/" else ""
                found.append(f"{Path(m.source).name or m.device} is mounted at {m.point}{root}")
        found += [f"{n} is in use as swap" for n in self.swap_names() if n in names]
        for n in sorted(names):
            holders = sorted(p.name for p in (self.sysfs / n / "holders").glob("*"))
            if holders:
                found.append(f"{n} is held by {', '.join(holders)} (RAID, LVM or device-mapper)")
        return found

    def neighbours_in_use(self, name: str) -> list[str]:
        """Mounts, swap and holders anywhere on the disk `name` is or is part of, and the
        partitions of a whole disk: pgsweep never formats next to a live filesystem."""
        disk = self.disk_of(name)
        reasons = self.users({disk, *self.partitions(disk)})
        own = self.partitions(name) if disk == name else []
        if own:
            reasons.append(f"it has partitions: {', '.join(own)}")
        return reasons


def real_device(device: Path) -> Path:
    """The block device a path names, or DeviceError: only absolute paths under /dev with
    no `..`, resolving to a block device under /dev (`/dev/../etc/passwd` is refused)."""
    text = str(device)
    if not text.startswith("/dev/") or ".." in device.parts or "//" in text:
        raise DeviceError(f"{device} is not a device path under /dev")
    real = Path(os.path.realpath(device))
    if real.parts[:2] != ("/", "dev"):
        raise DeviceError(f"{device} resolves to {real}, outside /dev")
    try:
        st = os.stat(real)
    except FileNotFoundError:
        raise DeviceError(f"{device} does not exist") from None
    if not stat.S_ISBLK(st.st_mode):
        raise DeviceError(f"{device} is not a block device")
    return real


def in_use(device: Path, scratch: Path, ours: frozenset[str] = frozenset()) -> list[str]:
    """Why `device` must not be formatted: not a block device under /dev; mounted, swap or
    held (it, a partition of it, or for a partition also its disk and sibling partitions:
    pgsweep never formats next to a live filesystem on the same disk); partitions of its
    own; open exclusively by the kernel; or a signature wipefs or blkid sees (signatures
    whose UUID is in `ours`, filesystems pgsweep made itself in this run, do not count).
    Read-only."""
    try:
        real = real_device(device)
    except DeviceError as exc:
        return [str(exc)]
    reasons = BlockView().neighbours_in_use(real.name)
    try:
        os.close(os.open(real, os.O_RDONLY | os.O_EXCL | os.O_CLOEXEC))
    except OSError as exc:
        if exc.errno == 16:  # EBUSY: mounted, held, or opened exclusively by someone
            reasons.append("the kernel reports it busy (O_EXCL open failed)")
    reasons += [f"it carries a signature: {s}" for s in signatures(real, scratch, ours)]
    return reasons


def signatures(device: Path, scratch: Path, ours: frozenset[str] = frozenset()) -> list[str]:
    """Filesystem, RAID, pool and partition-table signatures (`wipefs --json`, read-only,
    plus `blkid -p` for what wipefs does not list), except a filesystem whose UUID is in
    `ours`."""
    res = proc.run_tool(["blkid", "-p", "-o", "export", str(device)], scratch, "blkid")
    probed = dict(line.partition("=")[::2] for line in res.stdout.splitlines() if "=" in line)
    if probed.get("UUID") in ours:
        return []
    found: list[str] = []
    res = proc.run_tool(["wipefs", "--json", str(device)], scratch, "wipefs")
    if res.ok and res.stdout.strip():
        for sig in json.loads(res.stdout).get("signatures", []):
            label = f"{sig.get('type')} (offset {sig.get('offset')})"
            if label not in found:
                found.append(label)
    for key in ("TYPE", "PTTYPE"):
        value = probed.get(key)
        if value and not any(f.startswith(f"{value} ") for f in found):
            found.append(f"{value} (blkid {key})")
    return found


def filesystem_uuid(device: Path, scratch: Path) -> str | None:
    """The UUID blkid reads from a filesystem pgsweep just made (to know it again)."""
    res = proc.run_tool(["blkid", "-p", "-o", "value", "-s", "UUID", str(device)], scratch,
                        "blkid-uuid")  # fmt: skip
    return res.stdout.strip() or None


def check_real_device(device: Path, grant: Grant, scratch: Path, where: str) -> None:
    """Refuse (exit 2, nothing done) a real device the command line did not allow, or one
    in use; a signature alone is overridden by --wipe. Read-only: `plan` runs it too."""
    if not grant.allows(device):
        raise PgsweepError(
            f"storage.device {device} is a real device, and the command line did not allow it",
            where=where,
            fix=f"if pgsweep may format {device} (destroying its contents), add "
            f"--allow-device {device} to the command; an experiment file alone never can",
        )
    reasons = in_use(device, scratch)
    fatal = [r for r in reasons if "signature" not in r]
    if fatal or (reasons and not grant.wipe):
        raise PgsweepError(
            f"refusing to format {device}: " + "; ".join(reasons),
            where=where,
            fix="unmount it and free it first; a device whose only problem is a signature "
            "can be wiped with --allow-device DEVICE --wipe",
        )


def check_before_format(device: Path, grant: Grant, scratch: Path,
                        ours_by_device: Mapping[str, frozenset[str]]) -> Path:  # fmt: skip
    """Right before every mkfs on a real device (a rebuild may come hours after the first
    check): still allowed by the command line, still free, carrying at most a filesystem
    pgsweep made itself, or (--wipe, first format) a signature only: wiped here, after
    every other check passed. Returns the device the path names. `ours_by_device`: the
    UUIDs of the filesystems pgsweep made in this run, by real device."""
    real = real_device(device)
    ours = ours_by_device.get(str(real), frozenset())
    if not grant.allows(real):
        raise DeviceError(f"refusing to format {device}: the command line did not allow it")
    reasons = in_use(real, scratch, ours)
    if grant.wipe and not ours and reasons and all("signature" in r for r in reasons):
        wipe(real, scratch)
        reasons = in_use(real, scratch, ours)
    if reasons:
        raise DeviceError(f"refusing to format {device} now: " + "; ".join(reasons))
    return real


# ---- making and taking down -------------------------------------------------------------


def attach_loop(
    image: Path, size: int, sector_size: int | None, direct_io: bool, scratch: Path
) -> Path:
    """A sparse file of `size` bytes attached as a loop device (the journal entry for
    `image` must already be on disk). With `direct_io` the loop device bypasses the host's
    page cache, so the filesystem under test caches alone (and a memory limit holds)."""
    fd = os.open(image, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | safefs.NOFOLLOW, 0o600)
    try:  # in root's own folder (0700), made through the host; never through a link
        os.ftruncate(fd, size)
    finally:
        os.close(fd)
    argv = ["losetup", "--find", "--show", f"--direct-io={'on' if direct_io else 'off'}"]
    if sector_size:
        argv += ["--sector-size", str(sector_size)]
    res = proc.run_tool([*argv, str(image)], scratch, "losetup")
    if not res.ok:
        raise DeviceError(f"losetup failed: {res.last_line()}")
    return Path(res.stdout.strip())


def loops_of(image: Path) -> list[str]:
    """Loop devices backed by `image`, also when the file was deleted under them."""
    names = {str(image), f"{image} (deleted)"}
    found = []
    for backing in sorted(SYS_BLOCK.glob("loop*/loop/backing_file")):
        try:
            if backing.read_text().strip() in names:
                found.append(f"/dev/{backing.parent.parent.name}")
        except OSError:
            continue
    return found


def make_filesystem(fstype: str, device: Path, options: str, scratch: Path) -> str | None:
    """mkfs; the new filesystem's UUID (to know it again at the next check)."""
    res = proc.run_tool(
        [*MKFS[fstype], *options.split(), str(device)], scratch, f"mkfs-{fstype}", 600
    )
    if not res.ok:
        raise DeviceError(f"mkfs.{fstype} {options} refused {device}: {res.last_line()}")
    return filesystem_uuid(device, scratch)


def quiet_defaults(fstype: str, options: str) -> list[str]:
    """Mount options that keep a new filesystem from writing on its own during trials:
    ext4 zeroes a new filesystem's inode tables from a kernel thread (ext4lazyinit) for
    minutes after its first mount, device writes no transaction made, counted in the first
    trials' bytes (up to 2.6 times the later trials' per transaction, seen); noinit_itable
    leaves them as mkfs made them (marked uninitialised: nothing reads them). A level that
    names init_itable keeps the kernel's way."""
    given = {o.split("=", 1)[0] for o in options.split(",")}
    return ["noinit_itable"] if fstype == "ext4" and not given & {"init_itable",
                                                                  "noinit_itable"} else []


def mount_options(fstype: str, options: str) -> str:
    """What `mount -o` is given: nosuid,nodev always (the server user writes on this
    filesystem), the quiet defaults, then the level's options."""
    return ",".join(["nosuid", "nodev", *quiet_defaults(fstype, options), *filter(None, [options])])


def mount(fstype: str, device: Path, point: Path, options: str, scratch: Path,
          nocow: bool = False) -> None:  # fmt: skip
    """Mount, or fail quoting the kernel: mount(8) only says "bad option", the kernel log
    says which (`xfs: Unknown parameter 'nobarrier'`). The new filesystem's root is then
    root's, 0711 (the server user passes through); with `nocow` (btrfs) its root carries
    chattr +C, which every file the cluster makes inherits."""
    safefs.check_mountpoint(point)  # right before: a real directory only root can change
    argv = ["mount", "-t", fstype, "-o", mount_options(fstype, options)]
    since = max((t for t, _ in _kernel_log(scratch)), default=-1.0)
    res = proc.run_tool([*argv, str(device), str(point)], scratch, "mount")
    if not res.ok:
        new = [line for t, line in _kernel_log(scratch) if t > since]
        said = [line for line in new if fstype in line.lower() or device.name in line]
        kernel = f"; the kernel said: {' / '.join(said[-3:])}" if said else ""
        raise DeviceError(
            f"mounting {fstype} with {options or 'defaults'!r} failed: {res.last_line()}{kernel}"
        )
    safefs.own_root(point)
    if nocow:
        set_nocow(point, scratch)


def _kernel_log(scratch: Path) -> list[tuple[float, str]]:
    """(seconds since boot, message) of each kernel log line. New lines are told by their
    time, not by position: the ring buffer drops old lines once it is full."""
    res = proc.run_tool(["dmesg"], scratch, "dmesg")
    out = []
    for line in res.stdout.splitlines() if res.ok else []:
        m = re.match(r"\[\s*(\d+\.\d+)\]\s?(.*)", line)
        if m:
            out.append((float(m.group(1)), m.group(2)))
    return out


def undo_entry(entry: dict[str, str], scratch: Path, root: Path | None) -> str | None:
    """Take down one journaled mount or loop image; None when nothing was left to do.
    Raises OSError when it cannot (kept in the journal for another try). Only mount points
    and images inside the run's own work area `root` are touched: a journal is data."""
    path = Path(entry.get("mount") or entry.get("loop_image") or "/")
    if not in_work_area(path, root):
        raise OSError(f"{path} is not inside the run's work area; the journal entry is refused")
    if "mount" in entry:
        point = Path(entry["mount"])
        if not mounts.is_mounted(point):
            return None
        res = proc.run_tool(["umount", str(point)], scratch, "umount")
        if not res.ok:  # no lazy unmount: a filesystem still in use is a failure to report
            raise OSError(f"umount {point}: {res.last_line()}")
        return f"unmounted {point}"
    image = Path(entry["loop_image"])
    done = []
    for loop in loops_of(image):
        res = proc.run_tool(["losetup", "-d", loop], scratch, "losetup-d")
        if not res.ok:
            raise OSError(f"losetup -d {loop}: {res.last_line()}")
        done.append(f"detached {loop}")
    if image.exists():
        image.unlink()
        done.append(f"removed {image}")
    return ", ".join(done) or None


def in_work_area(path: Path, root: Path | None) -> bool:
    """Does `path` lie in `root`, a work area pgsweep made (marked, named as pgsweep names
    them)? Its directory is resolved first: `..` and links do not lead out."""
    from .workarea import MARKER

    if root is None or ".." in path.parts:
        return False
    real_root = Path(os.path.realpath(root))
    parent = Path(os.path.realpath(path.parent))
    named = real_root.name.startswith((".pgsweep-work-", "pgsweep-work-"))
    inside = parent == real_root or real_root in parent.parents
    return named and inside and (real_root / MARKER).is_file()


def wipe(device: Path, scratch: Path) -> None:
    """Erase the signatures of a device the command line allowed with --wipe."""
    res = proc.run_tool(["wipefs", "--all", str(device)], scratch, "wipefs-all")
    if not res.ok:
        raise DeviceError(f"wipefs --all {device} failed: {res.last_line()}")


def set_nocow(directory: Path, scratch: Path) -> None:
    """Btrfs "CoW off": chattr +C on an empty directory; new files inherit it."""
    res = proc.run_tool(["chattr", "+C", str(directory)], scratch, "chattr")
    if not res.ok or not has_nocow(directory):
        raise DeviceError(f"chattr +C {directory} failed: {res.last_line()}")


FS_IOC_GETFLAGS = 0x80086601  # linux/fs.h, as lsattr reads it
FS_NOCOW_FL = 0x00800000


def has_nocow(path: Path) -> bool:
    """The C (no copy-on-write) attribute, read as lsattr does."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | safefs.NOFOLLOW)  # never a planted link
    try:
        buf = fcntl.ioctl(fd, FS_IOC_GETFLAGS, struct.pack("l", 0))
    except OSError:
        return False
    finally:
        os.close(fd)
    return bool(struct.unpack("l", buf)[0] & FS_NOCOW_FL)
