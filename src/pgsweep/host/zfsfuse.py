"""ZFS for the storage layer, through zfs-fuse (no kernel module can load here; kernel ZFS
is not supported yet). pgsweep starts its own daemon with the FUSE page cache off, so the
ARC alone caches and `primarycache` means what it says, and creates a pool on the layer's
device (the storage layer journals both before they exist, through its host): `undo_entry`
destroys the pool and stops the daemon, also for runs that died. A host (host/local.py)
calls these on its own machine."""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

from ..core import Value
from ..errors import PgsweepError
from ..units import parse_size
from . import proc, safefs

# the dataset properties pgsweep sets at creation and reads back (`zfs get`)
PROPERTIES = ("recordsize", "primarycache", "secondarycache", "compression", "logbias", "atime")


class ZfsError(Exception):
    """zfs-fuse refused something; the message quotes it."""


def running_daemons() -> list[int]:
    pids = []
    for comm in Path("/proc").glob("[0-9]*/comm"):
        try:
            pid = int(comm.parent.name)
            if comm.read_text().strip() == "zfs-fuse" and not proc.gone(pid):
                pids.append(pid)  # a zombie (exited, not yet collected) runs no more
        except OSError:
            continue
    return pids


def check_host() -> None:
    """pgsweep runs its own daemon; it never shares or stops one it did not start. With the
    kernel module loaded, zpool and zfs would talk to kernel ZFS, which pgsweep does not
    drive yet: refuse rather than create pools it does not track."""
    if Path("/sys/module/zfs").exists():
        raise PgsweepError(
            "kernel ZFS is loaded; pgsweep drives ZFS through zfs-fuse only (so far)",
            fix="run ZFS experiments on a machine without the zfs module, or use another "
            "filesystem",
        )
    running = running_daemons()
    if running:
        raise PgsweepError(
            f"a zfs-fuse daemon pgsweep did not start is running (PID {running[0]})",
            fix="stop it first (pgsweep starts its own, with the page cache off), or run "
            "`pgsweep restore` if a killed pgsweep run left it",
        )


def create_pool(name: str, device: Path, point: Path, values: dict[str, Value],
                scratch: Path) -> None:  # fmt: skip
    """Start pgsweep's own daemon (its pid file in `scratch`) and create pool `name` on
    `device`, mounted at `point`. Both are journaled before this is called: the daemon as
    {"zfs_daemon": scratch/zfs-fuse.pid}, the pool by its name."""
    argv = ["zfs-fuse", "--pidfile", str(scratch / "zfs-fuse.pid"), "--no-kstat-mount",
            "--disable-page-cache"]  # fmt: skip
    if values.get("zfs.arc_max") is not None:
        argv += ["-m", str(parse_size(values["zfs.arc_max"]) // 1024**2)]
    res = proc.run_tool(argv, scratch, "zfs-fuse")
    if not res.ok:
        raise ZfsError(f"zfs-fuse did not start: {res.last_line()}")
    for _ in range(100):  # the daemon answers once its socket is up
        if proc.run_tool(["zpool", "list"], scratch, "zpool-list", 10).ok:
            break
        time.sleep(0.1)
    # cachefile=none: no zpool.cache outside the run remembers the pool, whatever happens
    argv = ["zpool", "create", "-f", "-o", "cachefile=none", "-m", str(point)]
    if values.get("zfs.ashift") is not None:
        argv += ["-o", f"ashift={values['zfs.ashift']}"]
    res = proc.run_tool([*argv, name, str(device)], scratch, f"zpool-create-{name}")
    if not res.ok:
        raise ZfsError(f"zpool create failed: {res.last_line()}")
    _import_dir(name, scratch).mkdir(mode=0o700)  # the pool's one device, for drop_arc
    (_import_dir(name, scratch) / device.name).symlink_to(os.path.realpath(device))
    set_properties(name, {k[4:]: str(v) for k, v in values.items()
                          if k[4:] in PROPERTIES and v is not None}, scratch)  # fmt: skip
    safefs.own_root(point)  # the pool's root: root's, 0711 (the server user passes through)


def set_properties(name: str, props: dict[str, str], scratch: Path) -> None:
    for key, value in props.items():
        res = proc.run_tool(["zfs", "set", f"{key}={value}", name], scratch, "zfs-set")
        if not res.ok:
            raise ZfsError(f"zfs set {key}={value} {name} failed: {res.last_line()}")


def _import_dir(name: str, scratch: Path) -> Path:
    """Root's folder in the run's private scratch holding a link to the pool's device
    alone: `zpool import -d` reads that one device's label, never every device in /dev
    (other runs' and other users' among them)."""
    return scratch / f"zpool-{name}"


def drop_arc(name: str, scratch: Path) -> None:
    """Export and import the pool: exporting evicts the pool's buffers from the ARC
    (measured here: a 150 MB re-read took 0.19 s from the ARC, 0.45 s after this)."""
    for argv in (
        ["zpool", "export", name],
        ["zpool", "import", "-o", "cachefile=none", "-d", str(_import_dir(name, scratch)), name],
    ):
        # "pool is busy" right after the server stopped: for more than 10 s once, on a
        # loaded CI machine (zfs-fuse is a process like the others there)
        for _ in range(BUSY_TRIES):
            res = proc.run_tool(argv, scratch, argv[1])
            if res.ok:
                break
            time.sleep(1)
        else:
            raise ZfsError(f"{' '.join(argv)} failed for {BUSY_TRIES} s: {res.last_line()}")


def properties(name: str, scratch: Path) -> dict[str, str]:
    argv = ["zfs", "get", "-H", "-o", "property,value", ",".join(PROPERTIES), name]
    res = proc.run_tool(argv, scratch, "zfs-get")
    return dict(line.split("\t", 1) for line in res.stdout.splitlines() if "\t" in line)


OUR_POOL = re.compile(r"pgsweep\d+n\d+")  # the names pgsweep gives its pools
BUSY_TRIES = 30  # "pool is busy": tries a second apart
DESTROY_TRIES = 90  # the end of a run, or `pgsweep restore`: no trial waits


def _mountpoint(name: str, scratch: Path) -> Path | None:
    argv = ["zfs", "get", "-H", "-o", "value", "mountpoint", name]
    res = proc.run_tool(argv, scratch, "zfs-get-mountpoint")
    value = res.stdout.strip()
    return Path(value) if res.ok and value.startswith("/") else None


def _holders(point: Path | None) -> str:
    """Who keeps a pool busy, for the error: the processes using its mount point."""
    from .areaprocs import describe, users_of

    pids = users_of(point, None) if point is not None else []
    if not pids:
        return ""
    return f"; in use under {point} by " + ", ".join(describe(pid) for pid in pids)


def _pool_listed(name: str, scratch: Path) -> bool:
    """Is the pool there? A daemon that was busy when its parent was killed can fail a
    `zpool list` for a moment (seen once in CI): ask a few times before calling it gone."""
    for attempt in range(5):
        if proc.run_tool(["zpool", "list", name], scratch, "zpool-list").ok:
            return True
        time.sleep(0.5 * (attempt + 1))
    return False


def undo_entry(entry: dict[str, str], scratch: Path, root: Path | None) -> str | None:
    """Destroy a journaled pool (the daemon must still run), or stop a journaled daemon.
    Raises OSError when it cannot, so the journal keeps the entry. A journal is data: only
    pools named as pgsweep names them, and pid files inside the run's work area."""
    from .blockdev import in_work_area

    if "zpool" in entry:
        name = entry["zpool"]
        if not OUR_POOL.fullmatch(name):
            raise OSError(f"{name} is not a pool pgsweep makes; the journal entry is refused")
        if not running_daemons() or not _pool_listed(name, scratch):
            return None
        # "pool is busy" right after the server stopped: more than 10 s beside two busy
        # loops and the suite (stop 41), 30 s once in CI (stop 42)
        began = time.monotonic()
        for _ in range(DESTROY_TRIES):
            res = proc.run_tool(["zpool", "destroy", "-f", name], scratch, "zpool-destroy")
            if res.ok:
                busy = time.monotonic() - began
                return f"destroyed pool {name}" + (f" (busy for {busy:.0f} s)" if busy > 1 else "")
            time.sleep(1)
        raise OSError(f"zpool destroy {name} failed for {DESTROY_TRIES} s: {res.last_line()}"
                      + _holders(_mountpoint(name, scratch)))  # fmt: skip
    pidfile = Path(entry["zfs_daemon"])
    if not in_work_area(pidfile, root):
        raise OSError(f"{pidfile} is not inside the run's work area; the entry is refused")
    try:
        pid = int(pidfile.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    if pid not in running_daemons():
        return None
    # pools of ours the daemon still holds go first, whatever order the journal gave
    # (a pool entry can find the daemon too busy to answer right after a kill -9)
    res = proc.run_tool(["zpool", "list", "-H", "-o", "name"], scratch, "zpool-list-all", 30)
    mine = [n for n in res.stdout.split() if OUR_POOL.fullmatch(n)] if res.ok else []
    destroy = ["zpool", "destroy", "-f"]
    done = [f"destroyed pool {n}" for n in mine
            if proc.run_tool([*destroy, n], scratch, "zpool-destroy").ok]  # fmt: skip
    os.kill(pid, signal.SIGTERM)
    for _ in range(300):  # zfs-fuse takes 5-15 s to exit
        proc.reap(pid)  # our child when this run started it (pgsweep is a subreaper)
        if proc.gone(pid):
            proc.reap(pid)  # it may have exited after the first reap
            break
        time.sleep(0.1)
    else:
        os.kill(pid, signal.SIGKILL)
    for _ in range(50):
        proc.reap(pid)
        if proc.gone(pid):
            break
        time.sleep(0.1)
    pidfile.unlink(missing_ok=True)
    return "; ".join([*done, f"stopped zfs-fuse {pid}"])
