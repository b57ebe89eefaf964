"""A throwaway PostgreSQL cluster: initdb, start/stop/reload, snapshot and restore of the
loaded data directory. It listens only on a private Unix socket and runs as an
unprivileged user when pgsweep runs as root.

Layout (see host/safefs.py for why):

    HOME/cN/           root 0711   the cluster's own directory
      conf/            root 0711   postgresql.conf, pg_hba.conf, pg_ident.conf (root:server
                                   0640): the server reads them, only root writes them
      cmd/             root 0700   output of every command pgsweep runs for this cluster
      data/            server 0700 PGDATA
      snapshot/        server 0700 the loaded data directory, copied aside
      log/             server 0700 server.log
    SOCKETS/cN/        server 0700 the private Unix socket
    WALHOME/cN-wal[-snapshot]/  server 0700  pg_wal on a device of its own (initdb --waldir)

The server reads pgsweep's configuration through `config_file` in `conf/`, so root never
writes inside PGDATA; the settings pgsweep manages (socket, port, no TCP, the hba file)
are also given on the server's command line, which outranks every configuration file
(postgresql.auto.conf included). Copies of the data directory run as the server user."""

from __future__ import annotations

import os
import re
import shlex
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from ..errors import PgsweepError
from ..host import proc, safefs
from ..host.api import Connection, Host, HostLost
from ..host.local import LOCAL
from ..host.proc import RunAs
from .access import ROLE, ClientAccess, Listen, ServerError
from .binaries import Binaries

PORT = 5432  # the socket directory is private to the cluster, so the port never collides
HBA = "local all all trust\nlocal replication all trust\n"  # host lines: see Cluster.listen
SCRAM = re.compile(r"SCRAM-SHA-256\$\d+:[A-Za-z0-9+/=]+\$[A-Za-z0-9+/=]+:[A-Za-z0-9+/=]+")
# pgsweep's own sessions: no timeout or read-only level of the experiment applies to them,
# and pg_stat_statements (where a level preloads it) does not count their queries
OWN_SESSION = ("-c statement_timeout=0 -c lock_timeout=0 -c idle_in_transaction_session_timeout=0"
               " -c idle_session_timeout=0 -c default_transaction_read_only=off"
               " -c pg_stat_statements.track=none")  # fmt: skip


def conf_line(name: str, value: str) -> str:
    """`name = 'value'` as postgresql.conf reads it back: backslashes and quotes escaped
    (the value was refused earlier if it held a control character)."""
    return f"{name} = '{value.replace(chr(92), chr(92) * 2).replace(chr(39), chr(39) * 2)}'\n"


class Cluster:
    def __init__(
        self,
        binaries: Binaries,
        user: RunAs | None,
        root: Path,
        socket_dir: Path,
        waldir: Path | None = None,
        *,
        host: Host,
        port: int = PORT,
    ) -> None:
        self.host = host  # the machine the cluster lives on: every effect goes through it
        self.port = port  # its socket's name, and its TCP port for a client elsewhere
        self.peers: list[ClientAccess] = []  # other hosts' roles, over TCP
        self.binaries = binaries
        self.user = user
        self.uid, self.gid = host.ids(user)
        self.root = root
        self.conf = root / "conf"
        self.scratch = root / "cmd"
        self.datadir = root / "data"
        self.snapshot_dir = root / "snapshot"
        self.logfile = root / "log" / "server.log"
        self.socket_dir = socket_dir
        # pg_wal elsewhere (initdb --waldir; storage.wal_device): snapshotted beside it
        self.waldir = waldir
        self.wal_snapshot = waldir.with_name(waldir.name + "-snapshot") if waldir else None
        self.cgroup: Path | None = None  # a cgroup the server starts in (os.memory_limit)
        # TCP on a private link, for one peer only (standbys, replication.network)
        self.listen: Listen | None = None
        self.netns: str | None = None  # a network namespace the server starts in
        self._settings: dict[str, str] = {}

    # ---- helpers -------------------------------------------------------------------
    def _run(self, argv: list[str], name: str, timeout: float = 120,
             env: dict[str, str] | None = None) -> proc.Result:  # fmt: skip
        return self.host.run(argv, out=self.scratch / f"{name}.out", timeout=timeout,
                             user=self.user, env=env)  # fmt: skip

    def log_tail(self, lines: int = 20) -> str:
        """The end of the server log, read without following a link the server user may
        have put in its place."""
        try:
            raw = self.host.read_owned(self.logfile, self.uid, limit=64 * 1024, tail=True)
        except FileNotFoundError:
            return ""
        except (OSError, safefs.UnsafePath, HostLost) as exc:
            return f"(server log not read: {exc})"
        return "\n".join(raw.decode(errors="replace").splitlines()[-lines:])

    def log_size(self) -> int:
        return self.host.owned_size(self.logfile, self.uid)

    def log_since(self, offset: int, limit: int = 8 << 20) -> bytes:
        """The server log written after `offset` (at most `limit` bytes)."""
        try:
            return self.host.read_owned(self.logfile, self.uid, limit, offset=offset)
        except (OSError, safefs.UnsafePath, HostLost):  # the trial's failure says why
            return b""

    def conninfo(self, dbname: str = "postgres") -> dict[str, Any]:
        """The private socket, trust authentication only: the socket directory is the server
        user's, who could put a fake server there to ask root's libpq for a password, so no
        password is ever offered (no passfile, no PGPASSWORD, require_auth=none)."""
        return {"host": str(self.socket_dir), "port": self.port, "user": ROLE, "dbname": dbname,
                "passfile": "/proc/pgsweep-no-passfile", "sslmode": "disable",
                "gssencmode": "disable", "require_auth": "none",
                # pgsweep reads text whatever client_encoding a level gives the server, and
                # its own queries are not the experiment's: no timeout or read-only level
                # of the configuration applies to them
                "client_encoding": "UTF8", "options": OWN_SESSION}  # fmt: skip

    def pgbench_conn_args(self) -> list[str]:
        return ["-h", str(self.socket_dir), "-p", str(self.port), "-U", ROLE]

    @contextmanager
    def connect(self, dbname: str = "postgres") -> Iterator[Connection]:
        with self.host.connect(self.conninfo(dbname)) as c:
            yield c

    def managed(self) -> dict[str, str]:
        """The settings pgsweep owns: private socket, no TCP, its own hba and log."""
        tcp = [a for a in (self.listen, *self.peers) if a is not None]
        return {
            "data_directory": str(self.datadir),
            "hba_file": str(self.conf / "pg_hba.conf"),
            "ident_file": str(self.conf / "pg_ident.conf"),
            "listen_addresses": ",".join(dict.fromkeys(a.address for a in tcp)),
            "unix_socket_directories": str(self.socket_dir),
            "unix_socket_permissions": "0700",
            "unix_socket_group": "",
            "port": str(self.port),
            "logging_collector": "off",
        }

    # ---- life cycle ----------------------------------------------------------------
    def create(self, initdb_options: list[str]) -> None:
        self.make_dirs()
        self.initdb(initdb_options)

    def create_from(self, template: Path) -> None:
        """`create`, with the data directory a copy of `template`: a data directory of the
        server user's that initdb made with the same binaries and options (nothing of a
        cluster's own is in it: the files pgsweep writes are written here)."""
        self.make_dirs()
        self._copy(template, self.datadir)
        self.write_access_files()
        self.write_settings({})

    def initdb(self, initdb_options: list[str]) -> None:
        """initdb into the empty data directory `make_dirs` made, then pgsweep's files."""
        argv = [self.binaries.path("initdb"), "-D", str(self.datadir), "-U", ROLE]
        argv += ["--auth-local=trust", "--auth-host=reject", "--encoding=UTF8", "--locale=C"]
        argv += ["--no-instructions", *initdb_options]
        if self.waldir is not None:
            argv.append(f"--waldir={self.waldir}")
        res = self._run(argv, "initdb")
        if not res.ok:
            raise ServerError(f"initdb failed: {res.describe_failure()}")
        self.write_access_files()
        self.write_settings({})

    def set_password(self, verifier: str, roles: Sequence[str] = (ROLE,)) -> None:
        """The roles' password for a client on another host, given as its SCRAM verifier
        (what the server stores), so the password itself is in no statement or log."""
        if not SCRAM.fullmatch(verifier):
            raise ServerError("not a SCRAM-SHA-256 verifier")
        with self.connect() as conn:
            for role in roles:
                quoted = '"' + role.replace('"', '""') + '"'
                conn.execute(f"ALTER ROLE {quoted} PASSWORD '{verifier}'")

    def make_dirs(self) -> None:
        """Root's directories (0711/0700) and the server user's empty leaves."""
        self.host.private_dir(self.root, 0o711)
        self.host.private_dir(self.conf, 0o711)
        self.host.private_dir(self.scratch, 0o700)
        for leaf in (self.datadir, self.logfile.parent, self.socket_dir):
            self.host.leaf_dir(leaf, self.user)
        if self.waldir is not None:
            self.host.leaf_dir(self.waldir, self.user)

    def write_access_files(self) -> None:
        readable = (self.host.ids(None)[0], self.gid)  # root, or us when we run the server
        hba = HBA
        if self.listen is not None:
            peer = self.listen.peer
            hba += f"host all all {peer}/32 trust\nhost replication all {peer}/32 trust\n"
        for p in self.peers:  # another host's role: the run's password, for its use alone
            hba += p.hba_line()
        self.host.write_file(self.conf / "pg_hba.conf", hba, 0o640, readable)
        self.host.write_file(self.conf / "pg_ident.conf", "", 0o640, readable)

    def write_settings(self, settings: dict[str, str]) -> None:
        """The configuration file: the experiment's settings first, pgsweep's own last (a
        setting named twice takes its last value), in a file only root can write."""
        self._settings = dict(settings)
        text = "# written by pgsweep: the experiment's settings, then pgsweep's own\n"
        text += "".join(conf_line(k, v) for k, v in sorted(settings.items()))
        text += "".join(conf_line(k, v) for k, v in self.managed().items())
        self.host.write_file(self.conf / "postgresql.conf", text, 0o640,
                             (self.host.ids(None)[0], self.gid))  # fmt: skip

    def pg_ctl(self, action: str, *extra: str, timeout: float = 120) -> proc.Result:
        argv = self._pg_ctl_argv(action, *extra, timeout=timeout)
        if self.netns is None or action != "start":
            return self._run(argv, f"pg_ctl-{action}", timeout=timeout + 10)
        # the postmaster must start inside the namespace: nsenter (as root) enters it and
        # becomes the server user, with no supplementary group, before pg_ctl runs
        argv = ["nsenter", f"--net=/run/netns/{self.netns}", "--setuid", str(self.uid),
                "--setgid", str(self.gid), "--", *argv]  # fmt: skip
        name = self.user.name if self.user else proc.RunAs.current_name()
        home = self.user.home if self.user else os.environ.get("HOME", "/")
        return self.host.run(argv, out=self.scratch / f"pg_ctl-{action}.out",
                             timeout=timeout + 10,
                        env={"HOME": home, "USER": name, "LOGNAME": name},
                        cwd=Path("/"))  # fmt: skip

    def _pg_ctl_argv(self, action: str, *extra: str, timeout: float) -> list[str]:
        # start needs the configuration directory; stop and reload name the data directory
        # (its PG_VERSION tells pg_ctl so: without it, pg_ctl first runs `postgres -V` and
        # `postgres -C data_directory`, two processes at each stop)
        where = self.conf if action == "start" else self.datadir
        argv = [self.binaries.path("pg_ctl"), "-D", str(where), "-l", str(self.logfile)]
        argv += ["-w", "-t", str(int(timeout)), *extra, action]
        if action == "start":
            # pg_ctl hands these to the server through a shell: quote every value
            opts = " ".join(f"-c {shlex.quote(f'{k}={v}')}" for k, v in self.managed().items())
            # -p: the postgres beside this pg_ctl, which pg_ctl would otherwise look for
            # and check with `postgres -V` twice (strace: three helpers per start, one left,
            # `-C data_directory`: about 35 ms of CPU less at every start)
            argv[-1:-1] = ["-o", opts, "-p", str(self.binaries.path("postgres"))]
        if action == "start" and self.cgroup is not None:
            # the unprivileged pg_ctl moves itself in (its cgroup.procs is chowned to the
            # server user), so the postmaster it forks starts inside the cgroup
            join = 'echo $$ > "$1" && shift && exec "$@"'
            argv = ["sh", "-c", join, "sh", str(self.cgroup / "cgroup.procs"), *argv]
        return argv

    def start(self) -> None:
        self.postmaster_pid()  # collects a postmaster that died, whose PID would block this
        res = self.pg_ctl("start")
        if not res.ok:  # the server's log, or what pg_ctl said when the server wrote none
            raise ServerError(f"the server did not start:\n{self.log_tail() or res.tail()}")

    def stop(self, mode: str = "fast") -> None:
        pid = self.postmaster_pid()
        if pid is None:
            self._reclaim_shared_memory()
            return
        res = self.pg_ctl("stop", "-m", mode, timeout=60)
        if not res.ok and self.postmaster_pid() is not None:
            self.pg_ctl("stop", "-m", "immediate", timeout=30)
        self.host.reap(pid)

    def _reclaim_shared_memory(self) -> None:
        """A postmaster that was killed (kill -9, the OOM killer) leaves its System V
        segment and its /dev/shm/PostgreSQL.* segments behind. The next postmaster of the
        data directory removes them, from what postmaster.pid names, before it writes its
        own segment's key there: start one, and stop it once it has (its own go with it).
        Best effort: nothing to do when the server stopped cleanly (no postmaster.pid)."""
        raw = self._lock_file()
        old = _shmem_line(raw) if raw is not None else None
        if old is None or not _segment_released(self.host, int(old.split()[1]), self.uid):
            return
        self.pg_ctl("start", "-W", timeout=30)  # -W: no wait for recovery, only the reclaim
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            raw = self._lock_file()
            if raw is None:
                break  # the new postmaster gave up (and removed its lock file)
            now = _shmem_line(raw)
            if now is not None and now != old:
                break
            time.sleep(0.05)
        pid = self.postmaster_pid()
        if pid is not None:
            self.pg_ctl("stop", "-m", "immediate", timeout=30)
            self.host.reap(pid)

    def reload(self) -> None:
        res = self.pg_ctl("reload")
        if not res.ok:
            raise ServerError(f"reload failed: {res.describe_failure()}")

    def postmaster_pid(self) -> int | None:
        """PID of a live postmaster of this cluster (run by the server user, started with
        this cluster's configuration directory), or None."""
        first = (self._lock_file() or b"").split(b"\n", 1)[0].strip()
        if not first.isdigit():
            return None
        pid = int(first)
        if is_postmaster_of(pid, self.conf, self.uid, self.host):
            return pid
        self.host.reap(pid)  # a postmaster that died (killed): collect it, or it blocks the next
        return None

    def _lock_file(self) -> bytes | None:
        """postmaster.pid, read as a file of the server user's (never through a link), or
        None when there is none (a cleanly stopped server) or it is not a plain file."""
        try:
            return self.host.read_owned(self.datadir / "postmaster.pid", self.uid, limit=4096)
        except (OSError, safefs.UnsafePath):
            return None

    # ---- data snapshot -------------------------------------------------------------
    def take_snapshot(self) -> None:
        """Copy the stopped, loaded data directory aside (reflink where the fs can)."""
        self.stop()
        self._copy(self.datadir, self.snapshot_dir)
        if self.waldir is not None and self.wal_snapshot is not None:
            self._copy(self.waldir, self.wal_snapshot)
        self.host.sync()  # the load's and the copy's dirty pages, before any window opens

    def restore_snapshot(self) -> None:
        """Put the loaded data back."""
        self.stop()
        self._copy(self.snapshot_dir, self.datadir)
        if self.waldir is not None and self.wal_snapshot is not None:
            self._copy(self.wal_snapshot, self.waldir)  # the WAL the copied pg_wal link names
        # The copy left dirty pages; flush them now so their writeback does not land in
        # the next measurement window.
        self.host.sync()

    def _copy(self, src: Path, dst: Path) -> None:
        """Replace `dst` by a copy of `src`. Root removes the old tree (through directory
        descriptors, never following a link) and makes the empty leaf; the server user
        copies (`cp -a --reflink=auto` keeps modes and clones blocks on btrfs/xfs/zfs)."""
        self.host.remove_tree(dst)
        self.host.leaf_dir(dst, self.user)
        res = self._run(["cp", "-a", "--reflink=auto", f"{src}/.", f"{dst}/"], "cp", 3600)
        if not res.ok:
            raise ServerError(f"copying {src} to {dst} failed: {res.describe_failure()}")

    def destroy(self) -> None:
        self.stop(mode="immediate")
        for tree in (self.root, self.waldir, self.wal_snapshot, self.socket_dir):
            if tree is not None:
                with suppress(PgsweepError):  # best effort: the work area's removal follows
                    self.host.remove_tree(tree)


def _shmem_line(raw: bytes) -> str | None:
    """postmaster.pid's 7th line: the key and id of the server's System V segment (two
    numbers; the server user writes this file, so anything else is None)."""
    lines = raw.decode(errors="replace").splitlines()
    fields = lines[6].split() if len(lines) > 6 else []
    return " ".join(fields) if len(fields) == 2 and all(f.isdigit() for f in fields) else None


def _segment_released(host: Host, shmid: int, uid: int, wait: float = 10.0) -> bool:
    """Once the children of a killed postmaster have exited (they notice within a moment),
    its segment has no process attached and a new postmaster may remove it. False when the
    segment is gone, is not the server user's, or stays attached."""
    deadline = time.monotonic() + wait
    while True:
        row = next((r for r in _sysv_segments(host) if r[0] == shmid), None)
        if row is None or row[2] != uid:
            return False
        if row[1] == 0:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)


def _sysv_segments(host: Host) -> list[tuple[int, int, int]]:
    """(shmid, processes attached, owner uid) of every System V segment."""
    lines = host.read_text(Path("/proc/sysvipc/shm")).splitlines()
    shmid, nattch, uid = (lines[0].split().index(k) for k in ("shmid", "nattch", "uid"))
    rows = [line.split() for line in lines[1:]]
    return [(int(r[shmid]), int(r[nattch]), int(r[uid])) for r in rows]


def is_postmaster_of(pid: int, confdir: Path, uid: int, host: Host = LOCAL) -> bool:
    """Is `pid` a postgres process run by `uid` whose command line names `confdir` with -D
    (pg_ctl starts the postmaster so)? Never a process pgsweep did not start."""
    seen = host.process(pid)
    if seen is None:
        return False
    argv, owner = seen
    # not the `postgres -C data_directory -D CONF` pg_ctl runs for a moment
    named = "-D" in argv and str(confdir) in argv and "-C" not in argv
    return owner == uid and named
