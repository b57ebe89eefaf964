"""Where a run keeps its clusters and sockets, and the registry that lets `pgsweep cleanup`
find what a killed run left behind. Only directories pgsweep created and registered are
ever removed, and only postmasters whose data directory lies inside them are stopped."""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from .proc import RunAs

MARKER = ".pgsweep-workarea"


def registry_dir() -> Path:
    base = os.environ.get("PGSWEEP_STATE_DIR")
    if base:
        return Path(base)
    if os.geteuid() == 0:
        return Path("/var/lib/pgsweep/runs")
    state = os.environ.get("XDG_STATE_HOME", str(Path.home() / ".local" / "state"))
    return Path(state) / "pgsweep" / "runs"


def traversable_by(path: Path, user: RunAs | None) -> bool:
    """Can `user` reach `path` (execute permission on every ancestor)?"""
    if user is None:
        return True
    groups = {user.gid}
    for part in [path, *path.parents]:
        try:
            st = part.stat()
        except FileNotFoundError:
            continue
        if st.st_uid == user.uid:
            ok = st.st_mode & stat.S_IXUSR
        elif st.st_gid in groups:
            ok = st.st_mode & stat.S_IXGRP
        else:
            ok = st.st_mode & stat.S_IXOTH
        if not ok:
            return False
    return True


@dataclass
class WorkArea:
    workdir: Path  # clusters and snapshots
    socket_root: Path  # short path under /tmp: Unix socket paths are limited to 107 bytes
    results: Path
    pid: int
    note: str = ""

    @property
    def entry(self) -> Path:
        return registry_dir() / f"{self.pid}.json"

    @classmethod
    def create(cls, results: Path, user: RunAs | None) -> WorkArea:
        workdir, note = results / "work", ""
        if not traversable_by(results.resolve(), user):
            workdir = Path(tempfile.mkdtemp(prefix=f"pgsweep-work-{results.name}-", dir="/var/tmp"))
            note = (
                f"the server user {user.name if user else ''} cannot reach {results}; "
                f"clusters live in {workdir} instead"
            )
        workdir.mkdir(parents=True, exist_ok=True)
        socket_root = Path(tempfile.mkdtemp(prefix="pgsweep-", dir="/tmp"))
        area = cls(workdir.resolve(), socket_root, results.resolve(), os.getpid(), note)
        for d in (area.workdir, area.socket_root):
            (d / MARKER).write_text(str(area.pid))
            if user:
                os.chown(d, user.uid, user.gid)
        area.entry.parent.mkdir(parents=True, exist_ok=True)
        tmp = area.entry.with_suffix(".tmp")
        tmp.write_text(json.dumps({k: str(v) for k, v in asdict(area).items()}))
        tmp.replace(area.entry)
        return area

    def remove(self) -> list[str]:
        """Stop every postmaster under the work area, remove it, drop the registry entry.
        A work area with a filesystem still mounted inside is kept (and its entry, so the
        next `pgsweep restore` tries again): deleting through the mount would also delete
        the loop image under it."""
        done = stop_postmasters_under(self.workdir)
        inside = str(self.workdir).rstrip("/") + "/"
        mounted = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()
                   if line.split()[4].startswith(inside)]  # fmt: skip
        if mounted:
            return [*done, f"kept {self.workdir}: {', '.join(mounted)} still mounted"]
        for d in (self.workdir, self.socket_root):
            if (d / MARKER).exists():
                shutil.rmtree(d, ignore_errors=True)
                done.append(f"removed {d}")
        self.entry.unlink(missing_ok=True)
        return done


def stop_postmasters_under(root: Path) -> list[str]:
    """SIGQUIT (immediate shutdown) each postmaster whose postmaster.pid lies under root
    and whose command line names that data directory: never a process we did not start."""
    done = []
    for pidfile in root.glob("**/postmaster.pid"):
        datadir = pidfile.parent
        try:
            pid = int(pidfile.read_text().split("\n", 1)[0])
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except (OSError, ValueError):
            continue
        if str(datadir).encode() not in cmdline:
            continue
        os.kill(pid, signal.SIGQUIT)
        for _ in range(100):
            if not Path(f"/proc/{pid}").exists():
                break
            time.sleep(0.05)
        done.append(f"stopped postmaster {pid} of {datadir}")
    return done


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _stale_areas() -> list[WorkArea]:
    """Registry entries of runs that are no longer alive (after kill -9 or a crash)."""
    directory = registry_dir()
    if not directory.is_dir():
        return []
    out = []
    for entry in sorted(directory.glob("*.json")):
        try:
            data = json.loads(entry.read_text())
        except (OSError, ValueError):
            continue
        if alive(int(data["pid"])):
            continue
        area = WorkArea(
            Path(data["workdir"]),
            Path(data["socket_root"]),
            Path(data["results"]),
            int(data["pid"]),
        )
        out.append(area)
    return out


def stop_stale_servers() -> list[str]:
    """Stop the servers of dead runs (they hold mounts, huge pages and cgroups)."""
    return [line for area in _stale_areas() for line in stop_postmasters_under(area.workdir)]


def cleanup_stale() -> list[str]:
    """Remove the work areas of runs that are no longer alive."""
    done: list[str] = []
    for area in _stale_areas():
        done += area.remove()  # drops the registry entry, unless a mount kept the area
    return done
