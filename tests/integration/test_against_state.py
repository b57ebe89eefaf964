"""`run FILE --against DIR` where the two files differ in what a layer sets up: a
synchronous standby in DIR's file, none in FILE. Every layer's checks run on the
configurations of both sides together, and each trial records what was in force, read
back from the servers, never what was asked: the "before" trials ran with their
synchronous standby streaming, the "after" trials without one."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from conftest import leftovers, pgsweep, run_shared, trials, write_experiment

FILE = """
[experiment]
name = "against-standby"
seed = 3
[cluster]
scale = 1
[workload]
clients = 2
duration = "1s"
rate = 200  # conftest.MECHANICS
warmup = "0s"
[repeat]
rounds = 2
{replication}
"""
WITH_STANDBY = '[replication]\nstandbys = 1\nmode = "sync"\n'



@pytest.fixture(scope="module")
def before(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return run_shared(tmp_path_factory, "before", FILE.format(replication=WITH_STANDBY))


def _effective(results: Path) -> dict[str, list[dict[str, str]]]:
    db = __import__("sqlite3").connect(results / "results.db")
    levels = dict(db.execute("SELECT id, levels_json FROM configuration").fetchall())
    db.close()
    out: dict[str, list[dict[str, str]]] = {}
    for row in trials(results):
        side = json.loads(levels[row["config_id"]]).get("run.against", "")
        out.setdefault(side, []).append(json.loads(row["effective_json"]))
    return out


def test_each_side_records_the_standbys_that_ran(
    before: Path, tmp_path: Path, state_dir: Path
) -> None:
    seen = _effective(before)[""]
    assert all(e["replication.standbys"] == "1" for e in seen), seen
    assert all("s1: streaming sync" in e["replication.state"] for e in seen), seen
    path = write_experiment(tmp_path, FILE.format(replication=""))
    out = tmp_path / "r"
    tmp_before = set(os.listdir("/tmp"))
    res = pgsweep("run", str(path), "--results", str(out), "--against", str(before))
    assert res.returncode == 0, res.stderr + res.stdout
    sides = _effective(out)
    assert sorted(sides) == ["after", "before"] and all(len(v) == 2 for v in sides.values())
    for e in sides["before"]:  # DIR's file: its synchronous standby streamed in every trial
        assert e["replication.standbys"] == "1", e
        assert "s1: streaming sync" in e["replication.state"], e
        assert e["replication.synchronous_standby_names"] == "FIRST 1 (s1)", e
    for e in sides["after"]:  # this file: no standby, nothing waiting for one
        assert e["replication.standbys"] == "0", e
        assert e.get("replication.state", "") == "", e
        assert e["replication.synchronous_standby_names"] == "", e
    assert not leftovers(tmp_before, out)
