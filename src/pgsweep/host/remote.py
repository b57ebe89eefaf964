"""Another machine as a Host: `pgsweep agent` started over SSH with the OpenSSH client, one
long-lived connection per host for the length of a run, frames on its stdin/stdout.

Why the OpenSSH client: it is the user's own configuration as it is (~/.ssh/config, the
agent, ProxyJump, known_hosts), with no Python SSH stack to keep in step with it. It runs
with BatchMode (a password or passphrase prompt fails at once instead of hanging),
StrictHostKeyChecking=yes (an unknown or changed host key is refused, never accepted),
ServerAlive probes (a dead network is noticed in seconds) and no connection sharing (no
control socket to go stale). The one shell string is the remote command, built once with
shlex.join; arguments and results travel as JSON in frames.

A broken connection raises HostLost naming the host and what was under way; the
controller's death ends the agent's stdin, and the agent puts its host back."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import shlex
import subprocess
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import __version__
from ..errors import PgsweepError
from . import safefs, wire
from .api import Connection, FileStat, Host, HostLost
from .blockdev import DeviceError, Grant
from .builds import Build, BuildSpec
from .proc import Result, RunAs
from .zfsfuse import ZfsError


@dataclass(frozen=True)
class Target:
    """How to reach a host: what [hosts.NAME] says."""

    name: str
    ssh: str  # the destination as ssh takes it: [user@]host
    identity_file: Path | None = None
    known_hosts: Path | None = None
    pgsweep: str = "pgsweep"  # the command that runs pgsweep there
    port: int | None = None

    def entry(self) -> dict[str, str]:
        """As a journal entry holds it (strings only)."""
        return {"ssh": self.ssh, "identity_file": str(self.identity_file or ""),
                "known_hosts": str(self.known_hosts or ""), "pgsweep": self.pgsweep}  # fmt: skip

    @classmethod
    def from_entry(cls, name: str, entry: dict[str, str]) -> Target:
        key, known = entry.get("identity_file"), entry.get("known_hosts")
        return cls(name, entry["ssh"], Path(key) if key else None,
                   Path(known) if known else None, entry.get("pgsweep", "pgsweep"))  # fmt: skip

    def argv(self) -> list[str]:
        argv = ["ssh", "-T", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes",
                "-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=3",
                "-o", "ConnectTimeout=10", "-o", "ControlMaster=no", "-o", "ControlPath=none",
                "-o", "LogLevel=ERROR"]  # fmt: skip
        if self.identity_file is not None:
            argv += ["-i", str(self.identity_file), "-o", "IdentitiesOnly=yes"]
        if self.known_hosts is not None:
            argv += ["-o", f"UserKnownHostsFile={self.known_hosts}"]
        if self.port is not None:
            argv += ["-p", str(self.port)]
        return [*argv, "--", self.ssh, shlex.join([*shlex.split(self.pgsweep), "agent"])]


class _RemoteRows:
    def __init__(self, names: list[str], rows: list[list[Any]]) -> None:
        self.description = [type("Column", (), {"name": n})() for n in names] or None
        self._rows = [tuple(_decode(v) for v in r) for r in rows]

    def fetchone(self) -> tuple[Any, ...] | None:
        return self._rows.pop(0) if self._rows else None

    def fetchall(self) -> list[tuple[Any, ...]]:
        rows, self._rows = self._rows, []
        return rows


def _decode(value: Any) -> Any:
    if isinstance(value, dict) and "__datetime__" in value:
        return dt.datetime.fromisoformat(value["__datetime__"])
    if isinstance(value, dict) and "__timedelta__" in value:
        return dt.timedelta(seconds=value["__timedelta__"])
    return value


class _RemoteConnection:
    def __init__(self, host: RemoteHost, handle: int) -> None:
        self.host, self.handle = host, handle

    def execute(self, query: str, params: Any = None) -> _RemoteRows:
        args = list(params) if isinstance(params, tuple) else params
        got = self.host.call("sql_execute", handle=self.handle, query=query, params=args)
        return _RemoteRows(got["names"], got["rows"])


class RemoteHost(Host):
    """A host reached over SSH. `open()` starts the agent and checks its hello."""

    def __init__(self, target: Target) -> None:
        self.name = target.name
        self.target = target
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()
        self._next = 0
        self.hello: dict[str, Any] = {}
        self.calls = 0  # messages this run sent (the agent's cost, bench/agent)
        # close() saw the agent end by itself, its host put back (False: killed, or it
        # had ended before: its host may hold what `pgsweep restore` puts back)
        self.closed_cleanly = False

    # ---- the connection ------------------------------------------------------------
    def open(self) -> RemoteHost:
        self._proc = subprocess.Popen(self.target.argv(), stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      start_new_session=True)  # fmt: skip
        try:
            self.hello = self._exchange(wire.HELLO, {"protocol": wire.PROTOCOL,
                                                     "version": __version__})  # fmt: skip
        except HostLost as exc:
            raise PgsweepError(
                f"host {self.name} ({self.target.ssh}) could not be reached: {exc}",
                fix=f"check that `{shlex.join(self.target.argv()[:-1])} true` works without a "
                "prompt (a key in the agent or identity_file, the host key in known_hosts), "
                f"and that `{self.target.pgsweep}` runs there",
            ) from None  # fmt: skip
        if self.hello.get("version") != __version__:
            self.close()
            raise PgsweepError(
                f"host {self.name} runs pgsweep {self.hello.get('version')}, this is "
                f"pgsweep {__version__}", fix="install the same pgsweep on every host",
            )  # fmt: skip
        return self

    def alive(self) -> bool:
        """The agent is still there: its ssh runs, and it answers a ping at once."""
        if self._proc is None or self._proc.poll() is not None:
            return False
        try:
            self._exchange(wire.PING, {})
        except HostLost:
            return False
        return True

    def close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        with contextlib.suppress(OSError, ValueError):
            wire.write_frame(proc.stdin, wire.Frame(wire.BYE, 0, {}))  # type: ignore[arg-type]
            proc.stdin.close()  # type: ignore[union-attr]
        ended = proc.poll() is None  # still there to be told
        try:
            proc.wait(timeout=60)  # the agent cleans up, then exits
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            ended = False
        self.closed_cleanly = ended and proc.returncode == 0

    def _exchange(self, kind: int, payload: Any) -> Any:
        with self._lock:
            proc = self._proc
            if proc is None or proc.poll() is not None:
                raise HostLost(self._lost("the connection is closed"))
            self._next += 1
            try:
                wire.write_frame(proc.stdin, wire.Frame(kind, self._next, payload))  # type: ignore[arg-type]
                while True:
                    frame = wire.read_frame(proc.stdout)  # type: ignore[arg-type]
                    if frame.request == self._next:
                        return frame.payload
            except (wire.WireError, OSError) as exc:
                raise HostLost(self._lost(str(exc))) from None

    def _lost(self, why: str) -> str:
        err = b""
        if self._proc is not None:
            # its stdout ended: ssh is on its way out, and what it says (a host key it
            # refused) is on stderr once it has gone; a loaded machine reaps it later
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(timeout=5)
        if self._proc is not None and self._proc.poll() is not None and self._proc.stderr:
            with contextlib.suppress(OSError):
                err = self._proc.stderr.read()[-2000:]
        said = err.decode(errors="replace").strip()
        return f"host {self.name} ({self.target.ssh}) was lost: {why}" + (
            f"; ssh said: {said}" if said else "")  # fmt: skip

    def call(self, method: str, **args: Any) -> Any:
        self.calls += 1
        reply = self._exchange(wire.CALL, {"method": method, "args": args})
        if "error" in reply:
            raise _error(self.name, method, reply["error"])
        return reply.get("value")

    # ---- the Host interface ----------------------------------------------------------
    def run(self, argv: list[str], *, out: Path, err: Path | None = None, timeout: float = 60.0,
            user: RunAs | None = None, cwd: Path | None = None,
            env: dict[str, str] | None = None) -> Result:  # fmt: skip
        got = self.call("run", argv=argv, out=str(out), err=str(err) if err else None,
                        timeout=timeout, user=user.name if user else None,
                        cwd=str(cwd) if cwd else None, env=env)  # fmt: skip
        return Result(got["argv"], got["returncode"], Path(got["stdout_path"]),
                      Path(got["stderr_path"]), got["seconds"], got["timed_out"],
                      reader=self.output)  # fmt: skip

    def start(self, argv: list[str], *, out: Path, err: Path, user: RunAs | None = None,
              env: dict[str, str] | None = None) -> int:  # fmt: skip
        return int(self.call("start", argv=argv, out=str(out), err=str(err),
                             user=user.name if user else None, env=env))  # fmt: skip

    def poll(self, pid: int) -> int | None:
        got = self.call("poll", pid=pid)
        return None if got is None else int(got)

    def stop(self, pid: int, grace: float = 5.0) -> int | None:
        got = self.call("stop", pid=pid, grace=grace)
        return None if got is None else int(got)

    def output(self, path: Path, limit: int = 64 << 20) -> bytes:
        return bytes(self.call("output", path=str(path), limit=limit))

    def process(self, pid: int) -> tuple[list[str], int] | None:
        got = self.call("process", pid=pid)
        return None if got is None else (list(got[0]), int(got[1]))

    def reap(self, pid: int) -> None:
        self.call("reap", pid=pid)

    def ids(self, user: RunAs | None) -> tuple[int, int]:
        uid, gid = self.call("ids", user=user.name if user else None)
        return int(uid), int(gid)

    def private_dir(self, path: Path, mode: int = 0o700) -> Path:
        return Path(self.call("private_dir", path=str(path), mode=mode))

    def leaf_dir(self, path: Path, user: RunAs | None, mode: int = 0o700) -> Path:
        return Path(self.call("leaf_dir", path=str(path), user=user.name if user else None,
                              mode=mode))  # fmt: skip

    def write_file(self, path: Path, data: bytes | str, mode: int = 0o600,
                   owner: tuple[int, int] | None = None) -> None:  # fmt: skip
        self.call("write_file", path=str(path), data=data, mode=mode,
                  owner=list(owner) if owner else None)  # fmt: skip

    def remove_tree(self, path: Path) -> None:
        self.call("remove_tree", path=str(path))

    def read_owned(self, path: Path, uid: int, limit: int = 1 << 20, *, tail: bool = False,
                   offset: int = 0) -> bytes:  # fmt: skip
        return bytes(self.call("read_owned", path=str(path), uid=uid, limit=limit, tail=tail,
                               offset=offset))  # fmt: skip

    def owned_size(self, path: Path, uid: int) -> int:
        return int(self.call("owned_size", path=str(path), uid=uid))

    def list_owned(self, directory: Path) -> list[str]:
        return list(self.call("list_owned", directory=str(directory)))

    def read_text(self, path: Path) -> str:
        return str(self.call("read_text", path=str(path)))

    def read_texts(self, paths: Sequence[Path]) -> list[str | None]:
        got = self.call("read_texts", paths=[str(p) for p in paths])
        return [None if t is None else str(t) for t in got]

    def lstat(self, path: Path) -> FileStat | None:
        got = self.call("lstat", path=str(path))
        return None if got is None else FileStat(*got)

    def sync(self) -> None:
        self.call("sync")

    def write_kernel(self, path: Path, value: str) -> None:
        self.call("write_kernel", path=str(path), value=value)

    def make_kernel_dir(self, path: Path) -> None:
        self.call("make_kernel_dir", path=str(path))

    def hold_kernel_lock(self, who: str) -> None:
        self.call("hold_kernel_lock", who=f"{who}, through host {self.name}'s agent")

    def chown(self, path: Path, uid: int, gid: int) -> None:
        self.call("chown", path=str(path), uid=uid, gid=gid)

    def append_journal(self, path: Path, line: str) -> None:
        self.call("append_journal", path=str(path), line=line)

    def restore_journal(self, path: Path, work_root: Path | None) -> tuple[list[str], set[str]]:
        done, owed = self.call("restore_journal", path=str(path),
                               work_root=str(work_root) if work_root else None)  # fmt: skip
        return list(done), set(owed)

    def attach_loop(self, image: Path, size: int, sector_size: int | None, direct_io: bool,
                    scratch: Path) -> Path:  # fmt: skip
        return Path(self.call("attach_loop", image=str(image), size=size, direct_io=direct_io,
                              sector_size=sector_size, scratch=str(scratch)))  # fmt: skip

    def claim_device(self, device: Path, grant: Grant, ours: Mapping[str, frozenset[str]],
                     scratch: Path) -> Path:  # fmt: skip
        made = {k: sorted(v) for k, v in ours.items()}
        return Path(self.call("claim_device", device=str(device), wipe=grant.wipe, ours=made,
                              devices=[str(d) for d in grant.devices],
                              scratch=str(scratch)))  # fmt: skip

    def make_filesystem(self, fstype: str, device: Path, options: str,
                        scratch: Path) -> str | None:  # fmt: skip
        got = self.call("make_filesystem", fstype=fstype, device=str(device), options=options,
                        scratch=str(scratch))  # fmt: skip
        return None if got is None else str(got)

    def mount(self, fstype: str, device: Path, point: Path, options: str, scratch: Path,
              nocow: bool = False) -> None:  # fmt: skip
        self.call("mount", fstype=fstype, device=str(device), point=str(point),
                  options=options, scratch=str(scratch), nocow=nocow)  # fmt: skip

    def has_nocow(self, path: Path) -> bool:
        return bool(self.call("has_nocow", path=str(path)))

    def zfs_create(self, pool: str, device: Path, point: Path, values: Mapping[str, Any],
                   scratch: Path) -> None:  # fmt: skip
        self.call("zfs_create", pool=pool, device=str(device), point=str(point),
                  values=dict(values), scratch=str(scratch))  # fmt: skip

    def zfs_change(self, pool: str, props: Mapping[str, str], drop_arc: bool,
                   scratch: Path) -> None:  # fmt: skip
        self.call("zfs_change", pool=pool, props=dict(props), drop_arc=drop_arc,
                  scratch=str(scratch))  # fmt: skip

    def zfs_properties(self, pool: str, scratch: Path) -> dict[str, str]:
        return dict(self.call("zfs_properties", pool=pool, scratch=str(scratch)))

    # builds are made where the server runs, and a server on another host runs without
    # [build] in this version (spec/hosts.py): the agent has no build cache there
    def build_cache(self, server_uid: int, create: bool) -> Path | None:
        raise self._no_builds()

    def find_build(self, cache: Path, spec: BuildSpec) -> tuple[str | None, Build | None]:
        raise self._no_builds()

    def make_build(self, cache: Path, spec: BuildSpec,
                   say: Callable[[str], None]) -> tuple[Build, bool]:  # fmt: skip
        raise self._no_builds()

    def copy_build(self, build: Build, server_uid: int, say: Callable[[str], None]) -> Build:
        from . import buildcopy

        try:
            opened = self.call("build_copy", key=build.key, uid=server_uid, data=b"",
                               sha256=None)  # fmt: skip
            if not opened["have"]:
                data = buildcopy.pack(build)
                say(f"copying it to host {self.name} ({len(data) / 2**20:.1f} MiB)")
                for at in range(0, len(data), buildcopy.CHUNK):
                    last = at + buildcopy.CHUNK >= len(data)
                    opened = self.call("build_copy", key=build.key, uid=server_uid,
                                       data=data[at:at + buildcopy.CHUNK],
                                       sha256=buildcopy.digest(data) if last else None)  # fmt: skip
        except (RuntimeError, OSError) as exc:  # refused there: nothing of it was kept
            raise PgsweepError(f"the build {build.key} was not copied to host {self.name}: "
                               f"{exc}", fix="see what that host said; `pgsweep builds` there "
                               "lists its cache") from None  # fmt: skip
        home = Path(str(opened["home"]))
        if not home.is_absolute() or home.name != build.key or ".." in home.parts:
            raise PgsweepError(f"host {self.name} put build {build.key} at {home}, not an "
                               "entry of a build cache")  # fmt: skip
        return dataclasses.replace(build, home=home, cached=True)

    def _no_builds(self) -> PgsweepError:
        return PgsweepError(f"host {self.name} was asked for a [build]: a server on another "
                            "host runs without [build] in this version")

    def which(self, program: str) -> str | None:
        found = self.call("which", program=program)
        return str(found) if found else None

    def free_bytes(self, path: Path) -> int:
        return int(self.call("free_bytes", path=str(path)))

    def source_address(self, address: str) -> str:
        return str(self.call("source_address", address=address))

    def free_port(self, addresses: list[str]) -> int:
        return int(self.call("free_port", addresses=addresses))

    def tcp_rtt(self, address: str, port: int, probes: int = 5) -> float:
        return float(self.call("tcp_rtt", address=address, port=port, probes=probes))

    def connect(self, conninfo: Mapping[str, Any]) -> AbstractContextManager[Connection]:
        return self._session(dict(conninfo))

    @contextlib.contextmanager
    def _session(self, conninfo: dict[str, Any]) -> Iterator[Connection]:
        handle = int(self.call("sql_open", conninfo=conninfo))
        try:
            yield _RemoteConnection(self, handle)
        finally:
            with contextlib.suppress(HostLost):
                self.call("sql_close", handle=handle)

    def work_area(self, name: str, user: RunAs | None) -> dict[str, str]:
        """This run's work area on the host (removed when the agent ends)."""
        return dict(self.call("work_area", name=name, user=user.name if user else None))


def _error(host: str, method: str, err: dict[str, Any]) -> Exception:
    """A failure on the far side as the same kind of exception a local call raises."""
    kind, message = err.get("type", ""), f"{err.get('message', '')} (on host {host})"
    if kind == "UnsafePath":
        return safefs.UnsafePath(message)
    if kind == "FileNotFoundError":
        return FileNotFoundError(err.get("errno") or 2, message)
    if kind == "PgsweepError":
        return PgsweepError(message)
    if kind == "DeviceError":
        return DeviceError(message)
    if kind == "ZfsError":
        return ZfsError(message)
    if kind.startswith("psycopg") or kind in ("OperationalError", "QueryCanceled",
                                              "ProgrammingError", "UndefinedTable"):
        import psycopg

        return psycopg.OperationalError(message)
    if kind in ("OSError", "PermissionError", "FileExistsError", "IsADirectoryError",
                "NotADirectoryError", "TooLarge"):
        return OSError(err.get("errno") or 0, message)
    return RuntimeError(f"{method} on host {host} failed: {kind}: {message}")
