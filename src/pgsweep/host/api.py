"""The machine as an object: the side effects pgsweep has on a machine, and the facts it
reads from one, go through a `Host`.

Three implementations share these methods: `LocalHost` (this machine: host/proc.py,
host/safefs.py, host/bounded.py, the kernel files, psycopg), `RemoteHost` (another
machine, through a `pgsweep agent` started over SSH, which runs a LocalHost there) and
`RecordingHost` (a scripted machine that answers reads from a script, or from a real
machine, and records every effect in order: unit tests of a layer's logic, and `plan
--commands`).

Reads and effects are separate methods, so a recording host can serve reads from a real
machine and only record the effects (a dry run that cannot change anything). Paths are
those on the host itself. Privilege is an argument of each call (`user`), never ambient.
"""

from __future__ import annotations

import re
import secrets
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from .blockdev import Grant
from .builds import Build, BuildSpec
from .proc import Result, RunAs


def scratch_path(prefix: str, base: Path = Path("/tmp")) -> Path:
    """A fresh name for a scratch directory a host makes with `private_dir` (which refuses
    a name that exists: it never adopts a directory it did not make)."""
    return base / f"{prefix}{secrets.token_hex(6)}"


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
    is_dir: bool
    is_file: bool
    is_link: bool


class Host(ABC):
    """One machine. `name` is "local" or the name [hosts] gives it."""

    name: str

    @property
    def on(self) -> str:
        """How an error names where it happened: "" for this machine (its own host, or a dry
        run's standing for it), " on host NAME" for another."""
        return "" if self.name.startswith("local") else f" on host {self.name}"

    def alive(self) -> bool:
        """The host still answers (a remote host's connection may be lost)."""
        return True

    # ---- processes -----------------------------------------------------------------
    @abstractmethod
    def run(self, argv: list[str], *, out: Path, err: Path | None = None, timeout: float = 60.0,
            user: RunAs | None = None, cwd: Path | None = None,
            env: dict[str, str] | None = None) -> Result:  # fmt: skip
        """Run to completion (a timeout kills the whole process group), stdout and stderr
        to files on the host (`err` defaults to OUT.err)."""

    @abstractmethod
    def start(self, argv: list[str], *, out: Path, err: Path, user: RunAs | None = None,
              env: dict[str, str] | None = None) -> int:  # fmt: skip
        """Start a process in a group of its own beside what runs (a standby's read load),
        stdout and stderr to files on the host; its pid is the handle `poll` and `stop`
        take. An agent stops it when its controller is gone."""

    @abstractmethod
    def poll(self, pid: int) -> int | None:
        """A started process's exit status once it has ended; None while it runs."""

    @abstractmethod
    def stop(self, pid: int, grace: float = 5.0) -> int | None:
        """Stop a started process's group (SIGTERM, SIGKILL after `grace`) if it still runs,
        and forget it: its exit status (None for a pid this host did not start)."""

    def wait(self, pid: int, seconds: float) -> int | None:
        """A started process's exit status, waiting up to `seconds` for it to end (None:
        it still runs; `stop` it)."""
        deadline = time.monotonic() + seconds
        while (status := self.poll(pid)) is None and time.monotonic() < deadline:
            time.sleep(0.1)
        return status

    @abstractmethod
    def output(self, path: Path, limit: int = 64 << 20) -> bytes:
        """A command's output file in a folder root owns, bounded (bounded.read_output)."""

    @abstractmethod
    def process(self, pid: int) -> tuple[list[str], int] | None:
        """A live process's argv and owner uid; None when it is gone (or a zombie)."""

    @abstractmethod
    def reap(self, pid: int) -> None:
        """Collect an exited child (a postmaster this process adopted)."""

    @abstractmethod
    def ids(self, user: RunAs | None) -> tuple[int, int]:
        """(uid, gid) of `user` on this host, or of the user pgsweep runs as there."""

    # ---- files root owns, and files of the server user's -----------------------------
    @abstractmethod
    def private_dir(self, path: Path, mode: int = 0o700) -> Path:
        """A new root-owned directory (it must not exist)."""

    def private_dir_once(self, path: Path, mode: int = 0o700) -> Path:
        """`private_dir`, unless this run made it already (a folder in its work area that
        several steps use: trials/, clusters/, storage/, a scratch folder)."""
        if self.lstat(path) is None:
            self.private_dir(path, mode)
        return path

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
    def read_owned(self, path: Path, uid: int, limit: int = 1 << 20, *, tail: bool = False,
                   offset: int = 0) -> bytes:  # fmt: skip
        """A regular file owned by `uid`, opened without following a link: at most `limit`
        bytes from `offset` (the last ones with `tail`). UnsafePath when it is anything
        else; FileNotFoundError when it is missing."""

    @abstractmethod
    def owned_size(self, path: Path, uid: int) -> int:
        """The size of such a file (0 when missing or not one)."""

    @abstractmethod
    def list_owned(self, directory: Path) -> list[str]:
        """Names in a directory the server user may own, listed through a descriptor."""

    @abstractmethod
    def read_text(self, path: Path) -> str:
        """A kernel file, a /proc file or one of root's own (never a server user's)."""

    def read_texts(self, paths: Sequence[Path]) -> list[str | None]:
        """read_text of each path, None for one that cannot be read (a process gone between
        two reads): one message to a remote host's agent for them all."""
        out: list[str | None] = []
        for path in paths:
            try:
                out.append(self.read_text(path))
            except OSError:
                out.append(None)
        return out

    @abstractmethod
    def lstat(self, path: Path) -> FileStat | None:
        """None when the path does not exist."""

    @abstractmethod
    def sync(self) -> None:
        """Write back every dirty page (sync(2))."""

    # ---- kernel --------------------------------------------------------------------
    @abstractmethod
    def write_kernel(self, path: Path, value: str) -> None:
        """Write a kernel file (sysfs, procfs, cgroupfs) in place, once. Settings go through
        the undo journal, which calls this; triggers (drop_caches, compact_memory) are
        written directly."""

    @abstractmethod
    def hold_kernel_lock(self, who: str) -> None:
        """Take the host's kernel lock for as long as this host object's process lives (one
        run at a time changes kernel values there; journal.hold_kernel_lock): PgsweepError
        naming the run that holds it."""

    @abstractmethod
    def make_kernel_dir(self, path: Path) -> None:
        """Make a directory in a kernel filesystem (a cgroup), which must not exist."""

    @abstractmethod
    def chown(self, path: Path, uid: int, gid: int) -> None:
        """Hand a kernel file (a cgroup's cgroup.procs) to a user; no link is followed."""

    def read_optional(self, path: Path) -> str | None:
        """A kernel, /proc or sysfs file's text, None where the machine has no such file
        (asked first: a scripted host answers only what its machine has)."""
        if self.lstat(path) is None:
            return None
        try:
            return self.read_text(path)
        except OSError:
            return None

    def read_setting(self, path: Path) -> str:
        """A kernel file's value: the bracketed choice of a menu file (THP, a scheduler),
        otherwise the text without its newline."""
        text = self.read_text(path).strip()
        m = re.search(r"\[([^\]]+)\]", text)
        return m.group(1) if m else text

    # ---- the undo journal (host/journal.py) ------------------------------------------
    @abstractmethod
    def append_journal(self, path: Path, line: str) -> None:
        """Append one entry to an undo journal on this host, on disk (fsync) before the
        change it describes is made."""

    @abstractmethod
    def restore_journal(self, path: Path, work_root: Path | None) -> tuple[list[str], set[str]]:
        """Put back what a journal holds: what was done, and the files still owed."""

    # ---- block devices, filesystems, zfs-fuse (host/blockdev.py, host/zfsfuse.py) --------
    # `scratch` is a root-owned folder on the host for the tools' output. What each makes is
    # journaled (`append_journal`) before it is called; `restore_journal` takes it down.
    @abstractmethod
    def attach_loop(self, image: Path, size: int, sector_size: int | None, direct_io: bool,
                    scratch: Path) -> Path:  # fmt: skip
        """A sparse file of `size` bytes made in one of root's folders and attached as a
        loop device (losetup): the device."""

    @abstractmethod
    def claim_device(self, device: Path, grant: Grant, ours: Mapping[str, frozenset[str]],
                     scratch: Path) -> Path:  # fmt: skip
        """Right before a mkfs: the real device `device` names, still allowed by `grant`
        and free (DeviceError otherwise). `ours`: by real device, the UUIDs of filesystems
        pgsweep made there in this run (its own, not a signature in the way)."""

    @abstractmethod
    def make_filesystem(self, fstype: str, device: Path, options: str,
                        scratch: Path) -> str | None:  # fmt: skip
        """mkfs: the new filesystem's UUID (DeviceError quoting mkfs when it refuses)."""

    @abstractmethod
    def mount(self, fstype: str, device: Path, point: Path, options: str, scratch: Path,
              nocow: bool = False) -> None:  # fmt: skip
        """Mount on `point` (a root-owned directory, checked right before), nosuid,nodev;
        its root made root's, 0711; `nocow`: chattr +C on it (btrfs)."""

    @abstractmethod
    def which(self, program: str) -> str | None:
        """The path of `program` on this host's PATH (root's), or None: what `plan` checks
        a layer's tools are there."""

    @abstractmethod
    def free_bytes(self, path: Path) -> int:
        """Bytes free to root on the filesystem holding `path` (statvfs)."""

    @abstractmethod
    def has_nocow(self, path: Path) -> bool:
        """The directory carries the C (no copy-on-write) attribute; no link followed."""

    @abstractmethod
    def zfs_create(self, pool: str, device: Path, point: Path, values: Mapping[str, Any],
                   scratch: Path) -> None:  # fmt: skip
        """Start pgsweep's zfs-fuse daemon (pid file scratch/zfs-fuse.pid) and create
        `pool` on `device`, mounted at `point`, with the zfs.* `values` (ZfsError)."""

    @abstractmethod
    def zfs_change(self, pool: str, props: Mapping[str, str], drop_arc: bool,
                   scratch: Path) -> None:  # fmt: skip
        """Set properties of the pool's dataset; `drop_arc`: empty its ARC (ZfsError)."""

    @abstractmethod
    def zfs_properties(self, pool: str, scratch: Path) -> dict[str, str]:
        """The dataset's properties in force (zfs get)."""

    # ---- builds (host/builds.py): PostgreSQL compiled on the host its server runs on ------
    @abstractmethod
    def build_cache(self, server_uid: int, create: bool) -> Path | None:
        """The build cache's folder, checked: refused (exit 2) when another user could
        change it, or when the server user (`server_uid`) could not reach the binaries in
        it. None when it does not exist and `create` is false (`plan`)."""

    @abstractmethod
    def find_build(self, cache: Path, spec: BuildSpec) -> tuple[str | None, Build | None]:
        """Read only, nothing fetched: the build's key when its source is pinned already,
        and the finished build the cache holds under it."""

    @abstractmethod
    def make_build(self, cache: Path, spec: BuildSpec,
                   say: Callable[[str], None]) -> tuple[Build, bool]:  # fmt: skip
        """The build of `spec`, found in the cache (True) or compiled now (False), its
        source fetched first when apt names it; what it is doing goes to `say`. The host
        holds a shared lock on the entry while it lives (`builds --prune` leaves it).
        BuildError (its log kept) or SourceError."""

    @abstractmethod
    def copy_build(self, build: Build, server_uid: int, say: Callable[[str], None]) -> Build:
        """A build made on this machine, as this host holds it: itself here; on another
        host, copied into that host's build cache under its key (host/buildcopy.py)
        unless there already."""

    # ---- network -------------------------------------------------------------------
    @abstractmethod
    def tcp_rtt(self, address: str, port: int, probes: int = 5) -> float:
        """The median time, in ms, to open a TCP connection to address:port from here."""

    @abstractmethod
    def source_address(self, address: str) -> str:
        """The address of this host's own that its kernel sends from to reach `address`
        (a route's source: the one a server there sees this host's connections come from)."""

    @abstractmethod
    def free_port(self, addresses: list[str]) -> int:
        """A TCP port free on each of `addresses` (this host's own), bound and let go;
        OSError when one cannot be bound at all."""

    # ---- PostgreSQL ----------------------------------------------------------------
    @abstractmethod
    def connect(self, conninfo: Mapping[str, Any]) -> AbstractContextManager[Connection]:
        """A connection made on the host (a private socket is only reachable there)."""
