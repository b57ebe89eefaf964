"""The regression gate on real runs. The gate decides from interleaved evidence: `run
AFTER --against BEFORE` measures both sides in every round, and `report
--fail-if-slower 3%` exits 4 on a real slowdown and 0 on an A/A pair, with one line for
the CI log and JUnit XML that names the failing side. `compare` of two folders (one
session each) gives no verdict and refuses to gate (exit 2): their drift is not measured
(test_sessions.py covers calibrated compares).

The slowdown is synchronous_commit = on with commit_delay = 10 ms where before commits did
not wait: each commit sleeps 10 ms before its WAL flush, a tenfold slowdown (90 TPS
against about 1,100 here, one client) that 1-second trials cannot hide. Sized for a loaded machine:
with a CPU hog beside it the fast side's 1-second trials fall to a third of their TPS or
less and vary by tens of percent, so the gated runs have 4 rounds (a one-sided t on 3 df:
2 rounds, 1 df, called a tenfold slowdown "no significant difference" under load), and
the A/A pair is gated at 50% (a one-sided bound below -3% from 4 rounds of an A/A pair
happens a few percent of the time when trials are that noisy; below -50%, never)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest

from conftest import pgsweep, run_shared, trials, write_experiment

FILE = """
[experiment]
name = "gate"
seed = 2
[cluster]
scale = 1
[server]
synchronous_commit = "{sync}"
{extra}[workload]
script = "tpcb-like"
clients = 1
jobs = 1
duration = "1s"
warmup = "0s"
rate = 500  # far above the delayed commits' 100/s at most (conftest.MECHANICS)
[repeat]
rounds = {rounds}
"""
SLOW = "commit_delay = 10000\ncommit_siblings = 0\n"  # µs; 0: delay even a lone commit



def against(tmp_path_factory: pytest.TempPathFactory, name: str, body: str,
            before: Path) -> Path:  # fmt: skip
    """`run FILE --against BEFORE`, once for the module."""
    folder = tmp_path_factory.mktemp(name)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PGSWEEP_STATE_DIR", str(folder / "state"))
        path = write_experiment(folder, body)
        res = pgsweep("run", str(path), "--results", str(folder / "res"), "--against",
                      str(before))  # fmt: skip
    assert res.returncode == 0, res.stderr + res.stdout
    return folder / "res"


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    quick = FILE.format(sync="off", extra="", rounds=2)
    out = {"before": run_shared(tmp_path_factory, "before", quick)}
    # another session's folder of the same file: what `compare` is given there is never
    # judged (its drift is not measured), so a copy of the first shows it as well as a run
    out["again"] = tmp_path_factory.mktemp("again") / "res"
    shutil.copytree(out["before"], out["again"])
    slow, same = (FILE.format(sync=sync, extra=extra, rounds=4)
                  for sync, extra in (("on", SLOW), ("off", "")))  # fmt: skip
    out["slower"] = against(tmp_path_factory, "slower", slow, out["before"])
    out["same"] = against(tmp_path_factory, "same", same, out["before"])
    return out


def test_a_real_slowdown_fails_the_gate(runs: dict[str, Path], tmp_path: Path) -> None:
    junit = tmp_path / "gate.xml"
    res = pgsweep("report", str(runs["slower"]), "--fail-if-slower", "3%", "--junit", str(junit))
    assert res.returncode == 4, res.stderr + res.stdout
    (line,) = [x for x in res.stdout.splitlines() if x.startswith("pgsweep gate:")]
    assert line.startswith("pgsweep gate: FAIL: 1 of 1 configuration(s) slower than 3%"), line
    assert "worst run.against=after: slower" in line and "with 80% power" in line, line
    suite = ET.parse(junit).getroot()
    assert suite.get("tests") == "1" and suite.get("failures") == "1"
    (case,) = suite.iter("testcase")
    failure = case.find("failure")
    assert failure is not None and "slower" in (failure.get("message") or "")


def test_an_a_a_pair_passes_the_gate(runs: dict[str, Path], tmp_path: Path) -> None:
    junit = tmp_path / "gate.xml"
    res = pgsweep("report", str(runs["same"]), "--fail-if-slower", "50%", "--junit", str(junit),
                  "--format", "json")  # fmt: skip
    assert res.returncode == 0, res.stderr + res.stdout
    assert res.stderr.startswith("pgsweep gate: PASS"), res.stderr
    data = json.loads(res.stdout)
    (effect,) = [e for e in data["effects"] if e["metric"] == "tps" and e["kind"] == "main"]
    assert effect["factor"] == "run.against" and effect["ci_low"] <= effect["ratio"]
    suite = ET.parse(junit).getroot()
    assert suite.get("failures") == "0" and suite.find("testcase/failure") is None


def test_compare_of_two_sessions_gives_no_verdict_and_cannot_gate(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    res = pgsweep("compare", str(runs["before"]), str(runs["again"]), "--json")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    (row,) = data["matched"]
    assert row["decision"] == "drift not measured" and row["ci_low"] is None, row
    assert any("--against" in w for w in data["warnings"])
    junit = tmp_path / "gate.xml"
    res = pgsweep("compare", str(runs["before"]), str(runs["slower"]), "--fail-if-slower", "3%",
                  "--junit", str(junit))  # fmt: skip
    assert res.returncode == 2, res.stderr + res.stdout
    assert "drift was not measured" in res.stderr and "--against" in res.stderr, res.stderr
    assert not junit.exists()


def test_a_bad_threshold_is_an_input_error(runs: dict[str, Path]) -> None:
    res = pgsweep("compare", str(runs["before"]), str(runs["again"]), "--fail-if-slower", "3")
    assert res.returncode == 2 and "--fail-if-slower" in res.stderr and "percentage" in res.stderr
    assert "write e.g. --fail-if-slower 2%" in res.stderr  # the fix names the option given


def test_run_against_measures_both_sides_in_every_round(runs: dict[str, Path]) -> None:
    """`run FILE --against DIR`: DIR's configuration (commits that do not wait) measured
    again beside FILE's (commit_delay) in every round of one run; the report judges the
    change as the factor run.against, with no session drift in it."""
    out = runs["slower"]
    rows = trials(out)
    rounds: dict[int, set[str]] = {}
    for r in rows:
        rounds.setdefault(r["round"], set()).add(r["config_id"])
    assert sorted(rounds) == [1, 2, 3, 4] and all(v == {"c01", "c02"} for v in rounds.values())
    frozen = (runs["before"] / "experiment.toml").read_text()
    assert (out / "against.toml").read_text() == frozen
    sync = {r["config_id"]: json.loads(r["effective_json"])["synchronous_commit"]
            for r in rows}  # fmt: skip
    assert sync == {"c01": "off", "c02": "on"}  # before = DIR's file, after = this one
    data = json.loads(pgsweep("report", str(out), "--format", "json").stdout)
    (effect,) = [e for e in data["effects"] if e["metric"] == "tps" and e["kind"] == "main"]
    assert effect["factor"] == "run.against" and effect["level"] == "after"
    assert effect["decision"] == "different" and effect["ratio"] < 0.3, effect


def test_run_against_refuses_other_factors_and_other_folders(
    runs: dict[str, Path], tmp_path: Path, state_dir: Path, open_dir: Path
) -> None:
    other = (FILE.format(sync="on", extra="", rounds=2)
             + '[factors]\nserver.work_mem = ["4MB", "8MB"]\n')  # fmt: skip
    path = write_experiment(tmp_path, other)
    res = pgsweep("run", str(path), "--results", str(tmp_path / "r"),
                  "--against", str(runs["before"]))  # fmt: skip
    assert res.returncode == 2 and "the factors differ from those of" in res.stderr, res.stderr
    res = pgsweep("run", str(path), "--results", str(tmp_path / "r"), "--against", str(tmp_path))
    assert res.returncode == 2 and "is not a results folder" in res.stderr, res.stderr
    # the workload layer keeps its scripts' frozen copies itself: not combined yet
    (open_dir / "one.sql").write_text("SELECT 1;\n")
    custom = write_experiment(open_dir, FILE.format(sync="on", extra="", rounds=2).replace(
        'script = "tpcb-like"', 'script = "one.sql"'), "custom.toml")  # fmt: skip
    res = pgsweep("run", str(custom), "--results", str(tmp_path / "r"),
                  "--against", str(runs["before"]))  # fmt: skip
    assert res.returncode == 2, res.stderr
    assert "--against cannot combine runs that use the script one.sql" in res.stderr
    assert not (tmp_path / "r").exists()
