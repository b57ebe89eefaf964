"""What the agent sends back: SQL values of every type a standby's queries return cross
the wire and come back as the same values (a numeric sum of recovery conflicts once ended
the agent: its reply held a Decimal JSON could not encode), and a reply that still cannot
cross is an error for the controller, not the agent's end."""

from __future__ import annotations

import datetime as dt
import decimal
import io
from pathlib import Path

from pgsweep.host import wire
from pgsweep.host.agent import Agent, encode_value
from pgsweep.host.journal import writable
from pgsweep.host.remote import _RemoteRows


def _sent(agent: Agent) -> wire.Frame:
    out = agent.stdout
    assert isinstance(out, io.BytesIO)
    return wire.read_frame(io.BytesIO(out.getvalue()))


def test_a_sql_result_of_every_type_comes_back_as_it_was() -> None:
    when = dt.datetime(2026, 11, 26, 19, 30, tzinfo=dt.UTC)
    rows = [(decimal.Decimal("3"), dt.timedelta(milliseconds=1500), when, "on", None, 7)]
    agent = Agent(io.BytesIO(), io.BytesIO())
    agent._reply(1, {"value": encode_value({"names": list("abcdef"), "rows": rows})})
    frame = _sent(agent)
    assert frame.kind == wire.REPLY and frame.request == 1
    got = _RemoteRows(frame.payload["value"]["names"], frame.payload["value"]["rows"])
    (row,) = got.fetchall()
    assert row == (3.0, dt.timedelta(seconds=1.5), when, "on", None, 7)


def test_a_reply_that_cannot_cross_is_an_error_the_controller_gets() -> None:
    agent = Agent(io.BytesIO(), io.BytesIO())
    agent._reply(4, {"value": {"rows": [[object()]]}})
    frame = _sent(agent)
    assert frame.request == 4
    assert frame.payload["error"]["type"] == "WireError"
    assert "could not be sent" in frame.payload["error"]["message"]



def test_the_agent_writes_no_kernel_file_beyond_what_a_run_changes(tmp_path: Path) -> None:
    """`write_kernel` from the controller: a path merely named like a trigger (an agent once
    wrote any path ending in drop_caches), the root memory cgroup's limit, a file of
    pgsweep's cgroup it never writes, another run's cgroup's limit (this agent made none),
    and a way out of it by "..": each refused, unwritten."""
    planted = tmp_path / "drop_caches"
    planted.write_text("kept")
    agent = Agent(io.BytesIO(), io.BytesIO())
    for path in (str(planted), "/sys/fs/cgroup/memory/memory.limit_in_bytes",
                 "/sys/fs/cgroup/memory/pgsweep-1/cgroup.procs",
                 "/sys/fs/cgroup/memory/pgsweep-1/memory.limit_in_bytes",  # another run's
                 "/sys/fs/cgroup/memory/pgsweep-1/../memory.limit_in_bytes",
                 "/proc/sys/vm/drop_caches/../../kernel/core_pattern"):  # fmt: skip
        reply = agent._call({"method": "write_kernel", "args": {"path": path, "value": "1"}})
        assert reply["error"]["message"] == f"pgsweep does not change {path}", reply
    assert planted.read_text() == "kept"
    made = {"/sys/fs/cgroup/memory/pgsweep-12-34"}
    assert writable("/sys/fs/cgroup/memory/pgsweep-12-34/memory.failcnt", made)  # its own
    assert not writable("/sys/fs/cgroup/memory/pgsweep-12-34/memory.failcnt", set())
    assert writable("/proc/sys/vm/drop_caches", made) and writable("/proc/sys/vm/swappiness", made)
