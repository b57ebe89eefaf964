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

import json
import os
import re
import tempfile
from pathlib import Path

from . import safefs, workarea
from .workarea import registry_dir

_SELECTED = re.compile(r"\[([^\]]+)\]")  # "always madvise [never]" -> never
# The kernel files and cgroup directories pgsweep changes, and nothing else.
ALLOWED = re.compile(
    r"^(/proc/sys/[a-z0-9_][a-z0-9_./-]*"
    r"|/sys/kernel/mm/transparent_hugepage/(enabled|defrag|shmem_enabled)"
    r"|/sys/kernel/mm/hugepages/hugepages-\d+kB/nr_hugepages"
    r"|/sys/(class/)?block/[A-Za-z0-9_.:-]+/queue/(scheduler|read_ahead_kb)"
    r"|/sys/fs/cgroup/memory/pgsweep-[0-9-]+)$"
)


def allowed(path: str) -> bool:
    return ALLOWED.match(path) is not None and "/../" not in path and not path.endswith("/..")


def read_setting(path: Path) -> str:
    """A kernel file's current value: the bracketed choice of a menu file (THP, scheduler),
    otherwise the text without its newline."""
    text = path.read_text().strip()
    m = _SELECTED.search(text)
    return m.group(1) if m else text


class UndoJournal:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._recorded: set[str] = set()

    @classmethod
    def for_this_run(cls, part: str = "") -> UndoJournal:
        """The journal of this run; `part` keeps a layer's journal apart ("storage": its
        mounts are restored after the os layer's kernel values, and on its own undo)."""
        suffix = f".{part}" if part else ""
        return cls(registry_dir() / f"{workarea.this_run()}{suffix}.undo")

    def set(self, path: Path, value: str) -> None:
        """Write `value` to the kernel file `path`, journaling its original first (once per
        file per run: the original is what was there before pgsweep touched it)."""
        key = str(path)
        if not allowed(key):
            raise OSError(f"pgsweep does not change {path}")
        if key not in self._recorded:
            self._append({"file": key, "original": read_setting(path)})
            self._recorded.add(key)
        path.write_text(value)

    def made_dir(self, path: Path) -> None:
        """Journal a directory pgsweep creates in a kernel filesystem (a cgroup): restoring
        removes it, once its processes are gone."""
        if not allowed(str(path)):
            raise OSError(f"pgsweep does not make {path}")
        self._append({"dir": str(path)})
        path.mkdir()

    def record(self, entry: dict[str, str]) -> None:
        """Journal something about to be made outside kernel files: {"mount": point},
        {"loop_image": file}, {"zpool": name}, {"zfs_daemon": pidfile}."""
        self._append(entry)

    def _append(self, entry: dict[str, str]) -> None:
        """On disk before the change it describes is made (file and directory fsync'd)."""
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | safefs.NOFOLLOW, 0o600)
        with os.fdopen(fd, "a") as f:
            f.write(json.dumps(entry) + "\n")
            f.flush()
            os.fsync(f.fileno())
        _fsync_dir(self.path.parent)

    def restore(self) -> list[str]:
        done, owed = restore_journal(self.path)
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


def restore_journal(journal: Path) -> tuple[list[str], set[str]]:
    """Write back every original, newest first. Returns what was done (and what failed),
    and the files still owed. The journal is removed once nothing is owed; otherwise it is
    rewritten to hold only what is still owed, for another try."""
    try:
        lines = journal.read_text().splitlines()
    except FileNotFoundError:
        return [], set()
    done, failed, kept = [], [], []
    for entry in _undo_order(lines):
        try:
            what = _undo(entry)
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


def _undo(entry: dict[str, str]) -> str | None:
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
    return _undo_made(entry)


def _undo_made(entry: dict[str, str]) -> str | None:
    """Mounts, loop images, pools and daemons (storage layer) are taken down by the modules
    that make them."""
    from . import blockdev, zfsfuse

    with tempfile.TemporaryDirectory(prefix="pgsweep-undo-") as scratch:
        if "zpool" in entry or "zfs_daemon" in entry:
            return zfsfuse.undo_entry(entry, Path(scratch))
        return blockdev.undo_entry(entry, Path(scratch))


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def recover_stale() -> tuple[list[str], list[str]]:
    """After kill -9, for each dead run (holding its lock meanwhile): stop its servers, put
    back its kernel values, take down its storage, then remove its work area (the mounts
    live inside it). Returns what was done and what could not be put back."""
    done: list[str] = []
    failed: list[str] = []
    directory = registry_dir()
    for run in workarea.stale_runs():
        with workarea.dead_run(run) as dead:
            if not dead:
                continue
            done += workarea.stop_stale_servers(run)
            owed = False
            for journal in (directory / f"{run}.undo", directory / f"{run}.storage.undo"):
                lines, still = restore_journal(journal)
                done += [line for line in lines if not line.startswith("could not")]
                failed += [line for line in lines if line.startswith("could not")]
                owed = owed or bool(still) or journal.exists()
            kept = workarea.cleanup_stale(run)
            done += [line for line in kept if not line.startswith("kept")]
            failed += [line for line in kept if line.startswith("kept")]
            if not owed and not (directory / f"{run}.json").exists():
                workarea.forget_lock(run)
    return done, failed
