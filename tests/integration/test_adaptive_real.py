"""Adaptive rounds on a real run: `rounds = "auto"` looks after each round and stops long
before its maximum of 8: a real fivefold effect is decided at the first or second look and
a real A/A comparison can no longer find a change of 25% (futility about `[repeat]
interest`) by round 3 or 4; the report calls the one and not the other, and says where the
run stopped; `--resume` of a stopped run runs nothing. The adaptive stop itself is what is
tested here (tests/unit/test_adaptive.py and test_simulations hold its error rates).

The factor is commit_siblings with commit_delay = 100 ms and synchronous_commit = on at two
clients, at a fixed rate of 200 transactions/s: with 0 siblings every commit sleeps 100 ms
before its flush, so two clients commit at most 20 a second (the known effect); with 5 or
10 no commit ever has that many other transactions open, both never sleep and keep the
rate (the A/A pair). At the fixed rate the pair's TPS varies only as pgbench's Poisson
schedule does (about 7% for 1-second trials), whatever the suite's other lanes do: at full
speed beside them one run drew an A/A pair 25% apart in mean TPS over 8 rounds (stop 38's
CI), and futility asks about the change estimated so far when that is larger than the
interest, so that run went on to its maximum.

A real A/A pair is called different at the rate alpha allows, by design: at the default
5% (for the family) one CI run in about twenty would fail here with nothing wrong (stop
40's CI: Poisson schedules put the pair 10% apart over 6 rounds, and it was decided).
[report] alpha = 0.001 makes that one run in a thousand; the fivefold effect is still
decided at the first or second look."""

from __future__ import annotations

import json
import re
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest

from conftest import pgsweep, requires_pg, run_shared, trials

FILE = """
[experiment]
name = "adaptive"
seed = 5
[cluster]
scale = 1
[server]
synchronous_commit = "on"
commit_delay = 100000
[workload]
script = "tpcb-like"
clients = 2
jobs = 1
duration = "1s"
rate = 200
warmup = "0s"
[repeat]
rounds = "auto"
min_rounds = 3
max_rounds = 8
precision = "2%"
interest = "25%"
[report]
alpha = 0.001
[factors]
server.commit_siblings = [5, 10, 0]
"""

NO_CHANGE = ("futility", "every interval inside")


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return run_shared(tmp_path_factory, "adaptive", FILE)


def rounds_run(results: Path) -> int:
    return max(r["round"] for r in trials(results))


@requires_pg
def test_the_run_stops_before_its_maximum(results: Path) -> None:
    rows = trials(results)
    last = rounds_run(results)
    assert 3 <= last < 8, last  # min_rounds 3, at most 8
    assert len(rows) == 3 * last and all(r["status"] == "ok" for r in rows), rows


@requires_pg
def test_the_report_calls_the_effect_and_not_the_a_a_pair(results: Path) -> None:
    res = pgsweep("report", str(results), "--format", "json")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    seq = data["method"]["adaptive"]
    last = rounds_run(results)
    assert seq["rounds"] == last and seq["stopped_at"] == last and seq["max_rounds"] == 8
    # the A/A pair was the one left open, and it stopped as one with no change worth
    # finding: futility, or (after more rounds) its interval inside ±25%
    assert seq["reason"].startswith(NO_CHANGE), seq
    # decided at the first or second look: at most 20 TPS against 200 (the model may fall
    # back to a paired t with 2 degrees of freedom at round 3)
    assert seq["decided_at"]["server.commit_siblings=0"] in (3, 4), seq
    levels = {c["id"]: c["levels"]["server.commit_siblings"] for c in data["configurations"]}
    tps = {levels[c["config"]]: c for c in data["comparisons"] if c["metric"] == "tps"}
    assert tps[0]["decision"] == "different" and tps[0]["ratio"] < 0.3, tps[0]
    assert tps[10]["decision"] != "different", tps[10]
    md = pgsweep("report", str(results), "--format", "markdown")
    assert re.search(rf"Adaptive rounds: {last} of at most 8 rounds run; ({'|'.join(NO_CHANGE)})",
                     md.stdout), md.stdout


@requires_pg
def test_resuming_a_stopped_run_runs_nothing(
    results: Path, tmp_path: Path, state_dir: Path
) -> None:
    path = tmp_path / "exp.toml"
    path.write_text(FILE)
    res = pgsweep("run", str(path), "--results", str(results), "--resume")
    assert res.returncode == 0, res.stderr + res.stdout
    assert "0 of 24 trials to run" in res.stdout
    last = rounds_run(results)
    assert re.search(rf"adaptive rounds: stopped after round {last}: ({'|'.join(NO_CHANGE)})",
                     res.stdout), res.stdout
    assert len(trials(results)) == 3 * last


@requires_pg
def test_the_within_run_gate_fails_on_the_slow_configuration_only(
    results: Path, tmp_path: Path
) -> None:
    junit = tmp_path / "gate.xml"
    res = pgsweep("report", str(results), "--fail-if-slower", "3%", "--junit", str(junit))
    assert res.returncode == 4, res.stderr + res.stdout
    (line,) = [x for x in res.stdout.splitlines() if x.startswith("pgsweep gate:")]
    assert line.startswith("pgsweep gate: FAIL: 1 of 2 configuration(s) slower than 3%"), line
    assert "worst server.commit_siblings=0: slower" in line, line
    suite = ET.parse(junit).getroot()
    assert suite.get("tests") == "2" and suite.get("failures") == "1"
    failed = [c.get("name") for c in suite.iter("testcase") if c.find("failure") is not None]
    assert failed == ["server.commit_siblings=0"]
    res = pgsweep("report", str(results), "--fail-if-slower", "99%", "--format", "json")
    assert res.returncode == 0 and res.stderr.startswith("pgsweep gate: PASS"), res.stderr
