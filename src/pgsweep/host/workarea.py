"""Where a run keeps its clusters and sockets, and the registry that lets `pgsweep cleanup`
find what a killed run left behind.

A run is known by its PID and its start time (a PID alone can be reused), and holds an
exclusive lock on its registry entry for as long as it lives: another pgsweep can tell a
dead run from a live one by trying the lock, and the one that gets it cleans up while it
holds it, so two cleanups never replay one journal twice. Work areas are directories
pgsweep makes fresh (never one that existed), root-owned; only directories pgsweep
created and registered are ever removed, and only postmasters that the run's server user
started from inside them are stopped."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from ..errors import PgsweepError
from . import entries, mounts, safefs
from .areaprocs import alive, kill, stop_postmasters_under, users_of
from .proc import RunAs

MARKER = ".pgsweep-workarea"
_held: dict[str, int] = {}  # run id -> descriptor of the lock this process holds


def registry_dir() -> Path:
    base = os.environ.get("PGSWEEP_STATE_DIR")
    if base:
        return Path(base)
    if os.geteuid() == 0:
        return Path("/var/lib/pgsweep/runs")
    state = os.environ.get("XDG_STATE_HOME", str(Path.home() / ".local" / "state"))
    return Path(state) / "pgsweep" / "runs"


def registry() -> Path:
    """The registry folder, made if missing (0700), refused when another user could change
    it or anything on its path: root replays what it finds there."""
    directory = registry_dir()
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise PgsweepError(
            f"cannot make the registry of runs {directory}: {exc.strerror}",
            fix="set PGSWEEP_STATE_DIR (or XDG_STATE_HOME) to a folder of yours",
        ) from exc
    return safefs.trusted_dir(directory, "the registry of runs (PGSWEEP_STATE_DIR)")


def _start_time(pid: int) -> str:
    """The process's start time in clock ticks since boot (/proc/PID/stat field 22)."""
    text = Path(f"/proc/{pid}/stat").read_text()
    return text.rsplit(")", 1)[1].split()[19]


def this_run() -> str:
    """This process's run id ("PID-STARTTIME"), with its lock taken for its lifetime."""
    run = f"{os.getpid()}-{_start_time(os.getpid())}"
    if run not in _held:
        directory = registry()
        fd = os.open(directory / f"{run}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        _held[run] = fd
    return run


@contextmanager
def dead_run(run: str) -> Iterator[bool]:
    """True (holding its lock meanwhile) when the run `run` is dead; False when it lives.
    Entries of older pgsweep versions (a bare PID, no lock) are judged by the PID alone."""
    if run in _held:
        yield False
        return
    if "-" not in run:
        yield run.isdigit() and not alive(int(run))
        return
    try:
        fd = os.open(registry_dir() / f"{run}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW,
                     0o600)  # fmt: skip
    except OSError:
        yield False
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        yield False
        return
    try:
        yield True
    finally:
        os.close(fd)


def forget_lock(run: str) -> None:
    """Remove a run's lock file once nothing of it is left (held by the caller)."""
    (registry_dir() / f"{run}.lock").unlink(missing_ok=True)
    fd = _held.pop(run, None)
    if fd is not None:
        os.close(fd)


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


def work_base(results: Path, user: RunAs | None) -> Path:
    """Where a run's work area will be made: in the results folder when the server user
    can reach it (a private results folder of this user's counts: `WorkArea.create`
    opens it to 0711 meanwhile), else under the fallback base."""
    probe = results
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if traversable_by(probe.resolve(), user) or (
        probe == results and _private(results) and traversable_by(results.parent, user)
    ):
        return results
    return fallback_base()


def _private(folder: Path) -> bool:
    st = os.lstat(folder)
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o077


def _set_mode(folder: Path, mode: int) -> None:
    """chmod through a descriptor opened without following a link."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | safefs.NOFOLLOW)
    try:
        os.fchmod(fd, mode)
    finally:
        os.close(fd)


_bases: dict[str, Path] = {}  # the fallback base as written -> checked and resolved, once


def fallback_base() -> Path:
    """/var/tmp, or $PGSWEEP_WORK_BASE (e.g. a faster disk, or a tmpfs for tests of
    mechanics): a directory only root (or you) can change, or a sticky one like /var/tmp,
    where the work area is made fresh (mkdtemp) and nobody can move it. Checked and
    resolved once per process, and that resolved path is used from then on (resolving
    again could follow a link changed meanwhile); PGSWEEP_WORK_BASE may hold no link."""
    text = os.environ.get("PGSWEEP_WORK_BASE", "/var/tmp")
    if text in _bases:
        return _bases[text]
    base = Path(text)
    real = Path(os.path.realpath(base))
    if not base.is_absolute() or not real.is_dir():
        why: str | None = "not an absolute directory path"
    elif "PGSWEEP_WORK_BASE" in os.environ and real != Path(os.path.normpath(base)):
        why = f"it goes through a symbolic link (to {real}); name the directory itself"
    else:
        why = safefs.untrusted_link(base) or safefs.untrusted_component(real / "work-area")
    if why:
        raise PgsweepError(f"PGSWEEP_WORK_BASE={text}: {why}",
                           fix="name a directory root owns (or a sticky one such as /var/tmp), "
                           "or unset PGSWEEP_WORK_BASE")  # fmt: skip
    _bases[text] = real
    return real


def run_tag(results: Path) -> str:
    """Six hex digits of the results folder's path: in the names of its run's socket folder
    and of a work area outside it, so they say whose they are (and tests can tell theirs
    from a concurrent test's)."""
    return hashlib.sha256(os.path.realpath(results).encode()).hexdigest()[:6]


@dataclass
class WorkArea:
    workdir: Path  # clusters, trials, storage: root-owned 0711
    socket_root: Path  # short path under /tmp: Unix socket paths are limited to 107 bytes
    results: Path
    run: str
    server_uid: int
    note: str = ""
    opened: bool = False  # the private results folder was opened to 0711 for the server user

    @property
    def private(self) -> Path:
        """Root's own corner (0700): command output, loop images, pid files."""
        return self.workdir / "private"

    @property
    def entry(self) -> Path:
        return registry_dir() / f"{self.run}.json"

    @classmethod
    def create(cls, results: Path, user: RunAs | None) -> WorkArea:
        """A fresh work area (never one that existed before this run) and its entry."""
        base, note = work_base(results, user), ""
        if base != results:
            note = (f"the server user {user.name if user else ''} cannot reach {results}; "
                    f"its clusters live under {base} instead")  # fmt: skip
        tag = run_tag(results)  # the folder's own: two runs' areas never share a name
        prefix = ".pgsweep-work-" if base == results else f"pgsweep-work-{results.name}-{tag}-"
        opened = base == results and not traversable_by(results, user)
        if opened:  # others pass through to the work area; listing and reading stay closed
            _set_mode(results, 0o711)
        return cls._make(base, prefix, results, user, note, opened)

    @classmethod
    def for_agent(cls, name: str, user: RunAs | None) -> WorkArea:
        """A remote host's work area for the run called `name` on the controller: under the
        fallback base (a remote host holds no results folder), registered like a run's."""
        base = fallback_base()
        return cls._make(base, f"pgsweep-work-{name}-", base, user, "", False, name)

    @classmethod
    def _make(cls, base: Path, prefix: str, results: Path, user: RunAs | None, note: str,
              opened: bool, tag: str | None = None) -> WorkArea:  # fmt: skip
        workdir = Path(tempfile.mkdtemp(prefix=prefix, dir=base)).resolve()
        tag = tag or run_tag(results)
        socket_root = Path(tempfile.mkdtemp(prefix=f"pgsweep-{tag}-", dir="/tmp"))
        area = cls(workdir, socket_root, results.resolve(), this_run(),
                   safefs.owner_ids(user)[0], note, opened)  # fmt: skip
        for d in (workdir, socket_root):
            safefs.write_file(d / MARKER, area.run)
            os.chmod(d, 0o711)  # the server user passes through to its leaves, no more
        safefs.private_dir(area.private)
        safefs.write_file(area.entry, json.dumps({k: str(v) for k, v in asdict(area).items()}))
        return area

    def stop_servers(self) -> list[str]:
        """Stop every postmaster under the work area, then the server user's processes in it."""
        done = stop_postmasters_under(self.workdir, self.server_uid)
        return done + kill(users_of(self.workdir, self.server_uid),
                           "the server user's, in the work area")  # fmt: skip

    def remove(self) -> list[str]:
        """Stop every postmaster under the work area, remove it, drop the registry entry.
        A work area with a filesystem still mounted inside is kept (and its entry, so the
        next `pgsweep restore` tries again): deleting through the mount would also delete
        the loop image under it."""
        done = self.stop_servers()
        mounted = mounts.mounted_under(self.workdir)
        if mounted:
            return [*done, f"kept {self.workdir}: {', '.join(mounted)} still mounted"]
        for d in (self.workdir, self.socket_root):
            if entries.holds_marker(d, self.run, MARKER):  # this run's, nothing else
                _remove_marked(d)
                done.append(f"removed {d}")
        if self.opened:  # private again, now that nothing of the server user's is inside
            with contextlib.suppress(FileNotFoundError):
                _set_mode(self.results, 0o700)
        self.entry.unlink(missing_ok=True)
        return done


def _remove_marked(d: Path) -> None:
    """Everything in a work area first, the marker last: a removal cut short leaves a
    marked work area that the next cleanup finds again, never an unmarked one it skips."""
    for child in list(d.iterdir()):
        if child.name != MARKER:
            if child.is_dir() and not child.is_symlink():
                safefs.remove_tree(child)
            else:
                child.unlink()
    (d / MARKER).unlink()
    d.rmdir()


def _entry(path: Path) -> WorkArea | None:
    """The work area a registry entry names, once it passed the journal's rules
    (host/entries.py); None when there is none, or it is refused (`refused` says why)."""
    return _checked(path)[0]


def _checked(path: Path) -> tuple[WorkArea | None, str]:
    data, why = entries.read(path, MARKER)
    if data is None:
        return None, why
    return WorkArea(Path(data["workdir"]), Path(data["socket_root"]), Path(data["results"]),
                    data["run"], int(data["server_uid"]), opened=data.get("opened") == "True"), ""


def stale_runs() -> list[str]:
    """Run ids with a registry entry, journal or lock, newest last."""
    if not registry_dir().is_dir():
        return []
    directory = registry()
    runs = {p.name.split(".", 1)[0] for p in directory.iterdir() if not p.name.startswith(".")}
    return sorted(r for r in runs if r not in _held and entries.run_ok(r))


def stop_stale_servers(run: str) -> list[str]:
    """Stop the servers of a dead run (they hold mounts, huge pages and cgroups), and every
    other process of its server user that uses its work area."""
    area = _entry(registry_dir() / f"{run}.json")
    if area is None:
        return []
    done = stop_postmasters_under(area.workdir, area.server_uid)
    return done + kill(users_of(area.workdir, area.server_uid), "in a dead run's work area")


def work_root(run: str) -> Path | None:
    """The work area a run registered: its journals may touch nothing outside it."""
    area = _entry(registry_dir() / f"{run}.json")
    return area.workdir if area else None


def cleanup_stale(run: str) -> list[str]:
    """Remove the work area of a dead run; an entry refused is kept and said so."""
    area, why = _checked(registry_dir() / f"{run}.json")
    if why:
        return [f"kept the registry entry of run {run}: it is refused ({why})"]
    return area.remove() if area else []
