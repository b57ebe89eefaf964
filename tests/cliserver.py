"""A fork server for the tests' `pgsweep(...)` calls: one process per pytest run imports
pgsweep and its heavy libraries (scipy, pyarrow: one to three seconds a start on a
loaded 2-core machine) once, then forks a fresh child for each command. Each command still
runs in a process of its own, from a state no earlier command touched, with the test's
environment, working folder and argument list, its output in files; only the imports are
shared. Hundreds of CLI calls in the suite made the imports a large share of its time.

Protocol (one JSON object per line): the test sends {"id", "argv", "env", "cwd", "out",
"err"}; the server answers {"id", "pid"} once the child exists, then {"id", "rc"} when it
has exited. The test skips answers of another id: a call abandoned half-way (an exception
between sending and reading) can never hand its answer to the next call.
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
    proto_in = sys.stdin.buffer
    proto_out = os.fdopen(os.dup(1), "w", buffering=1)
    for line in proto_in:
        req = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _child(req, proto_out.fileno())
        proto_out.write(json.dumps({"id": req["id"], "pid": pid}) + "\n")
        _, status = os.waitpid(pid, 0)
        proto_out.write(json.dumps({"id": req["id"], "rc": os.waitstatus_to_exitcode(status)})
                        + "\n")  # fmt: skip


class CliServer:
    """The test side: `run(argv, env, timeout)` -> CompletedProcess, as subprocess.run
    would give it (text, stdout and stderr captured)."""

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

    def _answer(self, call: int, key: str, timeout: float | None) -> dict[str, Any] | None:
        """The answer of this call that carries `key` ("pid" or "rc"); None on timeout.
        Answers of earlier, abandoned calls are read and dropped."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([self._out], [], [], left)
            if not ready:
                return None
            line = self._out.readline()
            if not line:
                raise RuntimeError("the CLI fork server stopped")
            answer = dict(json.loads(line))
            if answer.get("id") == call and key in answer:
                return answer

    def run(self, argv: list[str], env: dict[str, str], timeout: float
            ) -> subprocess.CompletedProcess[str]:  # fmt: skip
        with tempfile.TemporaryDirectory(prefix="pgsweep-test-cli-") as d:
            out, err = Path(d, "out"), Path(d, "err")
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
            done = self._answer(call, "rc", timeout)
            if done is None:
                with contextlib.suppress(ProcessLookupError):  # it ended at the deadline
                    os.kill(started["pid"], signal.SIGKILL)
                self._answer(call, "rc", None)
                raise subprocess.TimeoutExpired(["pgsweep", *argv], timeout,
                                                out.read_text(), err.read_text())  # fmt: skip
            args = [sys.executable, "-m", "pgsweep.cli", *argv]
            return subprocess.CompletedProcess(args, done["rc"], out.read_text("utf-8"),
                                               err.read_text("utf-8"))  # fmt: skip

    def close(self) -> None:
        self._in.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


if __name__ == "__main__":
    serve()
