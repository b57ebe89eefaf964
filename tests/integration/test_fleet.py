"""A fleet by hand on this machine: one 2-configuration experiment run as two shards
(`run --shard K/2`, real PostgreSQL and pgbench), merged into one folder holding every
trial of the plan once with its group; merges of tampered or foreign shards refused."""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import sqlite3
from pathlib import Path

import pytest

from conftest import have_postgres, leftovers, pgsweep, requires_pg, trials, write_experiment

pytestmark = [requires_pg, pytest.mark.postgres]


BODY = """
[experiment]
name = "fleet"
[cluster]
scale = 1
[workload]
script = "select-only"
clients = 2
jobs = 2
duration = "1s"
rate = 200  # conftest.MECHANICS
warmup = "0s"
[factors]
server.synchronous_commit = ["on", "off"]
[repeat]
rounds = 4
"""  # no seed: every shard draws the same one from the file's text


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two shards of one file, run one after the other; their folders, the file, the plan."""
    if not have_postgres():
        pytest.skip("PostgreSQL server binaries missing")
    folder = tmp_path_factory.mktemp("fleet")
    before = set(os.listdir("/tmp"))
    path = write_experiment(folder, BODY)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PGSWEEP_STATE_DIR", str(folder / "state"))
        for k, group in ((1, "alpha"), (2, "beta")):
            res = pgsweep("run", str(path), "--shard", f"{k}/2", "--group", group,
                          "--results", str(folder / f"s{k}"))  # fmt: skip
            assert res.returncode == 0, res.stderr + res.stdout
            assert leftovers(before, folder / f"s{k}") == []
    plan = pgsweep("plan", str(path), "--shards", "2")
    assert plan.returncode == 0, plan.stderr
    (folder / "plan.txt").write_text(plan.stdout)
    return folder


def _planned_order(folder: Path) -> list[str]:
    m = re.search(r"run order: (.*)", (folder / "plan.txt").read_text())
    assert m, "plan printed no run order"
    return m.group(1).split()


def test_each_shard_ran_its_complete_rounds(fleet: Path) -> None:
    order = _planned_order(fleet)
    assert "shards (host groups)" in (fleet / "plan.txt").read_text()
    for k, group, rounds in ((1, "alpha", {1, 2}), (2, "beta", {3, 4})):
        rows = trials(fleet / f"s{k}")
        assert {r["round"] for r in rows} == rounds
        assert {(r["host_group"], r["shard"]) for r in rows} == {(group, k)}
        # every configuration once per round, in the order the one plan gives that round
        assert [r["id"] for r in rows] == [t for t in order if int(t[1:].split("-")[0]) in rounds]


def test_merge_holds_every_trial_once_with_its_group(fleet: Path) -> None:
    out = fleet / "merged"
    res = pgsweep("merge", str(fleet / "s2"), str(fleet / "s1"), "--results", str(out))
    assert res.returncode == 0, res.stderr + res.stdout
    assert "merged 2 of 2 shards (8 trials)" in res.stdout
    rows = trials(out)
    assert sorted(r["id"] for r in rows) == sorted(_planned_order(fleet))  # once each
    assert {r["round"]: r["host_group"] for r in rows} == {1: "alpha", 2: "alpha", 3: "beta",
                                                           4: "beta"}  # fmt: skip
    assert oct(out.stat().st_mode & 0o777) == "0o700"
    assert (out / "experiment.toml").read_text() == (fleet / "s1" / "experiment.toml").read_text()
    # each machine's facts kept apart
    db = sqlite3.connect(out / "results.db")
    scopes = {s for (s,) in db.execute("SELECT DISTINCT scope FROM environment")}
    db.close()
    assert {"host@alpha", "host@beta", "fleet"} <= scopes and "host" not in scopes
    # export: one row per trial with its group and round
    exp = pgsweep("export", str(out), "-o", str(fleet / "t.csv"))
    assert exp.returncode == 0, exp.stderr
    with open(fleet / "t.csv", newline="") as f:
        table = list(csv.DictReader(f))
    assert sorted((r["round"], r["group"]) for r in table) == sorted(
        (str(r["round"]), r["host_group"]) for r in rows)  # fmt: skip
    # show and report read it as one experiment: 4 rounds, 2 groups
    show = pgsweep("show", str(out))
    assert show.returncode == 0 and show.stdout.count("4/4") == 2, show.stdout
    rep = pgsweep("report", str(out), "--format", "json")
    assert rep.returncode == 0, rep.stderr
    a = json.loads(rep.stdout)
    assert a["fleet"]["groups"] == ["alpha", "beta"]
    assert a["fleet"]["rounds"] == {"alpha": 2, "beta": 2}
    assert a["fleet"]["interaction"]["df"] == [1, 2]  # 1 config x 2 groups; 8 - 6 left
    tps = [c for c in a["comparisons"] if c["metric"] == "tps"]
    assert tps and all(c["groups"] == 2 and c["rounds"] == 4 for c in tps)
    text = pgsweep("report", str(out)).stdout
    assert "every verdict rests on 2 groups and 4 rounds" in text


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, symlinks=True)
    return dst


def _refused(*args: str) -> str:
    res = pgsweep("merge", *args)
    assert res.returncode == 2, res.stderr + res.stdout
    return res.stderr


def test_tampered_or_foreign_shards_are_refused(fleet: Path) -> None:
    s1, s2, work = fleet / "s1", fleet / "s2", fleet / "bad"
    work.mkdir()
    out = work / "out"
    # a shard given twice, rounds held twice
    assert "given twice" in _refused(str(s1), str(_copy(s1, work / "s1b")), "--results", str(out))
    # a trial moved into a round its shard's plan does not give it
    moved = _copy(s2, work / "moved")
    db = sqlite3.connect(moved / "results.db")
    db.execute("PRAGMA foreign_keys = ON")
    tid = db.execute("SELECT id FROM trial WHERE round = 3 LIMIT 1").fetchone()[0]
    db.execute("UPDATE trial SET round = 2 WHERE id = ?", (tid,))
    db.commit()
    db.close()
    err = _refused(str(s1), str(moved), "--results", str(out))
    assert "holds round(s) 2" in err and "shard 2/2" in err
    # another experiment file
    foreign = _copy(s2, work / "foreign")
    db = sqlite3.connect(foreign / "results.db")
    db.execute("UPDATE experiment SET file_text = replace(file_text, 'rounds = 4', "
               "'rounds = 4\n# changed')")  # fmt: skip
    db.commit()
    db.close()
    err = _refused(str(s1), str(foreign), "--results", str(out))
    assert "the experiment file differ" in err and str(foreign) in err
    # a folder another user could change is read under the readers' rules
    open_dir = _copy(s2, work / "open")
    open_dir.chmod(0o777)
    assert "could be changed by another user" in _refused(str(s1), str(open_dir), "--results",
                                                          str(out))  # fmt: skip
    # never into a folder that holds something
    full = work / "full"
    full.mkdir()
    (full / "x").write_text("mine")
    assert "not an empty folder" in _refused(str(s1), str(s2), "--results", str(full))
    assert (full / "x").read_text() == "mine"
    assert not out.exists()  # nothing was made by the refused merges


@pytest.mark.parametrize("body,args,says", [
    (BODY.replace("rounds = 4", 'rounds = "auto"\nmax_rounds = 6'), ["--shard", "1/2"],
     'rounds = "auto" looks at every round'),
    (BODY, ["--shards", "5"], "4 rounds cannot give each of 5 groups a round"),
    (BODY, ["--shard", "3/2"], "is not K/N"),
])  # fmt: skip
def test_shards_refused_before_anything_runs(tmp_path: Path, body: str, args: list[str],
                                             says: str) -> None:  # fmt: skip
    path = write_experiment(tmp_path, body)
    res = pgsweep("plan", str(path), *args)
    assert res.returncode == 2 and says in res.stderr, res.stderr
    if "--shards" not in args:
        res = pgsweep("run", str(path), *args, "--results", str(tmp_path / "r"))
        assert res.returncode == 2 and says in res.stderr, res.stderr
        assert not (tmp_path / "r").exists()


def test_group_needs_a_shard(tmp_path: Path) -> None:
    path = write_experiment(tmp_path, BODY)
    res = pgsweep("run", str(path), "--group", "a", "--results", str(tmp_path / "r"))
    assert res.returncode == 2 and "--group names the group of a shard" in res.stderr
    res = pgsweep("run", str(path), "--shard", "1/2", "--group", "../x", "--results",
                  str(tmp_path / "r"))  # fmt: skip
    assert res.returncode == 2 and "cannot name a group" in res.stderr
    assert not (tmp_path / "r").exists()
