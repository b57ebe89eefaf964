"""A throwaway PostgreSQL cluster: initdb, start/stop/restart/reload, snapshot and restore
of the loaded data directory. It listens only on a private Unix socket and runs as an
unprivileged user when pgsweep runs as root."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg

from ..host import proc
from ..host.proc import RunAs
from .binaries import Binaries

ROLE = "pgsweep"  # the superuser role initdb creates; trust auth on the private socket only
PORT = 5432  # the socket directory is private to the cluster, so the port never collides
OWNED_FILE = "pgsweep.conf"  # the configuration file pgsweep owns; postgresql.conf includes it
BASE_FILE = "pgsweep-base.conf"


class ServerError(Exception):
    """The server would not start, stop or answer; the message carries its log tail."""


def chown_tree(path: Path, user: RunAs | None) -> None:
    if user is None:
        return
    for root, dirs, files in os.walk(path):
        os.chown(root, user.uid, user.gid)
        for name in dirs + files:
            os.lchown(os.path.join(root, name), user.uid, user.gid)


class Cluster:
    def __init__(
        self,
        binaries: Binaries,
        user: RunAs | None,
        root: Path,
        socket_dir: Path,
        waldir: Path | None = None,
    ) -> None:
        self.binaries = binaries
        self.user = user
        self.root = root
        self.socket_dir = socket_dir
        self.datadir = root / "data"
        self.snapshot_dir = root / "snapshot"
        # pg_wal elsewhere (initdb --waldir; storage.wal_device): snapshotted beside it
        self.waldir = waldir
        self.wal_snapshot = waldir.with_name(waldir.name + "-snapshot") if waldir else None
        self.logfile = root / "server.log"
        self.scratch = root / "cmd"
        self.cgroup: Path | None = None  # a cgroup the server starts in (os.memory_limit)

    # ---- helpers -------------------------------------------------------------------
    def _run(self, argv: list[str], name: str, timeout: float = 120) -> proc.Result:
        return proc.run(argv, out=self.scratch / f"{name}.out", timeout=timeout, user=self.user)

    def log_tail(self, lines: int = 20) -> str:
        try:
            text = self.logfile.read_text(errors="replace")
        except FileNotFoundError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def conninfo(self, dbname: str = "postgres") -> dict[str, Any]:
        return {"host": str(self.socket_dir), "port": PORT, "user": ROLE, "dbname": dbname}

    def pgbench_conn_args(self) -> list[str]:
        return ["-h", str(self.socket_dir), "-p", str(PORT), "-U", ROLE]

    @contextmanager
    def connect(self, dbname: str = "postgres") -> Iterator[psycopg.Connection[Any]]:
        with psycopg.connect(**self.conninfo(dbname), autocommit=True, connect_timeout=10) as c:
            yield c

    # ---- life cycle ----------------------------------------------------------------
    def create(self, initdb_options: list[str]) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.scratch.mkdir(exist_ok=True)
        self.socket_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        chown_tree(self.root, self.user)
        chown_tree(self.socket_dir, self.user)
        argv = [self.binaries.path("initdb"), "-D", str(self.datadir), "-U", ROLE]
        argv += [
            "--auth=trust",
            "--encoding=UTF8",
            "--locale=C",
            "--no-instructions",
            *initdb_options,
        ]
        if self.waldir is not None:
            argv.append(f"--waldir={self.waldir}")
        res = self._run(argv, "initdb")
        if not res.ok:
            raise ServerError(f"initdb failed: {res.describe_failure()}")
        base = [
            "listen_addresses = ''",
            f"unix_socket_directories = '{self.socket_dir}'",
            "unix_socket_permissions = 0700",
            f"port = {PORT}",
            "logging_collector = off",
            "log_line_prefix = '%m [%p] '",
        ]
        (self.datadir / BASE_FILE).write_text("\n".join(base) + "\n")
        (self.datadir / OWNED_FILE).write_text("")
        with open(self.datadir / "postgresql.conf", "a") as conf:
            conf.write(f"\n# added by pgsweep\ninclude '{BASE_FILE}'\ninclude '{OWNED_FILE}'\n")
        chown_tree(self.datadir, self.user)

    def write_settings(self, settings: dict[str, str]) -> None:
        lines = [f"{k} = '{v.replace(chr(39), chr(39) * 2)}'" for k, v in sorted(settings.items())]
        path = self.datadir / OWNED_FILE
        path.write_text("".join(line + "\n" for line in lines))
        if self.user:
            os.chown(path, self.user.uid, self.user.gid)

    def pg_ctl(self, action: str, *extra: str, timeout: float = 120) -> proc.Result:
        argv = [self.binaries.path("pg_ctl"), "-D", str(self.datadir), "-l", str(self.logfile)]
        argv += ["-w", "-t", str(int(timeout)), *extra, action]
        if action == "start" and self.cgroup is not None:
            # the unprivileged pg_ctl moves itself in (its cgroup.procs is chowned to the
            # server user), so the postmaster it forks starts inside the cgroup
            join = 'echo $$ > "$1" && shift && exec "$@"'
            argv = ["sh", "-c", join, "sh", str(self.cgroup / "cgroup.procs"), *argv]
        return self._run(argv, f"pg_ctl-{action}", timeout=timeout + 10)

    def start(self) -> None:
        res = self.pg_ctl("start")
        if not res.ok:
            raise ServerError(f"the server did not start:\n{self.log_tail()}")

    def stop(self, mode: str = "fast") -> None:
        if self.postmaster_pid() is None:
            return
        res = self.pg_ctl("stop", "-m", mode, timeout=60)
        if not res.ok and self.postmaster_pid() is not None:
            self.pg_ctl("stop", "-m", "immediate", timeout=30)

    def reload(self) -> None:
        res = self.pg_ctl("reload")
        if not res.ok:
            raise ServerError(f"reload failed: {res.describe_failure()}")

    def postmaster_pid(self) -> int | None:
        """PID of a live postmaster for this data directory, or None."""
        try:
            pid = int((self.datadir / "postmaster.pid").read_text().split("\n", 1)[0])
        except (FileNotFoundError, ValueError):
            return None
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except FileNotFoundError:
            return None
        return pid if str(self.datadir).encode() in cmdline else None

    # ---- data snapshot -------------------------------------------------------------
    def take_snapshot(self) -> None:
        """Copy the stopped, loaded data directory aside (reflink where the fs can)."""
        self.stop()
        shutil.rmtree(self.snapshot_dir, ignore_errors=True)
        _copy_tree(self.datadir, self.snapshot_dir, self.scratch / "cp.out")
        if self.waldir is not None and self.wal_snapshot is not None:
            shutil.rmtree(self.wal_snapshot, ignore_errors=True)
            _copy_tree(self.waldir, self.wal_snapshot, self.scratch / "cp.out")

    def restore_snapshot(self) -> None:
        """Put the loaded data back, keeping the current pgsweep.conf."""
        self.stop()
        conf = (self.datadir / OWNED_FILE).read_text()
        shutil.rmtree(self.datadir)
        _copy_tree(self.snapshot_dir, self.datadir, self.scratch / "cp.out")
        if self.waldir is not None and self.wal_snapshot is not None:
            shutil.rmtree(self.waldir)  # the WAL the copied pg_wal symlink points to
            _copy_tree(self.wal_snapshot, self.waldir, self.scratch / "cp.out")
            chown_tree(self.waldir, self.user)
        (self.datadir / OWNED_FILE).write_text(conf)
        chown_tree(self.datadir, self.user)
        # The copy left dirty pages; flush them now so their writeback does not land in
        # the next measurement window.
        os.sync()

    def destroy(self) -> None:
        self.stop(mode="immediate")
        shutil.rmtree(self.root, ignore_errors=True)
        for wal in (self.waldir, self.wal_snapshot):
            if wal is not None:
                shutil.rmtree(wal, ignore_errors=True)
        shutil.rmtree(self.socket_dir, ignore_errors=True)


def _copy_tree(src: Path, dst: Path, out: Path) -> None:
    # `cp -a --reflink=auto` keeps owners and modes and clones blocks on btrfs/xfs/zfs.
    res = proc.run(["cp", "-a", "--reflink=auto", str(src), str(dst)], out=out, timeout=3600)
    if not res.ok:
        raise ServerError(f"copying {src} to {dst} failed: {res.describe_failure()}")
