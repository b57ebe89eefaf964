"""The undo journal: before pgsweep writes any kernel or sysfs file, the file's original
value is appended to a journal on disk and fsync'd; restoring writes the originals back,
newest change first, then deletes the journal. Restoring twice is harmless: the second
time finds no journal. A run's journal lives beside its registry entry
(`registry_dir()/RUN.undo`, RUN being "PID-STARTTIME"), so the next run, `pgsweep
cleanup` and `pgsweep restore` find and replay the journals of runs that died (kill -9),
once they hold the dead run's lock (see workarea).

Replay writes only files pgsweep may change (`ALLOWED`): a journal is data, and a damaged
or planted one must not make root write anywhere else. When a value cannot be put back,
the journal is rewritten to hold just what is still owed, and the file is not journaled
again: its original is the one already recorded, not the value pgsweep left in it."""

from __future__ import annotations

import fcntl
import json
import os
import re
import stat
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import PgsweepError
from . import safefs, workarea
from .workarea import registry_dir

if TYPE_CHECKING:
    from .api import Host

_SELECTED = re.compile(r"\[([^\]]+)\]")  # "always madvise [never]" -> never
# The kernel files and cgroup directories pgsweep changes, and nothing else.
# The sysctls an experiment may set: ones that shape performance, nothing that runs a
# program as root, weakens a protection, opens the network or can halt the machine.
SYSCTLS = re.compile(
    r"^(vm\.(swappiness|dirty_(ratio|background_ratio|bytes|background_bytes|expire_centisecs"
    r"|writeback_centisecs)|overcommit_(memory|ratio|kbytes)|vfs_cache_pressure"
    r"|zone_reclaim_mode|page-cluster|max_map_count|watermark_(scale|boost)_factor"
    r"|stat_interval|compaction_proactiveness|numa_stat)"
    r"|kernel\.(sched_(?!rt_)[a-z_]+|numa_balancing(_[a-z_]+)?|shm(max|all|mni)|sem"
    r"|msg(max|mnb|mni))"
    r"|fs\.(aio-max-nr|file-max|nr_open)"
    r"|net\.core\.(somaxconn|[rw]mem_(default|max)|netdev_max_backlog|busy_(poll|read))"
    r"|net\.ipv4\.tcp_([rw]?mem|fin_timeout|keepalive_(time|intvl|probes)|tw_reuse"
    r"|max_syn_backlog|slow_start_after_idle|autocorking|timestamps|sack|window_scaling"
    r"|no_metrics_save|notsent_lowat))$"
)
# The kernel files and cgroup directories pgsweep changes, and nothing else.
ALLOWED = re.compile(
    r"^(/sys/kernel/mm/transparent_hugepage/(enabled|defrag|shmem_enabled)"
    r"|/sys/kernel/mm/hugepages/hugepages-\d+kB/nr_hugepages"
    r"|/sys/(class/)?block/[A-Za-z0-9_.:-]+/queue/(scheduler|read_ahead_kb)"
    r"|/sys/fs/cgroup/memory/pgsweep-[0-9-]+)$"
)


# what the os layer writes in a memory cgroup of its own (the limit, and the counters it
# resets for each trial); the cgroup itself is journaled (ALLOWED), these go with it
CGROUP_FILES = re.compile(r"^/sys/fs/cgroup/memory/pgsweep-[0-9-]+/"
                          r"memory\.(limit_in_bytes|max_usage_in_bytes|failcnt)$")
TRIGGERS = ("/proc/sys/vm/drop_caches", "/proc/sys/vm/compact_memory")  # written, not set


def writable(path: str, cgroups: set[str]) -> bool:
    """What an agent writes in the kernel's files when asked (`write_kernel`): what a
    journal may set, a trigger, or a file of a memory cgroup it made (`cgroups`: not
    another run's); nothing else."""
    if "/../" in path or path.endswith("/.."):
        return False
    if CGROUP_FILES.fullmatch(path):
        return path.rsplit("/", 1)[0] in cgroups
    return allowed(path) or path in TRIGGERS


def allowed(path: str) -> bool:
    if "/../" in path or path.endswith("/.."):
        return False
    if path.startswith("/proc/sys/"):
        return SYSCTLS.fullmatch(path.removeprefix("/proc/sys/").replace("/", ".")) is not None
    return ALLOWED.fullmatch(path) is not None


def read_setting(path: Path) -> str:
    """A kernel file's current value: the bracketed choice of a menu file (THP, scheduler),
    otherwise the text without its newline."""
    text = path.read_text().strip()
    m = _SELECTED.search(text)
    return m.group(1) if m else text


class UndoJournal:
    """A run's undo journal on one host: every change is written here (on disk) before it
    is made, through the host that makes it."""

    def __init__(self, path: Path, work_root: Path | None, host: Host) -> None:
        self.path = path
        self.work_root = work_root  # mounts and images may only be in this work area
        self.host = host
        self._recorded: set[str] = set()

    @classmethod
    def for_this_run(cls, host: Host, part: str = "",
                     work_root: Path | None = None) -> UndoJournal:  # fmt: skip
        """The journal of this run; `part` keeps a resource's journal apart ("storage-3":
        its mounts go when that storage is taken down, after the kernel values)."""
        suffix = f".{part}" if part else ""
        return cls(workarea.registry() / f"{workarea.this_run()}{suffix}.undo", work_root, host)

    def set(self, path: Path, value: str) -> None:
        """Write `value` to the kernel file `path`, journaling its original first (once per
        file per run: the original is what was there before pgsweep touched it)."""
        key = str(path)
        if not allowed(key):
            raise OSError(f"pgsweep does not change {path}")
        if key not in self._recorded:
            self._append({"file": key, "original": self.host.read_setting(path)})
            self._recorded.add(key)
        self.host.write_kernel(path, value)

    def made_dir(self, path: Path) -> None:
        """Journal a directory pgsweep creates in a kernel filesystem (a cgroup): restoring
        removes it, once its processes are gone."""
        if not allowed(str(path)):
            raise OSError(f"pgsweep does not make {path}")
        self._append({"dir": str(path)})
        self.host.make_kernel_dir(path)

    def record(self, entry: dict[str, str]) -> None:
        """Journal something about to be made outside kernel files: {"mount": point},
        {"loop_image": file}, {"zpool": name}, {"zfs_daemon": pidfile}, {"netns": name,
        "link": host interface}."""
        self._append(entry)

    def _append(self, entry: dict[str, str]) -> None:
        """On disk before the change it describes is made (file and directory fsync'd)."""
        self.host.append_journal(self.path, json.dumps(entry))

    def discard(self) -> None:
        """Forget the journal: what it recorded was put back by other means (a remote
        host's agent undoes its host as it exits)."""
        self.path.unlink(missing_ok=True)
        self._recorded.clear()

    def restore(self) -> list[str]:
        done, owed = self.host.restore_journal(self.path, self.work_root)
        self._recorded &= owed  # still owed: their recorded originals stand
        return done


def _undo_order(lines: list[str]) -> list[dict[str, str]]:
    """Entries newest first; for a file journaled more than once (an older pgsweep, or a
    retry), the oldest original is the one to put back."""
    entries = []
    for line in lines:
        try:
            entries.append(json.loads(line))
        except ValueError:
            continue  # a line cut by a crash mid-write: its change was never made
    first: dict[str, dict[str, str]] = {}
    for e in entries:
        if "file" in e:
            first.setdefault(e["file"], e)
    out, seen = [], set()
    for e in reversed(entries):
        if "file" in e:
            if e["file"] in seen:
                continue
            seen.add(e["file"])
            e = first[e["file"]]
        out.append(e)
    return out


def restore_journal(journal: Path, work_root: Path | None,
                    host: Host) -> tuple[list[str], set[str]]:  # fmt: skip
    """Write back every original, newest first, on this machine (`host`: this machine's
    Host, which the standbys' network is taken down through). Returns what was done (and
    what failed), and the files still owed. The journal is removed once nothing is owed;
    otherwise it is rewritten to hold only what is still owed, for another try."""
    try:
        lines = journal.read_text().splitlines()
    except FileNotFoundError:
        return [], set()
    done, failed, kept = [], [], []
    for entry in _undo_order(lines):
        try:
            what = _undo(entry, work_root, host)
        except OSError as exc:
            failed.append(f"could not undo {json.dumps(entry)}: {exc}")
            kept.append(entry)
            continue
        if what:
            done.append(what)
    if kept:
        text = "".join(json.dumps(e) + "\n" for e in reversed(kept))
        safefs.write_file(journal, text)
    else:
        journal.unlink(missing_ok=True)
    return done + failed, {e["file"] for e in kept if "file" in e}


def _undo(entry: dict[str, str], work_root: Path | None, host: Host) -> str | None:
    if "file" in entry:
        target = Path(entry["file"])
        if not allowed(entry["file"]):
            raise OSError("not a file pgsweep changes; the journal entry is refused")
        if read_setting(target) == entry["original"]:
            return None
        target.write_text(entry["original"])
        return f"restored {target} = {entry['original']}"
    if "dir" in entry:
        if not allowed(entry["dir"]):
            raise OSError("not a directory pgsweep makes; the journal entry is refused")
        try:
            Path(entry["dir"]).rmdir()  # fails while processes are inside: kept for later
        except FileNotFoundError:
            return None
        return f"removed {entry['dir']}"
    return _undo_made(entry, work_root, host)


def _undo_made(entry: dict[str, str], work_root: Path | None, host: Host) -> str | None:
    """Mounts, loop images, pools and daemons (storage layer) and the standbys' network
    (replication layer) are taken down by the modules that make them."""
    from . import blockdev, netns, zfsfuse

    if "remote_host" in entry:  # ask that host's pgsweep to put it back
        from .remote import RemoteHost, Target

        host = RemoteHost(Target.from_entry(entry["remote_host"], entry)).open()
        try:
            lines = host.call("restore")
        finally:
            host.close()
        return f"host {entry['remote_host']}: " + ("; ".join(lines) or "nothing left to do")
    with tempfile.TemporaryDirectory(prefix="pgsweep-undo-") as scratch:
        if "netns" in entry:
            return netns.undo_entry(entry, Path(scratch), host)
        if "zpool" in entry or "zfs_daemon" in entry:
            return zfsfuse.undo_entry(entry, Path(scratch), work_root)
        return blockdev.undo_entry(entry, Path(scratch), work_root)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def recover_stale(host: Host) -> tuple[list[str], list[str]]:
    """After kill -9, for each dead run of this machine (`host`: its Host; holding the
    run's lock meanwhile): stop its servers, put back its kernel values, take down its
    storage, then remove its work area (the mounts live inside it). Returns what was done
    and what could not be put back."""
    done: list[str] = []
    failed: list[str] = []
    directory = registry_dir()
    for run in workarea.stale_runs():  # (stale_runs refuses a registry others can change)
        with workarea.dead_run(run) as dead:
            if not dead:
                continue
            done += workarea.stop_stale_servers(run)
            owed = False
            root = workarea.work_root(run)
            # kernel values, then the standbys' network ("replication"), then storage
            journals = [directory / f"{run}.undo", *sorted(directory.glob(f"{run}.*.undo"))]
            for journal in journals:
                lines, still = restore_journal(journal, root, host)
                done += [line for line in lines if not line.startswith("could not")]
                failed += [line for line in lines if line.startswith("could not")]
                owed = owed or bool(still) or journal.exists()
            kept = workarea.cleanup_stale(run)
            done += [line for line in kept if not line.startswith("kept")]
            failed += [line for line in kept if line.startswith("kept")]
            if not owed and not (directory / f"{run}.json").exists():
                workarea.forget_lock(run)
    return done, failed


# Root's alone (/run is root's, 0755): no other user can make, hold or link this file.
KERNEL_LOCK = Path("/run/pgsweep-kernel.lock")
_kernel_lock: list[int] = []  # the descriptor, held until this process exits


def hold_kernel_lock(who: str) -> None:
    """One live run at a time changes kernel values: two would each record the other's
    value as the original and put it back, leaving the machine changed. Held from before
    anything is changed until the process exits (kill -9 too: the next run or `pgsweep
    restore` replays the dead run's journal). PgsweepError (exit 2) when another run holds
    it; `who` (PID and results folder) is what that error names for the next one."""
    if _kernel_lock:
        return
    fd = os.open(KERNEL_LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    st = os.fstat(fd)
    if st.st_uid != 0 or not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise PgsweepError(f"{KERNEL_LOCK} is not root's own file", where=str(KERNEL_LOCK),
                           fix="remove it (nothing of pgsweep's is held there)")  # fmt: skip
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 400).decode(errors="replace").strip() or "its PID unknown"
        os.close(fd)
        raise PgsweepError(
            f"another pgsweep run ({holder}) is changing kernel settings on this machine "
            "([os]: THP, sysctl, I/O scheduler, read-ahead, huge pages, memory cgroup); two "
            "such runs would each put back the other's values", where=str(KERNEL_LOCK),
            fix="wait for it to finish, or stop it (Ctrl-C, or kill PID: it puts the "
            "machine back), then run again; runs without [os] may run beside it",
        ) from None  # fmt: skip
    os.ftruncate(fd, 0)
    os.write(fd, who.encode())
    _kernel_lock.append(fd)
