"""The machine as an object: every side effect pgsweep has on a machine, and every fact it
reads from one, goes through a `Host`.

Three implementations share these methods: `LocalHost` (this machine: the functions of
host/proc.py, host/safefs.py and the kernel files), `RemoteHost` (another machine, through
a `pgsweep agent` started over SSH, which runs a LocalHost there) and `RecordingHost` (a
scripted machine that answers reads from a script and records every effect in order: unit
tests of a layer's logic, and `plan --commands`).

Reads and effects are separate methods, so a recording host can serve reads from a real
machine and record the effects (a dry run that cannot change anything). Paths are those
on the host itself. Privilege is an argument of each call (`user`), never ambient.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from .proc import Result, RunAs


class HostLost(Exception):
    """The connection to a host broke (ssh exited, the agent stopped answering): what was
    under way there is lost, and the message says which host and what."""


class Recorder(Protocol):
    """Where a module that makes something (a mount, a pool, a namespace) writes its undo
    entry before it makes it: the run's UndoJournal (host/journal.py)."""

    def record(self, entry: dict[str, str]) -> None: ...


class Rows(Protocol):
    def fetchone(self) -> tuple[Any, ...] | None: ...
    def fetchall(self) -> list[tuple[Any, ...]]: ...


class Connection(Protocol):
    """What pgsweep asks of a database connection (psycopg's, or a remote host's proxy)."""

    def execute(self, query: str, params: Sequence[Any] | Mapping[str, Any] | None = None
                ) -> Rows: ...  # fmt: skip


@dataclass(frozen=True)
class FileStat:
    """What pgsweep checks of a path (lstat: a link is a link)."""

    mode: int
    uid: int
    gid: int
    size: int
    dev: int
    is_dir: bool
    is_file: bool
    is_link: bool


@dataclass
class Facts:
    """What layers read of a host and what cannot change during a run."""

    name: str
    hostname: str = ""
    kernel: str = ""
    cpu_model: str = ""
    cpu_count: int = 0
    memory_bytes: int = 0
    pgsweep_version: str = ""
    extra: dict[str, str] = field(default_factory=dict)


class Host(ABC):
    """One machine. `name` is "local" or the name [hosts] gives it."""

    name: str

    # ---- processes -----------------------------------------------------------------
    @abstractmethod
    def run(self, argv: list[str], *, out: Path, err: Path | None = None, timeout: float = 60.0,
            user: RunAs | None = None, cwd: Path | None = None,
            env: dict[str, str] | None = None) -> Result:  # fmt: skip
        """Run to completion (a timeout kills the whole process group), output to files on
        the host; the Result's output is read through this host."""

    # ---- files root owns, and files of the server user's -----------------------------
    @abstractmethod
    def private_dir(self, path: Path, mode: int = 0o700) -> Path:
        """A new root-owned directory (it must not exist)."""

    @abstractmethod
    def leaf_dir(self, path: Path, user: RunAs | None, mode: int = 0o700) -> Path:
        """A new directory handed to `user` by descriptor."""

    @abstractmethod
    def write_file(self, path: Path, data: bytes | str, mode: int = 0o600,
                   owner: tuple[int, int] | None = None) -> None:  # fmt: skip
        """Replace `path` atomically through a no-follow temporary file and a rename."""

    @abstractmethod
    def remove_tree(self, path: Path) -> None:
        """Remove through directory descriptors, never following a link; missing is fine."""

    @abstractmethod
    def read_owned(self, path: Path, uid: int, limit: int = 1 << 20, tail: bool = False
                   ) -> bytes:  # fmt: skip
        """A regular file owned by `uid`, opened without following a link, at most `limit`
        bytes (the last ones with `tail`)."""

    @abstractmethod
    def list_owned(self, directory: Path) -> list[str]:
        """Names in a directory the server user may own, listed through a descriptor."""

    @abstractmethod
    def read_text(self, path: Path) -> str:
        """A kernel file, a /proc file or one of root's own (never a server user's)."""

    @abstractmethod
    def lstat(self, path: Path) -> FileStat | None:
        """None when the path does not exist."""

    # ---- kernel --------------------------------------------------------------------
    @abstractmethod
    def write_kernel(self, path: Path, value: str) -> None:
        """Write a kernel file (sysfs, procfs, cgroupfs) in place, once. Settings go through
        the undo journal (host/journal.py), which calls this; triggers (drop_caches,
        compact_memory) are written directly."""

    @abstractmethod
    def sync(self) -> None:
        """Write back every dirty page (sync(2))."""

    # ---- PostgreSQL ----------------------------------------------------------------
    @abstractmethod
    def connect(self, conninfo: Mapping[str, Any]) -> AbstractContextManager[Connection]:
        """A connection made on the host (a private socket is only reachable there)."""

    # ---- facts ---------------------------------------------------------------------
    @abstractmethod
    def facts(self) -> Facts: ...

    def read_result(self, result: Result, stream: str, limit: int = 64 << 20) -> str:
        """stdout or stderr of a command run on this host."""
        path = result.stdout_path if stream == "stdout" else result.stderr_path
        return self.read_text(path)[-limit:]

