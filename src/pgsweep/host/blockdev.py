"""Block devices for the storage layer: a sparse file attached as a loop device, or a real
device the user named with --allow-device; the checks that refuse a device in use; mkfs
and mount. Every loop device and mount is written to the undo journal before it is made,
and `undo_entry` takes it down again (also for runs that died: `pgsweep restore`)."""

from __future__ import annotations

import fcntl
import json
import os
import stat
import struct
from dataclasses import dataclass
from pathlib import Path

from ..errors import PgsweepError
from . import proc

MKFS = {
    "ext4": ["mkfs.ext4", "-F", "-q"],
    "xfs": ["mkfs.xfs", "-f", "-q"],
    "btrfs": ["mkfs.btrfs", "-f", "-q"],
}
SYS_BLOCK = Path("/sys/class/block")


class DeviceError(Exception):
    """A device step failed; the message quotes the tool (and so the kernel)."""


@dataclass(frozen=True)
class Grant:
    """What the command line allows: devices named with --allow-device, and --wipe."""

    devices: tuple[Path, ...] = ()
    wipe: bool = False

    def allows(self, device: Path) -> bool:
        return any(os.path.realpath(d) == os.path.realpath(device) for d in self.devices)


# ---- refusing a device in use ----------------------------------------------------------


def in_use(device: Path, scratch: Path) -> list[str]:
    """Why `device` must not be formatted without --wipe, or must never be: mounted (it or
    a partition), the root filesystem, swap, partitions, holders, or a signature that
    wipefs or blkid sees. Read-only."""
    real = Path(os.path.realpath(device))
    try:
        st = real.stat()
    except FileNotFoundError:
        return [f"{device} does not exist"]
    if not stat.S_ISBLK(st.st_mode):
        return [f"{device} is not a block device"]
    name = real.name
    names = {name, *(p.name for p in (SYS_BLOCK / name).glob(f"{name}*") if p.is_dir())}
    reasons = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        source = fields[fields.index("-") + 2]
        numbers = fields[2]
        if (
            Path(source).name in names
            or numbers == f"{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}"
        ):
            reasons.append(
                f"mounted at {fields[4]}" + (" (the root filesystem)" if fields[4] == "/" else "")
            )
    for line in Path("/proc/swaps").read_text().splitlines()[1:]:
        if Path(line.split()[0]).name in names:
            reasons.append("in use as swap")
    partitions = sorted(n for n in names if n != name)
    if partitions:
        reasons.append(f"has partitions: {', '.join(partitions)}")
    holders = sorted(p.name for p in (SYS_BLOCK / name / "holders").glob("*"))
    if holders:
        reasons.append(f"held by {', '.join(holders)} (RAID, LVM or device-mapper)")
    reasons += [f"carries a signature: {s}" for s in signatures(real, scratch)]
    return reasons


def signatures(device: Path, scratch: Path) -> list[str]:
    """Filesystem, RAID, pool and partition-table signatures (`wipefs --json`, read-only,
    plus `blkid -p` for what wipefs does not list)."""
    found: list[str] = []
    res = proc.run_tool(["wipefs", "--json", str(device)], scratch, "wipefs")
    if res.ok and res.stdout.strip():
        for sig in json.loads(res.stdout).get("signatures", []):
            label = f"{sig.get('type')} (offset {sig.get('offset')})"
            if label not in found:
                found.append(label)
    res = proc.run_tool(["blkid", "-p", "-o", "export", str(device)], scratch, "blkid")
    for line in res.stdout.splitlines():
        key, _, value = line.partition("=")
        if key in ("TYPE", "PTTYPE") and not any(f.startswith(f"{value} ") for f in found):
            found.append(f"{value} (blkid {key})")
    return found


def check_real_device(device: Path, grant: Grant, scratch: Path, where: str) -> None:
    """Refuse (exit 2, nothing done) a real device the command line did not allow, or one
    in use; a signature alone is overridden by --wipe."""
    if not grant.allows(device):
        raise PgsweepError(
            f"storage.device {device} is a real device, and the command line did not allow it",
            where=where,
            fix=f"if pgsweep may format {device} (destroying its contents), add "
            f"--allow-device {device} to the run; an experiment file alone never can",
        )
    reasons = in_use(device, scratch)
    fatal = [r for r in reasons if "signature" not in r]
    if fatal or (reasons and not grant.wipe):
        raise PgsweepError(
            f"refusing to format {device}: it " + "; it ".join(reasons),
            where=where,
            fix="unmount it and free it first; a device whose only problem is a signature "
            "can be wiped with --allow-device DEVICE --wipe",
        )


# ---- making and taking down -------------------------------------------------------------


def attach_loop(
    image: Path, size: int, sector_size: int | None, direct_io: bool, scratch: Path
) -> Path:
    """A sparse file of `size` bytes attached as a loop device (the journal entry for
    `image` must already be on disk). With `direct_io` the loop device bypasses the host's
    page cache, so the filesystem under test caches alone (and a memory limit holds)."""
    image.parent.mkdir(parents=True, exist_ok=True)
    with open(image, "wb") as f:
        f.truncate(size)
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


def make_filesystem(fstype: str, device: Path, options: str, scratch: Path) -> None:
    res = proc.run_tool(
        [*MKFS[fstype], *options.split(), str(device)], scratch, f"mkfs-{fstype}", 600
    )
    if not res.ok:
        raise DeviceError(f"mkfs.{fstype} {options} refused {device}: {res.last_line()}")


def mount(fstype: str, device: Path, point: Path, options: str, scratch: Path) -> None:
    """Mount, or fail quoting the kernel: mount(8) only says "bad option", the kernel log
    says which (`xfs: Unknown parameter 'nobarrier'`)."""
    point.mkdir(parents=True, exist_ok=True)
    argv = ["mount", "-t", fstype] + (["-o", options] if options else [])
    before = _kernel_log(scratch)
    res = proc.run_tool([*argv, str(device), str(point)], scratch, "mount")
    if not res.ok:
        new = _kernel_log(scratch)[len(before) :]
        said = [line for line in new if fstype in line.lower() or device.name in line]
        kernel = f"; the kernel said: {' / '.join(said[-3:])}" if said else ""
        raise DeviceError(
            f"mounting {fstype} with {options or 'defaults'!r} failed: {res.last_line()}{kernel}"
        )


def _kernel_log(scratch: Path) -> list[str]:
    res = proc.run_tool(["dmesg", "--notime"], scratch, "dmesg")
    return res.stdout.splitlines() if res.ok else []


def is_mounted(point: Path) -> bool:
    target = str(point)
    return any(line.split()[4] == target
               for line in Path("/proc/self/mountinfo").read_text().splitlines())  # fmt: skip


def undo_entry(entry: dict[str, str], scratch: Path) -> str | None:
    """Take down one journaled mount or loop image; None when nothing was left to do.
    Raises OSError when it cannot (kept in the journal for another try)."""
    if "mount" in entry:
        point = Path(entry["mount"])
        if not is_mounted(point):
            return None
        res = proc.run_tool(["umount", str(point)], scratch, "umount")
        if not res.ok:
            res = proc.run_tool(["umount", "--lazy", str(point)], scratch, "umount-lazy")
        if not res.ok:
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
    fd = os.open(path, os.O_RDONLY)
    try:
        buf = fcntl.ioctl(fd, FS_IOC_GETFLAGS, struct.pack("l", 0))
    except OSError:
        return False
    finally:
        os.close(fd)
    return bool(struct.unpack("l", buf)[0] & FS_NOCOW_FL)
