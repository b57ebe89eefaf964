"""This machine as a Host: the subprocess helper, link-safe files, kernel files and psycopg,
called directly (a remote host's agent runs one of these on its own machine)."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import stat
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from ..errors import internal
from . import blockdev, bounded, builds, proc, safefs, zfsfuse
from .api import Connection, FileStat, Host
from .builds import Build, BuildSpec
from .proc import Result, RunAs


class LocalHost(Host):
    def __init__(self, name: str = "local") -> None:
        self.name = name
        self._started: dict[int, subprocess.Popen[bytes]] = {}
        self._build_locks: list[int] = []  # shared locks on the builds in use, held till exit

    def run(self, argv: list[str], *, out: Path, err: Path | None = None, timeout: float = 60.0,
            user: RunAs | None = None, cwd: Path | None = None,
            env: dict[str, str] | None = None) -> Result:  # fmt: skip
        return proc.run(argv, out=out, err=err, timeout=timeout, user=user, cwd=cwd, env=env)

    def start(self, argv: list[str], *, out: Path, err: Path, user: RunAs | None = None,
              env: dict[str, str] | None = None) -> int:  # fmt: skip
        popen = proc.start_tracked(argv, out=out, err=err, user=user, env=env)
        self._started[popen.pid] = popen
        return popen.pid

    def poll(self, pid: int) -> int | None:
        popen = self._started.get(pid)
        if popen is None:
            raise internal(f"process {pid} was not started by this host")
        return popen.poll()

    def stop(self, pid: int, grace: float = 5.0) -> int | None:
        popen = self._started.pop(pid, None)
        if popen is None:
            return None
        proc.kill_group(popen, grace)
        proc.forget(popen)
        return popen.returncode

    def output(self, path: Path, limit: int = bounded.OUTPUT_LIMIT) -> bytes:
        return bounded.read_output(path, limit)

    def process(self, pid: int) -> tuple[list[str], int] | None:
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            owner = Path(f"/proc/{pid}").stat().st_uid
        except OSError:
            return None
        if proc.gone(pid):
            return None
        return [a.decode(errors="replace") for a in argv if a], owner

    def reap(self, pid: int) -> None:
        proc.reap(pid)

    def ids(self, user: RunAs | None) -> tuple[int, int]:
        return safefs.owner_ids(user)

    def private_dir(self, path: Path, mode: int = 0o700) -> Path:
        return safefs.private_dir(path, mode)

    def leaf_dir(self, path: Path, user: RunAs | None, mode: int = 0o700) -> Path:
        return safefs.leaf_dir(path, user, mode)

    def write_file(self, path: Path, data: bytes | str, mode: int = 0o600,
                   owner: tuple[int, int] | None = None) -> None:  # fmt: skip
        safefs.write_file(path, data, mode, owner)

    def remove_tree(self, path: Path) -> None:
        safefs.remove_tree(path)

    def read_owned(self, path: Path, uid: int, limit: int = 1 << 20, *, tail: bool = False,
                   offset: int = 0) -> bytes:  # fmt: skip
        if not offset:
            return safefs.read_owned(path, uid, limit, tail)
        fd = safefs.open_owned_in(path.parent, path.name, uid)
        try:
            os.lseek(fd, offset, os.SEEK_SET)
            return bounded.read_fd_upto(fd, limit)
        finally:
            os.close(fd)

    def owned_size(self, path: Path, uid: int) -> int:
        try:
            fd = safefs.open_owned_in(path.parent, path.name, uid)
        except (OSError, safefs.UnsafePath):
            return 0
        try:
            return os.fstat(fd).st_size
        finally:
            os.close(fd)

    def list_owned(self, directory: Path) -> list[str]:
        return safefs.list_owned(directory)

    def read_text(self, path: Path) -> str:
        return path.read_text(errors="replace")  # a process's maps or argv may be any bytes

    def lstat(self, path: Path) -> FileStat | None:
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return None
        return FileStat(st.st_mode, st.st_uid, st.st_gid, st.st_size, stat.S_ISDIR(st.st_mode),
                        stat.S_ISREG(st.st_mode), stat.S_ISLNK(st.st_mode))  # fmt: skip

    def sync(self) -> None:
        os.sync()

    def hold_kernel_lock(self, who: str) -> None:
        from .journal import hold_kernel_lock

        hold_kernel_lock(who)

    def write_kernel(self, path: Path, value: str) -> None:
        fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)  # in place: no create
        try:
            os.write(fd, value.encode())
        finally:
            os.close(fd)

    def attach_loop(self, image: Path, size: int, sector_size: int | None, direct_io: bool,
                    scratch: Path) -> Path:  # fmt: skip
        return blockdev.attach_loop(image, size, sector_size, direct_io, scratch)

    def claim_device(self, device: Path, grant: blockdev.Grant,
                     ours: Mapping[str, frozenset[str]], scratch: Path) -> Path:  # fmt: skip
        return blockdev.check_before_format(device, grant, scratch, ours)

    def make_filesystem(self, fstype: str, device: Path, options: str,
                        scratch: Path) -> str | None:  # fmt: skip
        return blockdev.make_filesystem(fstype, device, options, scratch)

    def mount(self, fstype: str, device: Path, point: Path, options: str, scratch: Path,
              nocow: bool = False) -> None:  # fmt: skip
        blockdev.mount(fstype, device, point, options, scratch, nocow)

    def has_nocow(self, path: Path) -> bool:
        return blockdev.has_nocow(path)

    def zfs_create(self, pool: str, device: Path, point: Path, values: Mapping[str, Any],
                   scratch: Path) -> None:  # fmt: skip
        zfsfuse.create_pool(pool, device, point, dict(values), scratch)

    def zfs_change(self, pool: str, props: Mapping[str, str], drop_arc: bool,
                   scratch: Path) -> None:  # fmt: skip
        zfsfuse.set_properties(pool, dict(props), scratch)
        if drop_arc:
            zfsfuse.drop_arc(pool, scratch)

    def zfs_properties(self, pool: str, scratch: Path) -> dict[str, str]:
        return zfsfuse.properties(pool, scratch)

    def build_cache(self, server_uid: int, create: bool) -> Path | None:
        root = builds.open_cache(create)
        if root is not None:
            builds.check_reachable(root, server_uid)
        return root

    def find_build(self, cache: Path, spec: BuildSpec) -> tuple[str | None, Build | None]:
        with tempfile.TemporaryDirectory(prefix="pgsweep-build-") as scratch:
            return builds.find(cache, spec, Path(scratch))

    def make_build(self, cache: Path, spec: BuildSpec,
                   say: Callable[[str], None]) -> tuple[Build, bool]:  # fmt: skip
        with tempfile.TemporaryDirectory(prefix="pgsweep-build-") as scratch:
            build, fd, cached = builds.find_or_make(cache, spec, Path(scratch), say)
        self._build_locks.append(fd)
        return build, cached

    def copy_build(self, build: Build, server_uid: int, say: Callable[[str], None]) -> Build:
        return build  # made here

    def tcp_rtt(self, address: str, port: int, probes: int = 5) -> float:
        times = []
        for _ in range(probes):
            began = time.perf_counter()
            with socket.create_connection((address, port), timeout=5):
                times.append((time.perf_counter() - began) * 1000)
        return float(statistics.median(times))

    def which(self, program: str) -> str | None:
        return shutil.which(program)

    def free_bytes(self, path: Path) -> int:
        return shutil.disk_usage(path).free

    def source_address(self, address: str) -> str:
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        with socket.socket(family, socket.SOCK_DGRAM) as s:  # connect() sends nothing
            s.connect((address, 9))
            return str(s.getsockname()[0])

    def free_port(self, addresses: list[str]) -> int:
        for _ in range(50):
            port = _bind(addresses[0], 0)
            if all(_bind(a, port, fail=False) for a in addresses[1:]):
                return port
        raise OSError(f"no TCP port was free on all of {', '.join(addresses)}")

    def make_kernel_dir(self, path: Path) -> None:
        path.mkdir()

    def chown(self, path: Path, uid: int, gid: int) -> None:
        os.chown(path, uid, gid, follow_symlinks=False)

    def append_journal(self, path: Path, line: str) -> None:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | safefs.NOFOLLOW, 0o600)
        with os.fdopen(fd, "a") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())
        dfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)

    def restore_journal(self, path: Path, work_root: Path | None) -> tuple[list[str], set[str]]:
        from . import journal

        return journal.restore_journal(path, work_root, self)

    def connect(self, conninfo: Mapping[str, Any]) -> AbstractContextManager[Connection]:
        return _connect(dict(conninfo))


@contextlib.contextmanager
def _connect(conninfo: dict[str, Any]) -> Iterator[Connection]:
    import psycopg

    with psycopg.connect(**conninfo, autocommit=True, connect_timeout=10) as conn:
        yield conn


def _bind(address: str, port: int, fail: bool = True) -> int:
    try:
        with socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET) as s:
            s.bind((address, port))
            return int(s.getsockname()[1])
    except OSError:
        if not fail:
            return 0
        raise


LOCAL = LocalHost()
