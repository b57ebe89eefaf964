"""The one subprocess helper: argv lists (never a shell), own process group, timeouts that
kill the whole group, output to files, and the tail of that output quoted in errors."""

from __future__ import annotations

import contextlib
import functools
import os
import pwd
import select
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import internal
from . import bounded, safefs


@dataclass(frozen=True)
class RunAs:
    """An unprivileged OS user to run a command as (PostgreSQL refuses to run as root)."""

    name: str

    @property
    def uid(self) -> int:
        return pwd.getpwnam(self.name).pw_uid

    @property
    def gid(self) -> int:
        return pwd.getpwnam(self.name).pw_gid

    @property
    def home(self) -> str:
        return pwd.getpwnam(self.name).pw_dir

    @staticmethod
    def current_name() -> str:
        return pwd.getpwuid(os.geteuid()).pw_name


@dataclass
class Result:
    argv: list[str]
    returncode: int
    stdout_path: Path
    stderr_path: Path
    seconds: float
    timed_out: bool = False
    # reads an output file, bounded, on the host that ran the command (None: this machine)
    reader: Callable[[Path], bytes] | None = field(default=None, repr=False, compare=False)

    @property
    def stdout(self) -> str:
        """The whole output, up to bounded.OUTPUT_LIMIT (TooLarge beyond: a command run as
        the server user decides how much it prints)."""
        return self._whole(self.stdout_path)

    @property
    def stderr(self) -> str:
        return self._whole(self.stderr_path)

    def _whole(self, path: Path) -> str:
        raw = self.reader(path) if self.reader is not None else bounded.read_output(path)
        return raw.decode(errors="replace")

    def tail(self, lines: int = 15) -> str:
        if self.reader is not None:
            ends = [self._whole(p)[-bounded.TAIL:] for p in (self.stderr_path, self.stdout_path)]
        else:
            ends = [_end(self.stderr_path), _end(self.stdout_path)]
        text = (ends[0] + "\n" + ends[1]).strip()
        return "\n".join(text.splitlines()[-lines:])

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out

    def describe_failure(self) -> str:
        why = "timed out" if self.timed_out else f"exited with code {self.returncode}"
        return f"`{' '.join(self.argv)}` {why}:\n{self.tail()}"

    def last_line(self) -> str:
        """What a system tool said last (its error message), for one-line reasons."""
        text = _end(self.stderr_path) or _end(self.stdout_path) or self.describe_failure()
        return text.splitlines()[-1]


def _end(path: Path) -> str:
    """The end of an output file, however long it is, without its trailing blanks."""
    return bounded.read_tail(path).decode(errors="replace").strip()


DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def _env_for(user: RunAs | None, extra: dict[str, str] | None) -> dict[str, str]:
    """A small environment built from scratch: nothing of root's (tokens, PGPASSWORD,
    PGHOST pointing elsewhere) reaches a child, least of all one run as the server user."""
    env = {"PATH": os.environ.get("PATH", DEFAULT_PATH), "LC_ALL": "C", "LANG": "C"}
    if user is not None:
        env.update(HOME=user.home, USER=user.name, LOGNAME=user.name)
    else:
        env.update({k: os.environ[k] for k in ("HOME", "USER", "LOGNAME") if k in os.environ})
    env.update(extra or {})
    return env


def start(
    argv: list[str],
    *,
    out: Path,
    err: Path | None = None,
    user: RunAs | None = None,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """Start a process in a session of its own (no controlling terminal: a child run as the
    server user must not be able to type into root's terminal, TIOCSTI), stdin closed,
    stdout/stderr to files in a directory root owns (a link planted there is refused)."""
    err = err or out.with_suffix(out.suffix + ".err")
    child_env = _env_for(user, env)
    setpriv, drop = _setpriv(), None  # drop: Python drops to the user itself (no setpriv)
    if user is not None and setpriv is not None:
        if _missing(argv[0], child_env["PATH"]):  # as Popen says it, before setpriv would
            raise internal(f"cannot run {argv[0]}: No such file or directory")
        argv = [setpriv, f"--reuid={user.uid}", f"--regid={user.gid}", "--clear-groups",
                "--", *argv]  # fmt: skip
    elif user is not None:
        drop = user
    fout, ferr = safefs.open_output(out), safefs.open_output(err)
    try:
        try:
            return subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=fout,
                stderr=ferr,
                cwd=cwd if cwd is not None or user is None else "/",  # root's cwd is closed
                env=child_env,
                start_new_session=True,
                user=drop.uid if drop else None,
                group=drop.gid if drop else None,
                extra_groups=[] if drop else None,
            )
        except FileNotFoundError as exc:
            raise internal(f"cannot run {argv[0]}: {exc.strerror}") from exc
    finally:
        os.close(fout)
        os.close(ferr)


@functools.cache
def _setpriv() -> str | None:
    """util-linux's setpriv, which drops to the server user between its exec and the
    command's. Python's own user=/group= make it fork() the whole process instead of
    vfork(): a pgsweep process holding numpy, scipy and DuckDB paid about 14 ms of CPU for
    each command it ran as the server user, 3 through setpriv (bench/spawn.py)."""
    for folder in ("/usr/bin", "/bin"):
        path = os.path.join(folder, "setpriv")
        if os.access(path, os.X_OK):
            return path
    return None


def _missing(program: str, path: str) -> bool:
    if "/" in program:
        return not os.path.exists(program)
    return shutil.which(program, path=path) is None


_started: set[subprocess.Popen[bytes]] = set()  # groups under way, for stop_all_started
_started_lock = threading.Lock()


def start_tracked(argv: list[str], *, out: Path, err: Path | None = None,
                  user: RunAs | None = None, env: dict[str, str] | None = None
                  ) -> subprocess.Popen[bytes]:  # fmt: skip
    """`start`, and the group counted among those `stop_all_started` stops until `forget`."""
    popen = start(argv, out=out, err=err, user=user, env=env)
    with _started_lock:
        _started.add(popen)
    return popen


def forget(popen: subprocess.Popen[bytes]) -> None:
    with _started_lock:
        _started.discard(popen)


def stop_all_started(grace: float = 2.0) -> None:
    """Stop every process group `run` has under way (another thread calls this: the agent's
    reader, when the controller is gone)."""
    with _started_lock:
        running = list(_started)
    for popen in running:
        kill_group(popen, grace)


def kill_group(popen: subprocess.Popen[bytes], grace: float = 5.0) -> None:
    """SIGTERM the process group, then SIGKILL it if it does not exit within `grace`."""
    if popen.poll() is not None:
        return
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(popen.pid, sig)
        except ProcessLookupError:
            return
        try:
            popen.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


def run(
    argv: list[str],
    *,
    out: Path,
    err: Path | None = None,
    timeout: float = 60.0,
    user: RunAs | None = None,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
) -> Result:
    """Run to completion (or timeout, which kills the group) and return the result."""
    err = err or out.with_suffix(out.suffix + ".err")
    began = time.monotonic()
    popen = start(argv, out=out, err=err, user=user, cwd=cwd, env=env)
    with _started_lock:
        _started.add(popen)
    timed_out = False
    try:
        _wait(popen, timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
    finally:
        # On timeout, Ctrl-C or any other exception the child's group must not outlive us.
        kill_group(popen)
        with _started_lock:
            _started.discard(popen)
    return Result(argv, popen.returncode, out, err, time.monotonic() - began, timed_out)


def _wait(popen: subprocess.Popen[bytes], timeout: float) -> None:
    """Popen.wait with a timeout polls with sleeps of up to 50 ms, which a short command
    pays as latency (a trial runs about six); a pidfd says at once when the child exits."""
    try:
        fd = os.pidfd_open(popen.pid)
    except (AttributeError, OSError):  # no pidfd (old kernel): Python's polling
        popen.wait(timeout=timeout)
        return
    try:
        if not select.select([fd], [], [], timeout)[0]:
            raise subprocess.TimeoutExpired(popen.args, timeout)
    finally:
        os.close(fd)
    popen.wait()


def run_tool(argv: list[str], scratch: Path, name: str, timeout: float = 120) -> Result:
    """A system tool (mkfs, mount, losetup, zpool) run as root, its output in `scratch`."""
    scratch.mkdir(mode=0o700, parents=True, exist_ok=True)
    return run(argv, out=scratch / f"{name}.out", timeout=timeout)


PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h


def become_subreaper() -> None:
    """Orphaned descendants (the postmaster pg_ctl forks and leaves) become this process's
    children, so their exit is collected here (`reap`). Where PID 1 does not reap orphans
    (some container inits, this machine's), a killed postmaster would stay a zombie that
    PostgreSQL takes for a live server, and no new one would start on its data."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def reap(pid: int) -> None:
    """Collect an exited child (a postmaster adopted through `become_subreaper`)."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def gone(pid: int) -> bool:
    """The process has exited: no /proc entry, or a zombie nobody collected yet."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")
