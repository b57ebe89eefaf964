"""The undo journal: before pgsweep writes any kernel or sysfs file, the file's original
value is appended to a journal on disk and fsync'd; restoring writes the originals back,
newest change first, then deletes the journal. Restoring twice is harmless: the second
time finds no journal. A run's journal lives beside its registry entry
(`workarea.registry_dir()/PID.undo`), so the next run, `pgsweep cleanup` and
`pgsweep restore` find and replay the journals of runs that died (kill -9)."""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path

from . import workarea
from .workarea import alive, registry_dir

_SELECTED = re.compile(r"\[([^\]]+)\]")  # "always madvise [never]" -> never


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
        return cls(registry_dir() / f"{os.getpid()}{suffix}.undo")

    def set(self, path: Path, value: str) -> None:
        """Write `value` to the kernel file `path`, journaling its original first (once per
        file per run: the original is what was there before pgsweep touched it)."""
        key = str(path)
        if key not in self._recorded:
            self._append({"file": key, "original": read_setting(path)})
            self._recorded.add(key)
        path.write_text(value)

    def made_dir(self, path: Path) -> None:
        """Journal a directory pgsweep creates in a kernel filesystem (a cgroup): restoring
        removes it, once its processes are gone."""
        self._append({"dir": str(path)})
        path.mkdir()

    def record(self, entry: dict[str, str]) -> None:
        """Journal something about to be made outside kernel files: {"mount": point},
        {"loop_image": file}, {"zpool": name}, {"zfs_daemon": pidfile}."""
        self._append(entry)

    def _append(self, entry: dict[str, str]) -> None:
        """On disk before the change it describes is made (file and directory fsync'd)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a") as f:
            f.write(json.dumps(entry) + "\n")
            f.flush()
            os.fsync(f.fileno())
        _fsync_dir(self.path.parent)

    def restore(self) -> list[str]:
        done = restore_journal(self.path)
        self._recorded.clear()
        return done


def restore_journal(journal: Path) -> list[str]:
    """Write back every original, newest first; remove the journal once all are back.
    A value that cannot be written back keeps the journal for another try."""
    try:
        lines = journal.read_text().splitlines()
    except FileNotFoundError:
        return []
    done, failed = [], []
    seen: set[str] = set()
    for line in reversed(lines):
        try:
            entry = json.loads(line)
        except ValueError:
            continue  # a line cut by a crash mid-write: its change was never made
        if "file" not in entry and "dir" not in entry:
            try:
                what = _undo_made(entry)
                if what:
                    done.append(what)
            except OSError as exc:
                failed.append(f"could not undo {entry}: {exc}")
            continue
        if "dir" in entry:
            try:
                Path(entry["dir"]).rmdir()
                done.append(f"removed {entry['dir']}")
            except FileNotFoundError:
                pass
            except OSError as exc:  # processes still inside: keep the journal for later
                failed.append(f"could not remove {entry['dir']}: {exc}")
            continue
        target = Path(entry["file"])
        if entry["file"] in seen:
            continue
        seen.add(entry["file"])
        try:
            if read_setting(target) != entry["original"]:
                target.write_text(entry["original"])
                done.append(f"restored {target} = {entry['original']}")
        except OSError as exc:
            failed.append(f"could not restore {target} = {entry['original']}: {exc}")
    if not failed:
        journal.unlink(missing_ok=True)
    return done + failed


def _undo_made(entry: dict[str, str]) -> str | None:
    """Mounts, loop images, pools and daemons (storage layer) are taken down by the modules
    that make them."""
    from . import blockdev, zfsfuse

    with tempfile.TemporaryDirectory(prefix="pgsweep-undo-") as scratch:
        if "zpool" in entry or "zfs_daemon" in entry:
            return zfsfuse.undo_entry(entry, Path(scratch))
        return blockdev.undo_entry(entry, Path(scratch))


def restore_stale() -> list[str]:
    """Replay the journals of runs that are no longer alive: kernel values first, then the
    storage (mounts, loop devices, pools) beneath them."""
    directory = registry_dir()
    done: list[str] = []
    if not directory.is_dir():
        return done
    journals = sorted(directory.glob("*.undo"), key=lambda j: (j.name.count("."), j.name))
    for journal in journals:
        try:
            pid = int(journal.name.split(".")[0])
        except ValueError:
            continue
        if not alive(pid):
            done += restore_journal(journal)
    return done


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def recover_stale() -> list[str]:
    """After kill -9: stop the dead runs' servers, put back their kernel values, take down
    their storage, then remove their work areas (the mounts live inside them)."""
    return workarea.stop_stale_servers() + restore_stale() + workarea.cleanup_stale()
