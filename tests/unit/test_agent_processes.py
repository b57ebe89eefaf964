"""Processes an agent starts beside what runs (a standby's read load on its host): real
processes through the agent's calls. Not in the suite's pure lane: it starts processes."""

from __future__ import annotations

import io
import signal
import subprocess
import time
from pathlib import Path

from pgsweep.host import proc
from pgsweep.host.agent import Agent


def test_a_started_process_is_polled_stopped_and_stopped_with_the_agent(tmp_path: Path) -> None:
    """`start`, `poll` and `stop` through the agent's calls (a standby's read load on its
    host): a real process runs until stopped, its group gets SIGTERM, a pid the host did not
    start is an error reply, and one still running when the agent ends is stopped with it."""
    tmp_path.chmod(0o700)
    agent = Agent(io.BytesIO(), io.BytesIO())
    args = {"argv": ["sleep", "60"], "out": str(tmp_path / "a.out"),
            "err": str(tmp_path / "a.err"), "user": None, "env": None}  # fmt: skip
    pid = agent._call({"method": "start", "args": args})["value"]
    assert agent._call({"method": "poll", "args": {"pid": pid}}) == {"value": None}
    deadline = time.monotonic() + 10  # the fork execs sleep a moment after start returns
    while not Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"sleep\0"):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    stopped = agent._call({"method": "stop", "args": {"pid": pid, "grace": 2.0}})
    assert stopped == {"value": -signal.SIGTERM}
    assert not Path(f"/proc/{pid}").exists()  # collected, not a zombie
    assert agent._call({"method": "stop", "args": {"pid": pid, "grace": 1.0}}) == {"value": None}
    unknown = agent._call({"method": "poll", "args": {"pid": pid}})
    assert "not started by this host" in unknown["error"]["message"]
    left = agent._call({"method": "start", "args": args | {"out": str(tmp_path / "b.out")}})
    agent._clean_up()
    assert not Path(f"/proc/{left['value']}").exists() or proc.gone(left["value"])


def test_read_texts_answers_each_file_in_one_call_and_none_for_a_gone_process() -> None:
    """The agent's batched read (processes.snapshot's, 5 times a second): real /proc files,
    one of a process that has exited, in the order asked."""
    done = subprocess.Popen(["true"])
    done.wait()  # collected: its /proc entry is gone
    agent = Agent(io.BytesIO(), io.BytesIO())
    paths = ["/proc/self/status", f"/proc/{done.pid}/stat", "/proc/sys/kernel/osrelease"]
    got = agent._call({"method": "read_texts", "args": {"paths": paths}})["value"]
    assert got[0].startswith("Name:") and got[1] is None
    assert got[2] == Path("/proc/sys/kernel/osrelease").read_text()
