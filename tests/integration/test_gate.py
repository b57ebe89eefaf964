"""The regression gate on real runs: `compare BEFORE AFTER --fail-if-slower 3%` exits 4 on
a real injected slowdown and 0 on an A/A pair (the same file run twice), with one line for
the CI log and JUnit XML that names the failing configuration.

The slowdown is synchronous_commit = on with commit_delay = 10 ms where before commits did
not wait: each commit sleeps 10 ms before its WAL flush, a tenfold slowdown (87-90 TPS
against 1,500-2,000 here) that 1-second trials on a noisy disk cannot hide.
`synchronous_commit = on` alone (about -40% here) was once lost in CI's noise at 3 trials
per folder: the interval reached +0.0%."""

from __future__ import annotations

import json
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
clients = 2
jobs = 1
duration = "1s"
warmup = "0s"
[repeat]
rounds = 2
"""
SLOW = "commit_delay = 10000\ncommit_siblings = 0\n"  # µs; 0: delay even a lone commit

WORK_ON_TMPFS = True  # see conftest: mechanics, not disks


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return {
        "before": run_shared(tmp_path_factory, "before", FILE.format(sync="off", extra="")),
        "again": run_shared(tmp_path_factory, "again", FILE.format(sync="off", extra="")),
        "slower": run_shared(tmp_path_factory, "slower", FILE.format(sync="on", extra=SLOW)),
    }


def test_a_real_slowdown_fails_the_gate(runs: dict[str, Path], tmp_path: Path) -> None:
    junit = tmp_path / "gate.xml"
    res = pgsweep("compare", str(runs["before"]), str(runs["slower"]), "--fail-if-slower", "3%",
                  "--junit", str(junit))  # fmt: skip
    assert res.returncode == 4, res.stderr + res.stdout
    line = [x for x in res.stdout.splitlines() if x.startswith("pgsweep gate:")]
    assert len(line) == 1 and line[0].startswith("pgsweep gate: FAIL: 1 of 1"), res.stdout
    assert "warning: the folders ran in different sessions" in res.stdout
    suite = ET.parse(junit).getroot()
    assert suite.get("tests") == "1" and suite.get("failures") == "1"
    (case,) = suite.iter("testcase")
    failure = case.find("failure")
    assert failure is not None and "slower" in (failure.get("message") or "")


def test_an_a_a_pair_passes_the_gate(runs: dict[str, Path], tmp_path: Path) -> None:
    junit = tmp_path / "gate.xml"
    res = pgsweep("compare", str(runs["before"]), str(runs["again"]), "--fail-if-slower", "3%",
                  "--junit", str(junit), "--json")  # fmt: skip
    assert res.returncode == 0, res.stderr + res.stdout
    assert res.stderr.startswith("pgsweep gate: PASS"), res.stderr
    data = json.loads(res.stdout)
    (row,) = data["matched"]
    assert not row["slower_beyond_threshold"] and row["ci_low"] <= row["ratio"] <= row["ci_high"]
    assert data["regressions"] == [] and data["fail_if_slower"] == 0.03
    suite = ET.parse(junit).getroot()
    assert suite.get("failures") == "0" and suite.find("testcase/failure") is None


def test_a_bad_threshold_is_an_input_error(runs: dict[str, Path]) -> None:
    res = pgsweep("compare", str(runs["before"]), str(runs["again"]), "--fail-if-slower", "3")
    assert res.returncode == 2 and "--fail-if-slower" in res.stderr and "percentage" in res.stderr
    assert "write e.g. --fail-if-slower 2%" in res.stderr  # the fix names the option given


def test_run_against_measures_both_sides_in_every_round(
    runs: dict[str, Path], tmp_path: Path, state_dir: Path
) -> None:
    """`run FILE --against DIR`: DIR's configuration (commits that do not wait) measured
    again beside FILE's (commit_delay) in every round of one run; the report judges the
    change as the factor run.against, with no session drift in it."""
    path = write_experiment(tmp_path, FILE.format(sync="on", extra=SLOW))
    out = tmp_path / "r"
    res = pgsweep("run", str(path), "--results", str(out), "--against", str(runs["before"]))
    assert res.returncode == 0, res.stderr + res.stdout
    rows = trials(out)
    rounds: dict[int, set[str]] = {}
    for r in rows:
        rounds.setdefault(r["round"], set()).add(r["config_id"])
    assert sorted(rounds) == [1, 2] and all(v == {"c01", "c02"} for v in rounds.values())
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
    runs: dict[str, Path], tmp_path: Path, state_dir: Path
) -> None:
    other = FILE.format(sync="on", extra="") + '[factors]\nserver.work_mem = ["4MB", "8MB"]\n'
    path = write_experiment(tmp_path, other)
    res = pgsweep("run", str(path), "--results", str(tmp_path / "r"),
                  "--against", str(runs["before"]))  # fmt: skip
    assert res.returncode == 2 and "the factors differ from those of" in res.stderr, res.stderr
    res = pgsweep("run", str(path), "--results", str(tmp_path / "r"), "--against", str(tmp_path))
    assert res.returncode == 2 and "is not a results folder" in res.stderr, res.stderr
    # layers keep per-file state (huge-page counts, frozen scripts): not combined yet
    oslayer = write_experiment(tmp_path, FILE.format(sync="on", extra="") + "[os]\nthp = 'never'\n",
                               "os.toml")  # fmt: skip
    res = pgsweep("run", str(oslayer), "--results", str(tmp_path / "r"),
                  "--against", str(runs["before"]))  # fmt: skip
    assert res.returncode == 2 and "--against cannot combine runs that use [os]" in res.stderr
    assert not (tmp_path / "r").exists()
