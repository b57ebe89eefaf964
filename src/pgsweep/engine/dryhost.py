"""The machine a dry run (`plan --commands`) walks a plan on: this machine's files and
kernel values read as they are (read only), every effect recorded and never made
(host/recording.py), and PostgreSQL's own programs answered as if they succeeded: `pg_ctl
start` leaves a pretend postmaster (its postmaster.pid, a process that is not on this
machine), `stop` takes it away, `reload` moves the configuration's load time, and SQL is
answered as a fresh server would. What the run reads back from a server (a level in
force, the data's size) is therefore what it asked for: the dry run shows what a run
does when every step succeeds, never what a server would say."""

from __future__ import annotations

import contextlib
import datetime as dt
import re
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from ..host import blockdev
from ..host.api import Connection
from ..host.blockdev import DeviceError, Grant
from ..host.local import LOCAL
from ..host.proc import Result, RunAs
from ..host.recording import Effect, RecordingHost, Reply
from ..postgres.standby import SLOT_PREFIX

# Linux never gives a process a PID above 2**22 (PID_MAX_LIMIT): a pretend postmaster's
# PID can name no process of this machine
FIRST_PID = 5_000_000
EMPTY_DB = 7_600_000  # bytes of a fresh `postgres` database (PostgreSQL 15, here)
PER_SCALE = 15_000_000  # bytes one pgbench scale unit adds (pgbench -i)
DRY = "DRYRUN"  # in every path the dry run names for what a run makes with a random name
_CONF_LINE = re.compile(r"^([a-z0-9_.]+) = '((?:[^']|'')*)'$", re.M)


class _Rows:
    def __init__(self, rows: list[tuple[Any, ...]]) -> None:
        self._rows = rows
        self.description: list[Any] = []  # no columns: counters read nothing from them

    def fetchone(self) -> tuple[Any, ...] | None:
        return self._rows.pop(0) if self._rows else None

    def fetchall(self) -> list[tuple[Any, ...]]:
        rows, self._rows = self._rows, []
        return rows


class DryHost(RecordingHost):
    loop_name = f"/dev/loop{DRY}"  # the kernel picks the device when the run attaches it

    def __init__(self, users: Mapping[str | None, tuple[int, int]],
                 canonical: Mapping[str, Mapping[str, str]], name: str = "local (a dry run)",
                 streaming: set[str] | None = None) -> None:  # fmt: skip
        super().__init__(name, users=users, reads_from=LOCAL,
                         commands=[(lambda argv: True, Reply())])  # fmt: skip
        self.canonical = canonical
        # the standbys a pg_basebackup made, on this host or a standby host's (shared):
        # the primary's pg_stat_replication shows them streaming, caught up
        self.streaming = streaming if streaming is not None else set()
        self.next_pid = FIRST_PID
        self.reloads = 0
        self.scale = 0  # of the last pgbench -i: the pretend database's size

    def claim_device(self, device: Path, grant: Grant, ours: Mapping[str, frozenset[str]],
                     scratch: Path) -> Path:  # fmt: skip
        """The device the path names on this machine, if the command line allowed it (`plan`
        checked it is free, read only; a run checks again right before its mkfs)."""
        real = blockdev.real_device(device)  # DeviceError: not a device here (read only)
        mine = sorted(ours.get(str(real), ()))
        self.effects.append(Effect("claim_device", str(device), {"ours": mine}))
        if not grant.allows(real):
            raise DeviceError(f"refusing to format {device}: the command line did not allow it")
        return real

    # ---- PostgreSQL's programs ---------------------------------------------------------
    def run(self, argv: list[str], *, out: Path, err: Path | None = None, timeout: float = 60.0,
            user: RunAs | None = None, cwd: Path | None = None,
            env: dict[str, str] | None = None) -> Result:  # fmt: skip
        result = super().run(argv, out=out, err=err, timeout=timeout, user=user, cwd=cwd,
                             env=env)  # fmt: skip
        names = [Path(a).name for a in argv]
        if "pg_ctl" in names:
            self._pg_ctl(argv[names.index("pg_ctl"):], user)
        elif "pgbench" in names and "-i" in argv and "-s" in argv:
            self.scale = int(argv[argv.index("-s") + 1])
        elif "pg_basebackup" in names and "-S" in argv:
            self.streaming.add(argv[argv.index("-S") + 1].removeprefix(SLOT_PREFIX))
        return result

    def _pg_ctl(self, argv: list[str], user: RunAs | None) -> None:
        conf = Path(argv[argv.index("-D") + 1])
        pidfile = str(conf.parent / "data" / "postmaster.pid")
        action = argv[-1]
        if action == "start":
            self.next_pid += 1
            self.files[pidfile] = f"{self.next_pid}\n"
            self.processes[self.next_pid] = (["postgres", "-D", str(conf)], self.ids(user)[0])
        elif action == "stop" and pidfile in self.files:
            self.processes.pop(int(self.files.pop(pidfile).split()[0]), None)
        elif action == "reload":
            self.reloads += 1

    # ---- the kernel: a cgroup made is empty; a value written was read from here -------
    def make_kernel_dir(self, path: Path) -> None:
        super().make_kernel_dir(path)
        self.files[str(path / "cgroup.procs")] = ""

    def write_kernel(self, path: Path, value: str) -> None:
        if str(path) not in self.files:  # what it reads now, on this machine, as the old value
            with contextlib.suppress(OSError):
                self.files[str(path)] = LOCAL.read_text(path)
        super().write_kernel(path, value)

    # ---- SQL -------------------------------------------------------------------------
    def connect(self, conninfo: Mapping[str, Any]) -> AbstractContextManager[Connection]:
        return self._dry_session(conninfo)

    @contextlib.contextmanager
    def _dry_session(self, conninfo: Mapping[str, Any]) -> Iterator[Connection]:
        yield _Session(self, str(conninfo.get("host", "")))

    def answer(self, socket: str, query: str, params: Any) -> list[tuple[Any, ...]]:
        if "pg_postmaster_start_time" in query:  # a new one at each start (prewarm asks)
            return [(dt.datetime(2000, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=self.next_pid),)]
        if "pg_conf_load_time" in query:
            return [(self.reloads,)]
        if "FROM pg_settings" in query and params:
            text = self._written(socket).get(str(params[0]))
            if text is None:
                return []
            shown = self.canonical.get(str(params[0]), {}).get(text, text)
            return [(shown, False, "configuration file", text)]
        if "pg_database_size" in query:
            return [(EMPTY_DB + PER_SCALE * self.scale,)]
        if "pg_available_extensions" in query or "pg_extension" in query:
            return [(1,)]
        if "system_identifier" in query:
            return [(0, "DRYRUN")]
        if "pg_current_wal_lsn()" in query:
            return [("0/0",)]
        if "FROM pg_stat_replication" in query:
            return self._replication(socket)
        return []

    def _replication(self, socket: str) -> list[tuple[Any, ...]]:
        """Every standby made streaming and caught up, in the sync state the primary's
        synchronous_standby_names gives it (FIRST n: the first n named are sync, the
        others potential; ANY: quorum; not named: async)."""
        names = self._written(socket).get("synchronous_standby_names", "").strip()
        m = re.match(r"(?:(FIRST|ANY)\s+)?(\d+)\s*\((.*)\)$", names, re.I)
        kind, count, inside = (m.group(1) or "FIRST", m.group(2), m.group(3)) if m else (
            "FIRST", "1", names)  # the old form: a plain list, its first one sync
        listed = [n.strip().strip('"') for n in inside.split(",") if n.strip()]
        rows = []
        for name in sorted(self.streaming):
            state = "async"
            if name in listed:
                first = listed.index(name) < int(count)
                state = ("quorum" if kind.upper() == "ANY" else "sync" if first
                         else "potential")  # fmt: skip
            rows.append((name, "streaming", state, True))
        return rows

    def _written(self, socket: str) -> dict[str, str]:
        """The settings in the configuration file of the cluster whose socket is
        `socket` (as the last write left it)."""
        line = f"unix_socket_directories = '{socket}'"
        for path, text in self.files.items():
            if path.endswith("/postgresql.conf") and line in text:
                return {m[1]: m[2].replace("''", "'") for m in _CONF_LINE.finditer(text)}
        return {}


class _Session:
    def __init__(self, host: DryHost, socket: str) -> None:
        self.host, self.socket = host, socket

    def execute(self, query: str, params: Any = None) -> _Rows:
        what = " ".join(query.split())
        self.host.effects.append(Effect("sql", what, {"params": params} if params else {}))
        return _Rows(self.host.answer(self.socket, query, params))
