"""A report whose baseline configuration lost every trial still answers what the surviving
trials can (seed 4 re-run: half the experiment failed, and the report judged nothing).

Real runs: a 2x2x2 factorial whose baseline level of statement_timeout (1 ms, against a
script whose every statement sleeps 5 ms) fails every trial; the four configurations
with statement_timeout = 0 form a complete 2x2 of clients (a real effect: the script is
sleep-bound, so four clients do about four times the work of one) and protocol (none)."""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import open_base, pgsweep, requires_pg, trials, write_experiment

pytestmark = [requires_pg, pytest.mark.postgres]


@pytest.fixture(scope="module")
def results() -> Iterator[Path]:
    folder = Path(tempfile.mkdtemp(prefix="pgsweep-test-open-", dir=open_base(__name__)))
    folder.chmod(0o755)  # the server user reads the script
    (folder / "sleep.sql").write_text("SELECT pg_sleep(0.005);\n")
    path = write_experiment(folder, """
        [experiment]
        name = "lost-baseline"
        seed = 4
        [cluster]
        scale = 1
        [workload]
        script = "sleep.sql"
        jobs = 2
        duration = "1s"
        warmup = "0s"
        [factors]
        server.statement_timeout = ["1ms", "0"]
        workload.clients = [1, 4]  # [1, 2] was once "undecided" under load (ci121):
                                   # 4 rounds, 3 contrasts, and one slow trial's round
        workload.protocol = ["simple", "prepared"]
        [repeat]
        rounds = 4  # 3 gave, once under load (ci69), the doubled clients "undecided" (2 df)
    """)  # fmt: skip
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PGSWEEP_STATE_DIR", str(folder / "state"))
        res = pgsweep("run", str(path), "--results", str(folder / "res"))
    assert res.returncode == 3, res.stderr + res.stdout  # the run finished, trials failed
    yield folder / "res"
    shutil.rmtree(folder, ignore_errors=True)


def test_the_surviving_factorial_is_judged(results: Path) -> None:
    rows = trials(results)
    failed = {r["config_id"] for r in rows if r["status"] == "failed"}
    assert failed == {"c01", "c02", "c03", "c04"}  # statement_timeout = 1ms: all of them
    res = pgsweep("report", str(results), "--format", "json")
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout)
    # the baseline moved to the nearest configuration with data, and the report says why
    assert report["baseline"] == "c05"
    notes = " ".join(report["method"]["notes"])
    assert "the baseline c01" in notes and "has no successful trial" in notes
    assert "server.statement_timeout: not judged: no configuration with " \
        "server.statement_timeout=1ms" in notes  # fmt: skip
    tps = {c["contrast"]: c for c in report["comparisons"] if c["metric"] == "tps"}
    assert {c["config"] for c in tps.values()} == {"c06", "c07", "c08"}
    effects = {e["contrast"]: e for e in report["effects"] if e["metric"] == "tps"}
    clients = effects["workload.clients=4 vs 1"]
    assert clients["decision"] == "different" and clients["ratio"] > 2, clients
    assert "workload.protocol=prepared vs simple" in effects
    assert not any("statement_timeout" in k for k in effects)


def test_the_warnings_say_each_cause_once(results: Path) -> None:
    res = pgsweep("report", str(results))
    assert res.returncode == 0, res.stderr
    text = " ".join(res.stdout.split())  # the terminal wraps long warnings
    # sixteen failed trials, one cause: one warning naming the four configurations. Under
    # load PostgreSQL once reported a 1 ms statement timeout as "canceling statement due to
    # user request" (its timeout indicator raced the cancel, ci45), and with four clients
    # on the prepared protocol one client's PREPARE was the statement cancelled, its next
    # execution finding no "P_0" (ci125): a second cause, said once
    failed = re.findall(r"(\d+) trial\(s\) failed \(([c0-9, ]+)\): pgbench failed: .*? "
                        r"ERROR: (?:canceling statement due to )?(statement timeout|user "
                        r"request|prepared statement \"P_0\" does not exist)", text)  # fmt: skip
    assert sum(int(n) for n, _, _ in failed) == 16, res.stdout
    causes = [why for _, _, why in failed]
    assert len(causes) == len(set(causes)) and "statement timeout" in causes, res.stdout
    if len(failed) == 1:
        assert failed[0][1] == "c01, c02, c03, c04", res.stdout
    assert "not estimable" not in text
