"""A fork server for the tests' `pgsweep(...)` calls: one process per pytest run imports
pgsweep and its heavy libraries (scipy, pyarrow: one to three seconds a start on a
loaded 2-core machine) once, then forks a fresh child for each command. Each command still
runs in a process of its own, from a state no earlier command touched, with the test's
environment, working folder and argument list, its output in files; only the imports are
shared. Hundreds of CLI calls in the suite made the imports a large share of its time.

Protocol (one JSON object per line): the test sends {"id", "argv", "env", "cwd", "out",
"err"}; the server answers {"id", "pid"} once the child exists, then {"id", "rc"} when it
has exited. Children run side by side: `start` gives a Popen-like handle (a run a test
signals while it asks other commands beside it), `run` waits like subprocess.run. The
test keeps answers by id: an answer is only ever taken by the call it belongs to.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

WARM = ("pgsweep.cli", "pgsweep.analysis", "pgsweep.outputs.report", "pgsweep.outputs.export",
        "pgsweep.outputs.html", "pgsweep.engine.run", "pgsweep.outputs.gate",
        "pgsweep.verdict.sequential", "scipy.stats", "pyarrow", "pyarrow.parquet")  # fmt: skip


def _child(req: dict[str, Any], proto: int) -> None:
    """In the forked child: become the command, then exit with its status. Whatever
    happens, the child ends in os._exit: it never returns into the server's loop."""
    code = 1
    try:
        code = _become(req, proto)
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        os._exit(code)


def _become(req: dict[str, Any], proto: int) -> int:
    os.close(proto)
    signal.set_wakeup_fd(-1)  # the server's: the command waits for its own children
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    os.setpgid(0, 0)  # like a command started on its own: a test may signal its group
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.chdir(req["cwd"])
    os.environ.clear()
    os.environ.update(req["env"])
    tempfile.tempdir = None  # TMPDIR as the test gives it, not as the server first saw it
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    for fd, path in ((1, req["out"]), (2, req["err"])):
        f = os.open(path, os.O_WRONLY | os.O_TRUNC)
        os.dup2(f, fd)
        os.close(f)
    sys.stdin = open(0, closefd=False)  # noqa: SIM115
    sys.stdout = open(1, "w", closefd=False, encoding="utf-8")  # noqa: SIM115
    sys.stderr = open(2, "w", closefd=False, encoding="utf-8")  # noqa: SIM115
    sys.argv = ["pgsweep", *req["argv"]]
    code = 1
    try:
        from pgsweep.cli import main

        code = main(req["argv"])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    return code


def _warm_log_kernels() -> None:
    """Reduce a two-line log once, as a trial's measurement does: a short trial's log takes
    the numpy kernels (collect/txlog_small), whose imports the children then share; the
    numba kernels, a second a process, are only loaded for a log of megabytes."""
    import io

    from pgsweep.collect import txlog

    log = io.BytesIO(b"0 1 1200 0 1700000000 5\n1 1 900 0 1700000001 7\n")
    log.name = "warm-up"
    txlog.reduce(txlog.parse([log]), 2)


def _warm_catalog() -> None:
    """Ask the installed PostgreSQL its version and catalog once (`postgres --version` and
    `--describe-config` as the server user, which every plan and run of a child asks
    again): binaries.inspect answers the children from what it learned, while the binary
    is the same file."""
    from pgsweep.host.proc import RunAs
    from pgsweep.postgres import binaries
    from pgsweep.spec.users import default_user

    user = RunAs(default_user()) if os.geteuid() == 0 else None
    with tempfile.TemporaryDirectory(prefix="pgsweep-warm-", dir="/dev/shm") as scratch:
        os.chmod(scratch, 0o755)  # the server user writes nothing there; root does
        binaries.inspect(binaries.locate("auto", where="warm-up"), Path(scratch), user)


def serve() -> None:
    import importlib

    for name in WARM:
        importlib.import_module(name)
    _warm_log_kernels()
    with contextlib.suppress(Exception):  # no PostgreSQL here: the children ask themselves
        _warm_catalog()
    proto_out = os.fdopen(os.dup(1), "w", buffering=1)
    # a child's end wakes the loop (SIGCHLD through the wakeup pipe); it is reaped there
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    running: dict[int, int] = {}  # pid -> call id
    pending, open_ = b"", True
    while open_ or running:
        ready, _, _ = select.select([0, wake_r] if open_ else [wake_r], [], [], 1.0)
        if wake_r in ready:
            with contextlib.suppress(BlockingIOError):
                os.read(wake_r, 4096)
        _reap(running, proto_out)
        if 0 in ready:
            data = os.read(0, 65536)
            open_ = bool(data)
            pending += data
            *lines, pending = pending.split(b"\n")
            for line in lines:
                req = json.loads(line)
                pid = os.fork()
                if pid == 0:
                    os.close(wake_r)
                    os.close(wake_w)
                    _child(req, proto_out.fileno())
                running[pid] = req["id"]
                proto_out.write(json.dumps({"id": req["id"], "pid": pid}) + "\n")


def _reap(running: dict[int, int], proto_out: Any) -> None:
    while running:
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            return
        call = running.pop(pid, None)
        if call is None:  # not a command's (none is expected)
            continue
        proto_out.write(json.dumps({"id": call, "rc": os.waitstatus_to_exitcode(status)})
                        + "\n")  # fmt: skip


class ForkedRun:
    """A command the fork server started, with the part of subprocess.Popen the tests use:
    pid (its own process group, as the server's children have), poll, wait, communicate
    (stdout and stderr as text), send_signal, terminate, kill, returncode."""

    def __init__(self, server: CliServer, call: int, pid: int, argv: list[str],
                 folder: tempfile.TemporaryDirectory[str]) -> None:  # fmt: skip
        self.args = [sys.executable, "-m", "pgsweep.cli", *argv]
        self.pid, self.returncode = pid, None
        self._server, self._call, self._folder = server, call, folder
        self._output = ("", "")

    def _ended(self, answer: dict[str, Any] | None) -> int | None:
        if answer is not None and self.returncode is None:
            folder = Path(self._folder.name)
            self._output = ((folder / "out").read_text("utf-8"),
                            (folder / "err").read_text("utf-8"))  # fmt: skip
            self._folder.cleanup()  # at once: tests compare /tmp's pgsweep-* names
            self.returncode = answer["rc"]
        return self.returncode

    def poll(self) -> int | None:
        if self.returncode is None:
            self._ended(self._server._answer(self._call, "rc", 0))
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            rc = self._ended(self._server._answer(self._call, "rc", timeout))
            if rc is None:
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
        assert self.returncode is not None
        return self.returncode

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        self.wait(timeout)
        return self._output

    def send_signal(self, sig: int) -> None:
        # the server reaps its children at once: ask first whether it has ended (its PID
        # may be another process's by now, as Popen's may not until it is waited for)
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class CliServer:
    """The test side: `run(argv, env, timeout)` -> CompletedProcess, as subprocess.run
    would give it (text, stdout and stderr captured); `start(argv, env)` -> ForkedRun."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, __file__], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            env=dict(os.environ, OPENBLAS_NUM_THREADS="1", NUMBA_THREADING_LAYER="workqueue"),
            start_new_session=True,
            # unbuffered answers: a buffered readline could take a call's "pid" and "rc"
            # lines at once, and select() then waits on the pipe for the "rc" already read
            # (a quick call hung the rest lane that way)
            bufsize=0,
        )  # fmt: skip
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self._in, self._out = self.proc.stdin, self.proc.stdout
        self._calls = 0
        self._kept: dict[tuple[int, str], dict[str, Any]] = {}  # answers read for others

    def _answer(self, call: int, key: str, timeout: float | None) -> dict[str, Any] | None:
        """The answer of this call that carries `key` ("pid" or "rc"); None on timeout.
        Answers of other calls read meanwhile are kept for them."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while (call, key) not in self._kept:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([self._out], [], [], left)
            if not ready:
                return None
            line = self._out.readline()
            if not line:
                raise RuntimeError("the CLI fork server stopped")
            answer = dict(json.loads(line))
            self._kept[(answer["id"], "rc" if "rc" in answer else "pid")] = answer
        return self._kept.pop((call, key))

    def start(self, argv: list[str], env: dict[str, str]) -> ForkedRun:
        folder = tempfile.TemporaryDirectory(prefix="pgsweep-test-cli-")
        out, err = Path(folder.name, "out"), Path(folder.name, "err")
        out.touch()
        err.touch()
        self._calls += 1
        call = self._calls
        req = {"id": call, "argv": argv, "env": env, "cwd": os.getcwd(), "out": str(out),
               "err": str(err)}  # fmt: skip
        self._in.write((json.dumps(req) + "\n").encode())
        self._in.flush()
        started = self._answer(call, "pid", None)
        assert started is not None
        return ForkedRun(self, call, started["pid"], argv, folder)

    def run(self, argv: list[str], env: dict[str, str], timeout: float
            ) -> subprocess.CompletedProcess[str]:  # fmt: skip
        child = self.start(argv, env)
        try:
            out, err = child.communicate(timeout)
        except subprocess.TimeoutExpired:
            child.kill()  # it ended at the deadline, or is killed now
            out, err = child.communicate()
            raise subprocess.TimeoutExpired(["pgsweep", *argv], timeout, out, err) from None
        return subprocess.CompletedProcess(child.args, child.wait(), out, err)

    def close(self) -> None:
        self._in.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


if __name__ == "__main__":
    serve()
