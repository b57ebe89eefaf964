"""`pgsweep agent`: the far end of a RemoteHost. Started over SSH for the length of a run,
it reads CALL frames on stdin, runs each on this machine's LocalHost (the same link-safe
file, journal and process code a local run uses) and writes a REPLY frame on stdout.

It listens on no port and leaves no daemon: when its stdin ends (the controller exited,
was killed, or the SSH connection broke) or a BYE arrives, it stops what it started: the
process group of a call under way, every postmaster in the work areas it made, then those
work areas. Calls run one at a time in the main thread; a reader thread answers PINGs and
notices the end of stdin while a long call (a measured pgbench) runs."""

from __future__ import annotations

import contextlib
import datetime as dt
import decimal
import os
import queue
import signal
import socket
import sys
import threading
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from .. import __version__
from . import buildcopy, journal, proc, wire, workarea
from .local import LocalHost
from .proc import RunAs


def encode_value(value: Any) -> Any:
    """What crosses the wire for a SQL value or a result (JSON, with tags for the rest)."""
    if isinstance(value, dt.datetime):
        return {"__datetime__": value.isoformat()}
    if isinstance(value, dt.timedelta):
        return {"__timedelta__": value.total_seconds()}
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, tuple | list):
        return [encode_value(v) for v in value]
    if isinstance(value, dict):  # a SQL result: {"names": ..., "rows": ...}
        return {k: encode_value(v) for k, v in value.items()}
    return value


class Agent:
    def __init__(self, stdin: BinaryIO, stdout: BinaryIO) -> None:
        self.host = LocalHost(socket.gethostname())
        self.stdin, self.stdout = stdin, stdout
        self.calls: queue.Queue[wire.Frame | None] = queue.Queue()
        self.write_lock = threading.Lock()
        self.sessions: dict[int, Any] = {}  # psycopg connections by handle
        self.areas: list[workarea.WorkArea] = []  # made here, removed when the agent ends
        self.devices: set[str] = set()  # block devices attached or claimed for the run here
        self.pools: set[str] = set()  # zfs-fuse pools created for the run here
        self.incoming = buildcopy.Incoming()  # builds being copied here
        self.cgroups: set[str] = set()  # memory cgroups made here for the run

    # ---- the loop ------------------------------------------------------------------
    def serve(self) -> None:
        hello = wire.read_frame(self.stdin)
        if hello.kind != wire.HELLO:
            raise wire.WireError("the first frame was not a hello")
        self._send(wire.Frame(wire.HELLO, hello.request, self._hello()))
        threading.Thread(target=self._read, daemon=True).start()
        try:
            while (frame := self.calls.get()) is not None:
                self._reply(frame.request, self._call(frame.payload))
        finally:
            self.clean_up()

    def _read(self) -> None:
        """PINGs answered at once; CALLs queued; the end of stdin or a BYE ends the agent,
        stopping a call under way (its process group) so the main thread can clean up."""
        try:
            while True:
                frame = wire.read_frame(self.stdin)
                if frame.kind == wire.PING:
                    self._send(wire.Frame(wire.PONG, frame.request, {}))
                elif frame.kind == wire.CALL:
                    self.calls.put(frame)
                elif frame.kind == wire.BYE:
                    break
        except (wire.WireError, OSError):
            proc.stop_all_started()  # the controller is gone: stop what runs for it
        self.calls.put(None)

    def _reply(self, request: int, reply: dict[str, Any]) -> None:
        """A reply that cannot cross the wire (a value JSON cannot hold, over the cap) is
        an error the controller gets, not the agent's end (nothing was written yet)."""
        try:
            self._send(wire.Frame(wire.REPLY, request, reply))
        except (TypeError, ValueError, wire.WireError) as exc:
            self._send(wire.Frame(wire.REPLY, request, {"error": {
                "type": "WireError", "message": f"the reply could not be sent: {exc}"}}))

    def _send(self, frame: wire.Frame) -> None:
        with self.write_lock:
            wire.write_frame(self.stdout, frame)

    def _hello(self) -> dict[str, Any]:
        return {"protocol": wire.PROTOCOL, "version": __version__, "uid": os.geteuid(),
                "hostname": socket.gethostname(),
                "work_base": str(workarea.fallback_base()),  # where its work areas go
                "ssh_connection": os.environ.get("SSH_CONNECTION", "")}  # fmt: skip

    def _call(self, payload: dict[str, Any]) -> dict[str, Any]:
        method, args = payload.get("method", ""), payload.get("args", {})
        handler = getattr(self, f"do_{method}", None)
        if handler is None:
            return {"error": {"type": "WireError", "message": f"no method {method!r}"}}
        try:
            return {"value": encode_value(handler(**args))}
        except Exception as exc:  # every failure travels back, typed
            what = exc.what if hasattr(exc, "what") else str(exc)
            kind = type(exc).__name__
            if type(exc).__module__.startswith("psycopg"):
                kind = f"psycopg.{kind}"
            return {"error": {"type": kind, "message": what,
                              "errno": getattr(exc, "errno", None),
                              "trace": traceback.format_exc()[-2000:]}}  # fmt: skip

    # ---- methods: the Host interface -------------------------------------------------
    def do_run(self, argv: list[str], out: str, err: str | None, timeout: float,
               user: str | None, cwd: str | None, env: dict[str, str] | None) -> dict[str, Any]:
        res = self.host.run(argv, out=Path(out), err=Path(err) if err else None,
                            timeout=timeout, user=RunAs(user) if user else None,
                            cwd=Path(cwd) if cwd else None, env=env)  # fmt: skip
        return {"argv": res.argv, "returncode": res.returncode, "stdout_path": res.stdout_path,
                "stderr_path": res.stderr_path, "seconds": res.seconds,
                "timed_out": res.timed_out}  # fmt: skip

    def do_start(self, argv: list[str], out: str, err: str, user: str | None,
                 env: dict[str, str] | None) -> int:  # fmt: skip
        return self.host.start(argv, out=Path(out), err=Path(err),
                               user=RunAs(user) if user else None, env=env)  # fmt: skip

    def do_poll(self, pid: int) -> int | None:
        return self.host.poll(pid)

    def do_stop(self, pid: int, grace: float) -> int | None:
        return self.host.stop(pid, grace)

    def do_output(self, path: str, limit: int) -> bytes:
        return self.host.output(Path(path), limit)

    def do_process(self, pid: int) -> Any:
        return self.host.process(pid)

    def do_reap(self, pid: int) -> None:
        self.host.reap(pid)

    def do_ids(self, user: str | None) -> Any:
        return self.host.ids(RunAs(user) if user else None)

    def do_private_dir(self, path: str, mode: int) -> str:
        return str(self.host.private_dir(Path(path), mode))

    def do_leaf_dir(self, path: str, user: str | None, mode: int) -> str:
        return str(self.host.leaf_dir(Path(path), RunAs(user) if user else None, mode))

    def do_write_file(self, path: str, data: bytes | str, mode: int,
                      owner: list[int] | None) -> None:  # fmt: skip
        self.host.write_file(Path(path), data, mode, (owner[0], owner[1]) if owner else None)

    def do_remove_tree(self, path: str) -> None:
        self.host.remove_tree(Path(path))

    def do_read_owned(self, path: str, uid: int, limit: int, tail: bool, offset: int) -> bytes:
        return self.host.read_owned(Path(path), uid, limit, tail=tail, offset=offset)

    def do_owned_size(self, path: str, uid: int) -> int:
        return self.host.owned_size(Path(path), uid)

    def do_list_owned(self, directory: str) -> list[str]:
        return self.host.list_owned(Path(directory))

    def do_read_text(self, path: str) -> str:
        return self.host.read_text(Path(path))

    def do_read_texts(self, paths: list[str]) -> list[str | None]:
        return self.host.read_texts([Path(p) for p in paths])

    def do_lstat(self, path: str) -> Any:
        st = self.host.lstat(Path(path))
        return None if st is None else [st.mode, st.uid, st.gid, st.size, st.is_dir,
                                        st.is_file, st.is_link]  # fmt: skip

    def do_sync(self) -> None:
        self.host.sync()

    def do_hold_kernel_lock(self, who: str) -> None:
        """Held by this agent until it exits, as a local run holds it until it exits."""
        self.host.hold_kernel_lock(who)

    def do_make_kernel_dir(self, path: str) -> None:
        from .journal import allowed

        if not allowed(path):  # the agent holds the same line as a local run
            raise OSError(f"pgsweep does not make {path}")
        self.host.make_kernel_dir(Path(path))
        self.cgroups.add(path)  # its limit and counters are this agent's to write

    def do_chown(self, path: str, uid: int, gid: int) -> None:
        from .journal import allowed

        if not allowed(str(Path(path).parent)):
            raise OSError(f"pgsweep does not hand over {path}")
        self.host.chown(Path(path), uid, gid)

    def do_write_kernel(self, path: str, value: str) -> None:
        from .journal import writable

        if not writable(path, self.cgroups):
            raise OSError(f"pgsweep does not change {path}")
        self.host.write_kernel(Path(path), value)

    def do_append_journal(self, path: str, line: str) -> None:
        if Path(path).parent != workarea.registry():  # journals live in the registry alone
            raise OSError(f"{path} is not in this host's registry of runs")
        self.host.append_journal(Path(path), line)

    def do_restore_journal(self, path: str, work_root: str | None) -> Any:
        if Path(path).parent != workarea.registry():
            raise OSError(f"{path} is not in this host's registry of runs")
        done, owed = self.host.restore_journal(Path(path), Path(work_root) if work_root else None)
        return [done, sorted(owed)]

    # ---- block devices and zfs-fuse: images, mount points and scratch folders in a work
    # area this agent made; mkfs and mount only on a device it attached or claimed, pools
    # only by pgsweep's names, once created here (the same line a local run holds) --------
    def _in_my_area(self, *paths: str) -> None:
        from .blockdev import in_work_area

        for path in paths:
            if not any(in_work_area(Path(path), a.workdir) for a in self.areas):
                raise OSError(f"{path} is not in a work area of this run on this host")

    def _mine(self, device: str) -> None:
        if device not in self.devices:
            raise OSError(f"{device} was not attached or claimed for this run on this host")

    def do_attach_loop(self, image: str, size: int, sector_size: int | None, direct_io: bool,
                       scratch: str) -> str:  # fmt: skip
        self._in_my_area(image, scratch)
        device = str(self.host.attach_loop(Path(image), size, sector_size, direct_io,
                                           Path(scratch)))  # fmt: skip
        self.devices.add(device)
        return device

    def do_claim_device(self, device: str, devices: list[str], wipe: bool,
                        ours: dict[str, list[str]], scratch: str) -> str:  # fmt: skip
        from .blockdev import Grant

        self._in_my_area(scratch)
        grant = Grant(tuple(Path(d) for d in devices), wipe)
        made = {k: frozenset(v) for k, v in ours.items()}
        real = str(self.host.claim_device(Path(device), grant, made, Path(scratch)))
        self.devices.add(real)
        return real

    def do_make_filesystem(self, fstype: str, device: str, options: str,
                           scratch: str) -> str | None:  # fmt: skip
        self._in_my_area(scratch)
        self._mine(device)
        return self.host.make_filesystem(fstype, Path(device), options, Path(scratch))

    def do_mount(self, fstype: str, device: str, point: str, options: str, scratch: str,
                 nocow: bool) -> None:  # fmt: skip
        self._in_my_area(point, scratch)
        self._mine(device)
        self.host.mount(fstype, Path(device), Path(point), options, Path(scratch), nocow)

    def do_has_nocow(self, path: str) -> bool:
        return self.host.has_nocow(Path(path))

    def do_zfs_create(self, pool: str, device: str, point: str, values: dict[str, Any],
                      scratch: str) -> None:  # fmt: skip
        from .zfsfuse import OUR_POOL

        self._in_my_area(point, scratch)
        self._mine(device)
        if not OUR_POOL.fullmatch(pool):
            raise OSError(f"{pool} is not a pool name pgsweep gives")
        self.pools.add(pool)
        self.host.zfs_create(pool, Path(device), Path(point), values, Path(scratch))

    def _pool(self, pool: str, scratch: str) -> None:
        self._in_my_area(scratch)
        if pool not in self.pools:
            raise OSError(f"{pool} was not created for this run on this host")

    def do_zfs_change(self, pool: str, props: dict[str, str], drop_arc: bool,
                      scratch: str) -> None:  # fmt: skip
        self._pool(pool, scratch)
        self.host.zfs_change(pool, props, drop_arc, Path(scratch))

    def do_zfs_properties(self, pool: str, scratch: str) -> dict[str, str]:
        self._pool(pool, scratch)
        return self.host.zfs_properties(pool, Path(scratch))

    def do_free_port(self, addresses: list[str]) -> int:
        return self.host.free_port(addresses)

    def do_build_copy(self, key: str, uid: int, data: bytes, sha256: str | None) -> Any:
        return self.incoming.take(key, uid, data, sha256)

    def do_which(self, program: str) -> str | None:
        return self.host.which(program)

    def do_free_bytes(self, path: str) -> int:
        return self.host.free_bytes(Path(path))

    def do_source_address(self, address: str) -> str:
        return self.host.source_address(address)

    def do_tcp_rtt(self, address: str, port: int, probes: int) -> float:
        return self.host.tcp_rtt(address, port, probes)

    # ---- SQL sessions: a connection lives here, the controller holds a handle ----------
    def do_sql_open(self, conninfo: dict[str, Any]) -> int:
        import psycopg

        conn = psycopg.connect(**conninfo, autocommit=True, connect_timeout=10)
        handle = max(self.sessions, default=0) + 1
        self.sessions[handle] = conn
        return handle

    def do_sql_execute(self, handle: int, query: str, params: Any) -> dict[str, Any]:
        cur = self.sessions[handle].execute(query, params)
        names = [d.name for d in cur.description] if cur.description else []
        return {"names": names, "rows": cur.fetchall() if cur.description else []}

    def do_sql_close(self, handle: int) -> None:
        conn = self.sessions.pop(handle, None)
        if conn is not None:
            conn.close()

    # ---- the work area: made here, and all of it gone when the agent ends --------------
    def do_work_area(self, name: str, user: str | None) -> dict[str, str]:
        """This run's work area on this host: root-owned, registered as a run's is (so
        `pgsweep cleanup` here finds it if the agent itself is killed), and removed when
        the agent ends, every postmaster in it stopped first."""
        area = workarea.WorkArea.for_agent(name, RunAs(user) if user else None)
        self.areas.append(area)
        return {"workdir": str(area.workdir), "private": str(area.private),
                "socket_root": str(area.socket_root), "run": area.run,
                "registry": str(workarea.registry())}  # fmt: skip

    def do_restore(self) -> list[str]:
        """`pgsweep restore` on this host: what killed runs (a killed agent's too) left."""
        done, failed = journal.recover_stale(self.host)
        return [*done, *failed]

    def clean_up(self) -> None:
        for conn in self.sessions.values():
            with contextlib.suppress(Exception):
                conn.close()
        with _ignoring_signals():
            self._clean_up()

    def _clean_up(self) -> None:
        proc.stop_all_started()
        for area in self.areas:
            for line in area.stop_servers():
                _say(f"pgsweep agent: {line}")
            # what the run made here and journaled (kernel values, storage), newest part
            # first, before the work area its mounts live in goes
            for path in sorted(workarea.registry_dir().glob(f"{area.run}.*undo"), reverse=True):
                for line in self.host.restore_journal(path, area.workdir)[0]:
                    _say(f"pgsweep agent: {line}")
            for line in area.remove():
                _say(f"pgsweep agent: {line}")
        if self.areas and not list(workarea.registry_dir().glob(f"{self.areas[0].run}.*undo")):
            workarea.forget_lock(self.areas[0].run)


@contextlib.contextmanager
def _ignoring_signals() -> Iterator[None]:
    """Cleanup runs to its end: a second hang-up or SIGTERM does not cut it short."""
    old = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGHUP, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


class Gone(Exception):
    """The connection ended under the agent (sshd's SIGHUP, a SIGTERM): clean up, exit."""


def _gone(signum: int, frame: object) -> None:
    raise Gone(signal.Signals(signum).name)


def main() -> int:
    """`pgsweep agent`: serve frames on stdin/stdout until they end. A hang-up (sshd sends
    one when the connection drops) or a SIGTERM ends it the same way: what it started is
    stopped and its work areas removed before it exits."""
    os.umask(0o077)
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing but frames may reach the controller's stream
    for sig in (signal.SIGHUP, signal.SIGTERM):
        signal.signal(sig, _gone)
    try:
        Agent(stdin, stdout).serve()
    except (wire.WireError, Gone, BrokenPipeError) as exc:
        _say(f"pgsweep agent: {exc}")
        return 1
    return 0


def _say(line: str) -> None:
    with contextlib.suppress(OSError, ValueError):  # stderr may be gone with the connection
        print(line, file=sys.stderr)

