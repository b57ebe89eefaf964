"""pgreplay's side of a replay, on files captured from a real run (tests/data/pgreplay/
README): what a csvlog holds (its sessions' span, roles and databases, its statements),
pgreplay's replay statistics, and its parse error naming a line."""

from __future__ import annotations

import pytest

from conftest import DATA
from pgsweep.postgres import pgreplay

PR = DATA / "pgreplay"


def test_a_captured_csvlog_and_its_sessions() -> None:
    text = (PR / "capture.csv").read_text()
    facts = pgreplay.facts(text)
    assert facts.users == ("pgsweep",) and facts.databases == ("postgres",)
    # a 3-second pgbench run at 20 tx/s: BEGIN, 5 statements and END a transaction
    assert 2.5 <= facts.seconds <= 4.5
    assert facts.statements == text.count(',"statement: ')
    assert facts.statements == pytest.approx(3 * 20 * 7, rel=0.25)


def test_replay_statistics_into_pgsweeps_names() -> None:
    out = (PR / "pgreplay.out").read_text() + (PR / "pgreplay.err").read_text()
    stats = pgreplay.parse(out)
    text = (PR / "capture.csv").read_text()
    facts = pgreplay.facts(text)
    assert stats["speed"] == 2 and stats["errors"] == 0
    assert stats["statements"] == facts.statements  # every statement the log holds, once
    # pgbench's two clients, and the connection it opens first to find the scale
    assert stats["connections"] == text.count("connection authorized") == 3
    assert 0 < stats["seconds"] <= facts.seconds  # at twice the captured pace
    assert 0 <= stats["statement_mean_s"] <= stats["statement_max_s"] < 1


def test_run_time_over_a_minute_counts_its_minutes() -> None:
    out = (PR / "pgreplay.out").read_text() + (PR / "pgreplay.err").read_text()
    longer = out.replace("Total run time: ", "Total run time: 1 hours 2 minutes ")
    assert pgreplay.parse(longer)["seconds"] == pytest.approx(
        3720 + pgreplay.parse(out)["seconds"])


def test_output_without_statistics_is_refused() -> None:
    with pytest.raises(pgreplay.ReplayParseError):
        pgreplay.parse("Execution is 10 seconds behind schedule\n")


def test_logs_that_are_not_csvlogs_name_their_line() -> None:
    lines = (PR / "capture.csv").read_text().splitlines(keepends=True)
    with pytest.raises(pgreplay.LogError) as bad:
        pgreplay.facts("".join(lines[:3]) + 'x,"unterminated\n')
    assert bad.value.line == 4
    with pytest.raises(pgreplay.LogError) as short:
        pgreplay.facts("".join(lines[:2]) + "a,b,c\n")
    assert short.value.line == 3 and "3 columns" in short.value.what
    found = pgreplay.parse_error("Error parsing line 12: comma number 2 not found")
    assert found is not None and (found.line, found.what) == (12, "comma number 2 not found")
