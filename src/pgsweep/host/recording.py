"""A scripted machine that records every effect: the Host unit tests drive a layer's logic
against (milliseconds, no kernel or PostgreSQL touched), and what `plan --commands` prints.

Reads are answered from the script (`files`, `commands`, `sql`, `processes`, `users`), or,
when a real host is given as `reads_from`, from it (read only). Anything not scripted is
an error (Unscripted), never a silent empty answer: a fixture cannot hide a bug by
answering what the code never asked. Effects are recorded in order as `Effect`s and
applied to the scripted state, so a read after a write sees the write (a kernel file
written reads back the value, a directory made exists)."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .api import Connection, FileStat, Host
from .blockdev import DeviceError, Grant
from .builds import Build, BuildSpec
from .proc import Result, RunAs


class Unscripted(Exception):
    """The code asked the recording host something its script does not answer."""


@dataclass(frozen=True)
class Effect:
    kind: str  # run, write_file, private_dir, leaf_dir, remove_tree, write_kernel, ...
    what: str  # the path or the command line
    detail: Mapping[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        extra = ", ".join(f"{k}={v}" for k, v in self.detail.items())
        return f"{self.kind}: {self.what}" + (f" ({extra})" if extra else "")


@dataclass(frozen=True)
class Reply:
    returncode: int = 0
    stdout: str = ""
    stderr: str = ""


Matcher = Callable[[list[str]], bool]
SQL = Callable[[str, Any], list[tuple[Any, ...]]]


def argv_starts(*prefix: str) -> Matcher:
    """A matcher for commands whose argv begins with `prefix` (the program's basename
    stands for its path)."""

    def match(argv: list[str]) -> bool:
        head = [Path(argv[0]).name, *argv[1:]] if argv else []
        return head[: len(prefix)] == list(prefix)

    return match


class _Rows:
    def __init__(self, rows: list[tuple[Any, ...]], names: Sequence[str] = ()) -> None:
        self._rows = list(rows)
        self.description = [type("Column", (), {"name": n})() for n in names] or None

    def fetchone(self) -> tuple[Any, ...] | None:
        return self._rows.pop(0) if self._rows else None

    def fetchall(self) -> list[tuple[Any, ...]]:
        rows, self._rows = self._rows, []
        return rows


class _Connection:
    def __init__(self, host: RecordingHost, conninfo: Mapping[str, Any]) -> None:
        self.host, self.conninfo = host, conninfo

    def execute(self, query: str, params: Any = None) -> _Rows:
        self.host.effects.append(Effect("sql", query, {"params": params} if params else {}))
        if self.host.sql is None:
            raise Unscripted(f"SQL on {self.conninfo.get('host')}: {query}")
        return _Rows(self.host.sql(query, params))


class RecordingHost(Host):
    def __init__(
        self,
        name: str = "recorded",
        *,
        files: Mapping[str, str] | None = None,
        commands: Sequence[tuple[Matcher, Reply]] = (),
        sql: SQL | None = None,
        processes: Mapping[int, tuple[list[str], int]] | None = None,
        users: Mapping[str | None, tuple[int, int]] | None = None,
        reads_from: Host | None = None,
        kernel: Callable[[Path, str, str | None], str] | None = None,
        busy: Mapping[str, str] | None = None,
        builds: Mapping[BuildSpec, Build | Exception] | None = None,
    ) -> None:
        self.name = name
        self.files: dict[str, str] = dict(files or {})
        self.dirs: set[str] = set()
        self.commands = list(commands)
        self.sql = sql
        self.processes = dict(processes or {})
        self.users: dict[str | None, tuple[int, int]] = dict(users or {None: (0, 0)})
        self.reads_from = reads_from
        self.kernel = kernel  # what a kernel file reads after a write (None: the value)
        self.effects: list[Effect] = []
        self.journals: dict[str, list[str]] = {}
        self.started: dict[int, int] = {}  # start's pids -> their scripted exit status
        self.busy = dict(busy or {})  # device -> why it is in use (claim_device refuses)
        self.mounted: dict[str, dict[str, Any]] = {}  # mount point -> what mount was given
        self.pools: dict[str, dict[str, str]] = {}  # zfs pool -> its dataset's properties
        # a build the cache holds (cached=True), one a compile makes, or why it fails
        self.builds = dict(builds or {})

    # ---- what the tests look at ------------------------------------------------------
    def kinds(self, *kinds: str) -> list[Effect]:
        return [e for e in self.effects if e.kind in kinds]

    def commands_run(self) -> list[list[str]]:
        return [list(e.detail["argv"]) for e in self.effects if e.kind == "run"]

    # ---- reads -----------------------------------------------------------------------
    def _read(self, path: Path) -> str:
        if str(path) in self.files:
            return self.files[str(path)]
        if self.reads_from is not None:
            return self.reads_from.read_text(path)
        raise Unscripted(f"read {path}")

    def read_text(self, path: Path) -> str:
        return self._read(path)

    def output(self, path: Path, limit: int = 64 << 20) -> bytes:
        return self._read(path).encode()[:limit]

    def read_owned(self, path: Path, uid: int, limit: int = 1 << 20, *, tail: bool = False,
                   offset: int = 0) -> bytes:  # fmt: skip
        if str(path) not in self.files:
            raise FileNotFoundError(2, f"{path} (recorded)")
        data = self.files[str(path)].encode()[offset:]
        return data[-limit:] if tail else data[:limit]

    def owned_size(self, path: Path, uid: int) -> int:
        return len(self.files.get(str(path), "").encode())

    def list_owned(self, directory: Path) -> list[str]:
        prefix = f"{directory}/"
        names = {f[len(prefix):].split("/")[0] for f in self.files if f.startswith(prefix)}
        if not names and self.reads_from is not None:
            return self.reads_from.list_owned(directory)
        return sorted(names)

    def lstat(self, path: Path) -> FileStat | None:
        p = str(path)
        if p in self.dirs:
            return FileStat(0o40711, 0, 0, 0, True, False, False)
        if p in self.files:
            return FileStat(0o100600, 0, 0, len(self.files[p]), False, True, False)
        if self.reads_from is not None:
            return self.reads_from.lstat(path)
        return None

    def process(self, pid: int) -> tuple[list[str], int] | None:
        return self.processes.get(pid)

    def ids(self, user: RunAs | None) -> tuple[int, int]:
        key = user.name if user else None
        if key not in self.users:
            raise Unscripted(f"the user {key}")
        return self.users[key]

    # ---- effects ---------------------------------------------------------------------
    def run(self, argv: list[str], *, out: Path, err: Path | None = None, timeout: float = 60.0,
            user: RunAs | None = None, cwd: Path | None = None,
            env: dict[str, str] | None = None) -> Result:  # fmt: skip
        err = err or out.with_suffix(out.suffix + ".err")
        reply = self._scripted("run", argv, out, err, user, env)
        return Result(argv, reply.returncode, out, err, 0.0, False,
                      reader=lambda p: self.files.get(str(p), "").encode())  # fmt: skip

    def start(self, argv: list[str], *, out: Path, err: Path, user: RunAs | None = None,
              env: dict[str, str] | None = None) -> int:  # fmt: skip
        """Recorded as `start`; the scripted reply's output is there at once, and its exit
        status is what `poll` and `stop` give."""
        reply = self._scripted("start", argv, out, err, user, env)
        pid = 90000 + len(self.started)
        self.started[pid] = reply.returncode
        return pid

    def _scripted(self, kind: str, argv: list[str], out: Path, err: Path, user: RunAs | None,
                  env: dict[str, str] | None) -> Reply:  # fmt: skip
        """Record the command, and leave its scripted output in `out` and `err`."""
        self.effects.append(Effect(kind, " ".join(argv), {"argv": tuple(argv),
                                   "user": user.name if user else "root",
                                   "env": dict(env or {})}))  # fmt: skip
        reply = next((r for match, r in self.commands if match(argv)), None)
        if reply is None:
            raise Unscripted(f"{kind} {' '.join(argv)}")
        self.files[str(out)], self.files[str(err)] = reply.stdout, reply.stderr
        return reply

    def poll(self, pid: int) -> int | None:
        return self.started[pid]

    def stop(self, pid: int, grace: float = 5.0) -> int | None:
        self.effects.append(Effect("stop", str(pid), {"grace": grace}))
        return self.started.pop(pid, None)

    def reap(self, pid: int) -> None:
        return None

    def private_dir(self, path: Path, mode: int = 0o700) -> Path:
        self.effects.append(Effect("private_dir", str(path), {"mode": oct(mode)}))
        self.dirs.add(str(path))
        return path

    def leaf_dir(self, path: Path, user: RunAs | None, mode: int = 0o700) -> Path:
        self.effects.append(Effect("leaf_dir", str(path), {"user": user.name if user else "root",
                                                           "mode": oct(mode)}))  # fmt: skip
        self.dirs.add(str(path))
        return path

    def write_file(self, path: Path, data: bytes | str, mode: int = 0o600,
                   owner: tuple[int, int] | None = None) -> None:  # fmt: skip
        text = data.decode(errors="replace") if isinstance(data, bytes) else data
        detail: dict[str, Any] = {"mode": oct(mode), "bytes": len(text)}
        if owner is not None:
            detail["owner"] = owner
        self.effects.append(Effect("write_file", str(path), detail))
        self.files[str(path)] = text

    def remove_tree(self, path: Path) -> None:
        self.effects.append(Effect("remove_tree", str(path)))
        for f in [f for f in self.files if f == str(path) or f.startswith(f"{path}/")]:
            del self.files[f]
        self.dirs = {d for d in self.dirs if d != str(path) and not d.startswith(f"{path}/")}

    def sync(self) -> None:
        self.effects.append(Effect("sync", "all filesystems"))

    def hold_kernel_lock(self, who: str) -> None:
        self.effects.append(Effect("kernel_lock", "/run/pgsweep-kernel.lock", {"who": who}))

    def write_kernel(self, path: Path, value: str) -> None:
        old = self.files.get(str(path))
        self.effects.append(Effect("write_kernel", str(path), {"old": old, "new": value}))
        kept = self._kept(path, value)
        self.files[str(path)] = self.kernel(path, value, old) if self.kernel else kept

    def _kept(self, path: Path, value: str) -> str:
        """What the file reads after a write: the value; a menu keeps its choices with the
        new one bracketed (THP, the I/O scheduler)."""
        old = self.files.get(str(path), "")
        if "[" in old:
            return " ".join(f"[{c}]" if c == value else c
                            for c in old.replace("[", "").replace("]", "").split())  # fmt: skip
        return value

    def make_kernel_dir(self, path: Path) -> None:
        self.effects.append(Effect("make_kernel_dir", str(path)))
        self.dirs.add(str(path))

    def chown(self, path: Path, uid: int, gid: int) -> None:
        self.effects.append(Effect("chown", str(path), {"uid": uid, "gid": gid}))

    def append_journal(self, path: Path, line: str) -> None:
        self.effects.append(Effect("journal", str(path), {"entry": line}))
        self.journals.setdefault(str(path), []).append(line)

    def restore_journal(self, path: Path, work_root: Path | None) -> tuple[list[str], set[str]]:
        import json

        done = []
        for line in reversed(self.journals.pop(str(path), [])):
            entry = json.loads(line)
            if "file" in entry:
                self.write_kernel(Path(entry["file"]), entry["original"])
                done.append(f"restored {entry['file']} = {entry['original']}")
            elif "dir" in entry:
                self.effects.append(Effect("remove_kernel_dir", entry["dir"]))
                self.dirs.discard(entry["dir"])
                done.append(f"removed {entry['dir']}")
            else:
                done.append(self._undo_made(entry))
        return done, set()

    def _undo_made(self, entry: dict[str, str]) -> str:
        """A storage's entry taken down as blockdev/zfsfuse.undo_entry would."""
        kind, what = next((k, v) for k, v in entry.items())
        undo = {"mount": "unmount", "loop_image": "detach_loop", "zpool": "destroy_pool",
                "zfs_daemon": "stop_zfs_daemon", "netns": "remove_netns"}.get(kind, kind)
        self.effects.append(Effect(undo, what))
        if kind == "mount":
            self.mounted.pop(what, None)
        if kind == "zpool":
            self.pools.pop(what, None)
        return f"{undo} {what}"

    # ---- block devices and zfs-fuse: recorded, and kept as scripted state ----------------
    loop_name = "/dev/loop{n}"  # the device the n-th attach_loop (from 0) answers

    def attach_loop(self, image: Path, size: int, sector_size: int | None, direct_io: bool,
                    scratch: Path) -> Path:  # fmt: skip
        device = self.loop_name.format(n=len(self.kinds("attach_loop")))
        self.effects.append(Effect("attach_loop", str(image), {
            "bytes": size, "sector_size": sector_size, "direct_io": direct_io,
            "device": device}))  # fmt: skip
        return Path(device)

    def claim_device(self, device: Path, grant: Grant, ours: Mapping[str, frozenset[str]],
                     scratch: Path) -> Path:  # fmt: skip
        mine = sorted(ours.get(str(device), ()))  # a scripted device is its own real path
        self.effects.append(Effect("claim_device", str(device), {"ours": mine}))
        if device not in grant.devices:
            raise DeviceError(f"refusing to format {device}: the command line did not allow it")
        if str(device) in self.busy:
            raise DeviceError(f"refusing to format {device} now: {self.busy[str(device)]}")
        return device

    def make_filesystem(self, fstype: str, device: Path, options: str,
                        scratch: Path) -> str | None:  # fmt: skip
        self.effects.append(Effect("mkfs", str(device), {"fstype": fstype, "options": options}))
        return f"uuid-{len(self.kinds('mkfs'))}"

    def mount(self, fstype: str, device: Path, point: Path, options: str, scratch: Path,
              nocow: bool = False) -> None:  # fmt: skip
        detail = {"device": str(device), "fstype": fstype, "options": options, "nocow": nocow}
        self.effects.append(Effect("mount", str(point), detail))
        self.mounted[str(point)] = detail
        self.dirs.add(str(point))

    def has_nocow(self, path: Path) -> bool:
        return any(d["nocow"] and (str(path) + "/").startswith(p + "/")
                   for p, d in self.mounted.items())  # fmt: skip

    def zfs_create(self, pool: str, device: Path, point: Path, values: Mapping[str, Any],
                   scratch: Path) -> None:  # fmt: skip
        self.effects.append(Effect("zfs_create", pool, {"device": str(device),
                                   "point": str(point), "values": dict(values)}))  # fmt: skip
        pool_only = ("zfs.ashift", "zfs.arc_max")  # the pool's and the daemon's, not the dataset's
        self.pools[pool] = {k[4:]: str(v) for k, v in values.items()
                            if v is not None and k not in pool_only}  # fmt: skip
        self.dirs.add(str(point))

    def zfs_change(self, pool: str, props: Mapping[str, str], drop_arc: bool,
                   scratch: Path) -> None:  # fmt: skip
        self.effects.append(Effect("zfs_change", pool, {"props": dict(props),
                                                        "drop_arc": drop_arc}))  # fmt: skip
        self.pools[pool].update(props)

    def zfs_properties(self, pool: str, scratch: Path) -> dict[str, str]:
        return dict(self.pools[pool])

    # ---- builds: scripted, or read from a real host's cache (nothing compiled) -----------
    cache = Path("/var/cache/pgsweep/builds")

    def build_cache(self, server_uid: int, create: bool) -> Path | None:
        if not self.builds and self.reads_from is not None and not create:
            return self.reads_from.build_cache(server_uid, create)
        return self.cache

    def find_build(self, cache: Path, spec: BuildSpec) -> tuple[str | None, Build | None]:
        if spec not in self.builds:
            if self.reads_from is None:
                raise Unscripted(f"find_build {spec.describe()}")
            return self.reads_from.find_build(cache, spec)
        made = self.builds[spec]
        if isinstance(made, Exception):
            return None, None
        return made.key, made if made.cached else None

    def copy_build(self, build: Build, server_uid: int, say: Callable[[str], None]) -> Build:
        self.effects.append(Effect("copy_build", build.key, {"from": str(build.home)}))
        return dataclasses.replace(build, home=self.cache / build.key, cached=True)

    def make_build(self, cache: Path, spec: BuildSpec,
                   say: Callable[[str], None]) -> tuple[Build, bool]:  # fmt: skip
        if spec not in self.builds:
            raise Unscripted(f"make_build {spec.describe()}")
        made = self.builds[spec]
        if isinstance(made, Exception):
            self.effects.append(Effect("build", spec.describe(), {"failed": str(made)}))
            raise made
        self.effects.append(Effect("build", spec.describe(), {"key": made.key,
                                                              "cached": made.cached}))
        if not made.cached:
            say(f"{spec.describe()}: compiling into {made.home}")
        return made, made.cached

    def tcp_rtt(self, address: str, port: int, probes: int = 5) -> float:
        return 0.1

    def which(self, program: str) -> str | None:
        return self.files.get(f"which:{program}")  # scripted: absent unless given

    def free_bytes(self, path: Path) -> int:
        return int(self.files.get(f"free:{path}", str(1 << 40)))  # scripted, else a TiB

    def source_address(self, address: str) -> str:
        return self.files.get(f"route-source:{address}", "192.0.2.10")  # scripted, else TEST-NET

    def free_port(self, addresses: list[str]) -> int:
        return 5433

    def connect(self, conninfo: Mapping[str, Any]) -> AbstractContextManager[Connection]:
        return self._session(conninfo)

    @contextlib.contextmanager
    def _session(self, conninfo: Mapping[str, Any]) -> Iterator[Connection]:
        yield _Connection(self, conninfo)
