"""What the agent sends back: SQL values of every type a standby's queries return cross
the wire and come back as the same values (a numeric sum of recovery conflicts once ended
the agent: its reply held a Decimal JSON could not encode), and a reply that still cannot
cross is an error for the controller, not the agent's end."""

from __future__ import annotations

import datetime as dt
import decimal
import io

from pgsweep.host import wire
from pgsweep.host.agent import Agent, encode_value
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

