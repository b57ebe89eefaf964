"""The tests' CLI fork server (tests/cliserver.py) keeps each call's answer with its call:
a call abandoned half-way, or one killed at its deadline, never hands its exit status to
the next call (a CI run once failed every later test of a lane that way)."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator

import pytest

from cliserver import CliServer


@pytest.fixture()
def server() -> Iterator[CliServer]:
    s = CliServer()
    yield s
    s.close()


def _abandon(server: CliServer, argv: list[str]) -> None:
    """Send a call and never read its answers (as an exception between the two would)."""
    server._calls += 1
    req = {"id": server._calls, "argv": argv, "env": dict(os.environ), "cwd": os.getcwd(),
           "out": os.devnull, "err": os.devnull}  # fmt: skip
    server._in.write((json.dumps(req) + "\n").encode())
    server._in.flush()


def test_an_abandoned_call_never_answers_the_next(server: CliServer) -> None:
    _abandon(server, ["--version"])  # exit 0, unread
    res = server.run(["plan", "/nonexistent/exp.toml"], dict(os.environ), 120)
    assert res.returncode == 2, res.stderr
    assert "/nonexistent/exp.toml" in res.stderr
    assert server.run(["--version"], dict(os.environ), 120).returncode == 0


def test_a_call_past_its_deadline_is_killed_and_the_next_gets_its_own_status(
    server: CliServer,
) -> None:
    with pytest.raises(subprocess.TimeoutExpired):
        server.run(["--version"], dict(os.environ), 0.0)
    res = server.run(["plan", "/nonexistent/exp.toml"], dict(os.environ), 120)
    assert res.returncode == 2 and "cannot read the experiment file" in res.stderr


def test_started_commands_run_side_by_side_and_each_gets_its_own_status(
    server: CliServer,
) -> None:
    """Two commands started before either is waited for, waited for in the other order:
    the answers read for one while waiting on the other are kept for it."""
    first = server.start(["--version"], dict(os.environ))
    second = server.start(["plan", "/nonexistent/exp.toml"], dict(os.environ))
    assert first.pid != second.pid
    _, err = second.communicate(timeout=120)
    assert second.returncode == 2 and "/nonexistent/exp.toml" in err, err
    assert first.wait(timeout=120) == 0
    assert first.communicate()[0].startswith("pgsweep ")
    first.kill()  # after its end: no signal is sent, its status stays its own
    assert first.poll() == 0 and first.returncode == 0
