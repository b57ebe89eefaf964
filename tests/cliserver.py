"""A fork server for the tests' `pgsweep(...)` calls: one process per pytest run imports
pgsweep and its heavy libraries (scipy, pyarrow, numba: one to three seconds a start on a
loaded 2-core machine) once, then forks a fresh child for each command. Each command still
runs in a process of its own, from a state no earlier command touched, with the test's
environment, working folder and argument list, its output in files; only the imports are
shared. Hundreds of CLI calls in the suite made the imports a large share of its time.

Protocol (one JSON object per line): the test sends {"argv", "env", "cwd", "out", "err"};
the server answers {"pid"} once the child exists, then {"rc"} when it has exited.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

WARM = ("pgsweep.cli", "pgsweep.analysis", "pgsweep.outputs.report", "pgsweep.outputs.export",
        "pgsweep.outputs.html", "pgsweep.engine.run", "pgsweep.outputs.gate",
        "pgsweep.verdict.sequential", "scipy.stats", "pyarrow", "pyarrow.parquet")  # fmt: skip


def _child(req: dict[str, Any], proto: int) -> None:
    """In the forked child: become the command, then exit with its status."""
    os.close(proto)
    os.setpgid(0, 0)  # like a command started on its own: a test may signal its group
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.chdir(req["cwd"])
    os.environ.clear()
    os.environ.update(req["env"])
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
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        try:
            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def serve() -> None:
    import importlib

    for name in WARM:
        importlib.import_module(name)
    proto_in = sys.stdin.buffer
    proto_out = os.fdopen(os.dup(1), "w", buffering=1)
    for line in proto_in:
        req = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _child(req, proto_out.fileno())
        proto_out.write(json.dumps({"pid": pid}) + "\n")
        _, status = os.waitpid(pid, 0)
        proto_out.write(json.dumps({"rc": os.waitstatus_to_exitcode(status)}) + "\n")


class CliServer:
    """The test side: `run(argv, env, timeout)` -> CompletedProcess, as subprocess.run
    would give it (text, stdout and stderr captured)."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, __file__], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            env=dict(os.environ, OPENBLAS_NUM_THREADS="1"), start_new_session=True,
        )  # fmt: skip
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self._in, self._out = self.proc.stdin, self.proc.stdout

    def _answer(self, timeout: float | None) -> dict[str, Any] | None:
        ready, _, _ = select.select([self._out], [], [], timeout)
        if not ready:
            return None
        line = self._out.readline()
        if not line:
            raise RuntimeError("the CLI fork server stopped")
        return dict(json.loads(line))

    def run(self, argv: list[str], env: dict[str, str], timeout: float
            ) -> subprocess.CompletedProcess[str]:  # fmt: skip
        with tempfile.TemporaryDirectory(prefix="pgsweep-test-cli-") as d:
            out, err = Path(d, "out"), Path(d, "err")
            out.touch()
            err.touch()
            req = {"argv": argv, "env": env, "cwd": os.getcwd(), "out": str(out),
                   "err": str(err)}  # fmt: skip
            self._in.write((json.dumps(req) + "\n").encode())
            self._in.flush()
            started = self._answer(None)
            assert started is not None
            done = self._answer(timeout)
            if done is None:
                os.kill(started["pid"], signal.SIGKILL)
                self._answer(None)
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
