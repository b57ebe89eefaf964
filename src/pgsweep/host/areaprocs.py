"""The processes a work area holds: the postmasters pgsweep started under it (found by the
-D their command line names) and any process of the server user that uses a file under it,
and stopping them by PID (never a process pgsweep did not start: the caller names whose)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from .proc import gone, reap


def postmasters_under(root: Path, uid: int) -> list[int]:
    """Postmasters run by `uid` whose command line names a directory under `root` with -D
    (pg_ctl starts them so): never a process pgsweep did not start, nor the `postgres -C
    data_directory -D DIR` pg_ctl runs for a moment before it starts or stops one."""
    inside = str(root).rstrip("/") + "/"
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            owner = entry.stat().st_uid
        except OSError:
            continue
        if owner != uid or b"-D" not in argv or b"-C" in argv or not argv[0].endswith(b"postgres"):
            continue
        datadir = argv[argv.index(b"-D") + 1].decode(errors="replace")
        if datadir.startswith(inside):
            found.append(int(entry.name))
    return found


def users_of(root: Path, uid: int | None) -> list[int]:
    """Processes of `uid` (None: of anyone) that use anything under `root`: working
    directory, root, program, open files or mappings. They keep filesystems busy and must
    go before they are unmounted (the server user could start one to hold a run's
    storage)."""
    inside = str(Path(os.path.realpath(root))).rstrip("/") + "/"
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if uid is not None and entry.stat().st_uid != uid:
                continue
            links = [entry / "cwd", entry / "root", entry / "exe",
                     *(entry / "fd").iterdir()]  # fmt: skip
            targets = [os.readlink(link) for link in links if link.is_symlink()]
            maps = (entry / "maps").read_text().splitlines()
            targets += [line.split(maxsplit=5)[-1] for line in maps if line.count(" ") >= 5]
        except OSError:
            continue
        if any(t.startswith(inside) or t == inside[:-1] for t in targets):  # or root itself
            found.append(int(entry.name))
    return found


def describe(pid: int) -> str:
    """`1234 (postgres, uid 999)`, or the bare PID when the process has gone."""
    try:
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
        return f"{pid} ({comm}, uid {Path(f'/proc/{pid}').stat().st_uid})"
    except OSError:
        return str(pid)


def _signal_and_wait(pid: int, sig: int, seconds: float) -> bool:
    """Send `sig` and wait up to `seconds` until the process is gone (reaped if ours);
    False when it was already gone."""
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        reap(pid)
        if gone(pid):
            break
        time.sleep(0.02)
    return True


def kill(pids: list[int], why: str) -> list[str]:
    """SIGKILL these processes (the caller found them ours) and wait until they are gone."""
    return [f"killed process {pid} ({why})" for pid in pids
            if _signal_and_wait(pid, signal.SIGKILL, 2)]  # fmt: skip


def stop_postmasters_under(root: Path, uid: int) -> list[str]:
    """SIGQUIT (immediate shutdown) each postmaster `postmasters_under` finds."""
    return [f"stopped postmaster {pid} under {root}" for pid in postmasters_under(root, uid)
            if _signal_and_wait(pid, signal.SIGQUIT, 10)]  # fmt: skip


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
