"""End to end against real PostgreSQL clusters and real pgbench: stored numbers, restarts
versus reloads, failed trials, SIGINT and kill -9 with resume, and nothing left behind."""

from __future__ import annotations

import itertools
import json
import os
import re
import signal
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import (
    leftovers,
    pgsweep,
    pgsweep_start,
    postmasters,
    requires_pg,
    trials,
    write_experiment,
)
from pgsweep.host.workarea import run_tag

pytestmark = [requires_pg, pytest.mark.postgres]



def _artifact(results: Path, trial_id: str, name: str) -> str:
    import gzip

    db = sqlite3.connect(results / "results.db")
    (blob,) = db.execute(
        "SELECT gz FROM artifact WHERE trial_id = ? AND name = ?", (trial_id, name)
    ).fetchone()
    db.close()
    return gzip.decompress(blob).decode()


def _experiment(
    tmp_path: Path,
    factors: str,
    *,
    rounds: int = 2,
    script: str = "select-only",
    duration: str = "2s",
    warmup: str = "0s",
    extra: str = "",
) -> Path:
    return write_experiment(
        tmp_path,
        f"""
        [experiment]
        name = "it"
        seed = 5
        [cluster]
        scale = 1
        [workload]
        script = "{script}"
        clients = 2
        jobs = 2
        duration = "{duration}"
        rate = 200  # conftest.MECHANICS
        warmup = "{warmup}"
        {extra}
        [factors]
        {factors}
        [repeat]
        rounds = {rounds}
        """,
    )


def test_tiny_experiment_stores_what_pgbench_printed(tmp_path: Path, state_dir: Path) -> None:
    before = set(os.listdir("/tmp"))
    path = _experiment(
        tmp_path, 'server.synchronous_commit = ["on", "off"]', script="tpcb-like", warmup="1s"
    )
    results = tmp_path / "res"
    res = pgsweep("run", str(path), "--results", str(results))
    assert res.returncode == 0, res.stderr + res.stdout
    rows = trials(results)
    assert len(rows) == 4 and {r["status"] for r in rows} == {"ok"}
    assert sorted(r["id"] for r in rows) == ["r1-c01", "r1-c02", "r2-c01", "r2-c02"]
    for r in rows:
        out = _artifact(results, r["id"], "pgbench.out")
        printed = re.search(r"^tps = ([\d.]+) \(without initial connection time\)", out, re.M)
        assert printed and r["tps"] == float(printed.group(1))
        assert f"number of transactions actually processed: {r['transactions']}" in out
        assert "duration: 1 s" in _artifact(results, r["id"], "warmup.out")  # ran apart
        db = sqlite3.connect(results / "results.db")
        at = [
            a
            for (a,) in db.execute(
                "SELECT at_s FROM sample WHERE trial_id = ? ORDER BY at_s", (r["id"],)
            )
        ]
        # what pgbench's -P 1 printed, as it printed it: once a second over a 2 s window
        # (the last line may be skipped when -T ends on it; a busy machine prints "2.1 s")
        shown = re.findall(r"^progress: ([\d.]+) s,", _artifact(results, r["id"], "pgbench.err"),
                           re.M)  # fmt: skip
        assert at == [float(x) for x in shown] and [round(a) for a in at] in ([1], [1, 2]), at
        db.close()
    # tpcb-like writes: every trial after the first starts from the restored snapshot
    assert "new-cluster" in json.loads(rows[0]["events_json"])
    assert all("restore" in json.loads(r["events_json"]) for r in rows[1:])
    assert leftovers(before, results) == []
    show = pgsweep("show", str(results))
    assert show.returncode == 0 and "2/2" in show.stdout and "synchronous_commit" in show.stdout
    assert (results / "experiment.toml").read_text() == path.read_text()
    db = sqlite3.connect(results / "results.db")
    env = {(s, n): v for s, n, v in db.execute("SELECT scope, name, value FROM environment")}
    assert env[("host", "kernel")] == os.uname().release
    assert env[("host", "cpu_count")] == str(os.cpu_count())
    assert "--prefix" in env[("host", "pg_config_configure")]
    assert env[("c01", "synchronous_commit")] == "on (configuration file)"
    assert env[("c02", "synchronous_commit")] == "off (configuration file)"
    assert ("c01", "listen_addresses") in env  # pgsweep's own base settings are recorded
    shown = pgsweep("show", str(results), "--env")
    assert (
        "[host]" in shown.stdout and "synchronous_commit = off (configuration file)" in shown.stdout
    )


def test_restart_for_postmaster_settings_reload_for_others(tmp_path: Path, state_dir: Path) -> None:
    path = _experiment(
        tmp_path,
        'server.shared_buffers = ["128MB", "256MB"]\nserver.work_mem = ["4MB", "8MB"]',
        rounds=2,
        duration="1s",
    )
    results = tmp_path / "res"
    assert pgsweep("run", str(path), "--results", str(results)).returncode == 0
    rows = trials(results)
    levels = {
        c: json.loads(v)
        for c, v in sqlite3.connect(results / "results.db").execute(
            "SELECT id, levels_json FROM configuration"
        )
    }
    seen = {"restart": 0, "reload": 0}
    for prev, cur in itertools.pairwise(rows):
        a, b = levels[prev["config_id"]], levels[cur["config_id"]]
        events = json.loads(cur["events_json"])
        if a["server.shared_buffers"] != b["server.shared_buffers"]:
            assert "restart" in events and cur["server_started_at"] != prev["server_started_at"]
            seen["restart"] += 1
        elif a["server.work_mem"] != b["server.work_mem"]:
            assert events == ["reload"] and cur["server_started_at"] == prev["server_started_at"]
            seen["reload"] += 1
        else:
            assert events == [] and cur["server_started_at"] == prev["server_started_at"]
        effective = json.loads(cur["effective_json"])
        assert effective["shared_buffers"] == b["server.shared_buffers"]
        assert effective["work_mem"] == b["server.work_mem"]
    assert seen["restart"] and seen["reload"], seen


def test_setting_the_server_refuses_at_start_is_refused_at_plan(
    tmp_path: Path, state_dir: Path
) -> None:
    # wal_level=minimal is a valid value, but the server refuses it with max_wal_senders > 0:
    # the start check finds it before anything is made (it would fail every trial it is in)
    before = set(os.listdir("/tmp"))
    path = _experiment(tmp_path, 'server.wal_level = ["replica", "minimal"]', duration="1s")
    results = tmp_path / "res"
    res = pgsweep("run", str(path), "--results", str(results))
    assert res.returncode == 2, res.stderr + res.stdout
    assert "factors.server.wal_level: a server with these settings does not start" in res.stderr
    assert "max_wal_senders" in res.stderr and not results.exists()
    assert leftovers(before, results) == []


def test_a_failing_trial_fails_that_trial_only(open_dir: Path, state_dir: Path) -> None:
    # every statement outlives a 1 ms statement_timeout: pgbench aborts in that
    # configuration's trials only, and the run goes on with the others
    before = set(os.listdir("/tmp"))
    (open_dir / "sleep.sql").write_text("SELECT pg_sleep(0.005);\n")
    path = _experiment(open_dir, 'server.statement_timeout = ["0", "1ms"]', script="sleep.sql",
                       duration="1s")  # fmt: skip
    results = open_dir / "res"
    res = pgsweep("run", str(path), "--results", str(results))
    assert res.returncode == 3, res.stderr + res.stdout
    rows = trials(results)
    failed = [r for r in rows if r["status"] == "failed"]
    ok = [r for r in rows if r["status"] == "ok"]
    assert {r["config_id"] for r in failed} == {"c02"} and len(failed) == 2
    for r in failed:
        assert "pgbench failed" in r["reason"] and "statement timeout" in r["reason"]
    assert len(ok) == 2 and all(r["tps"] > 0 for r in ok)
    assert max(r["ord"] for r in ok) > min(r["ord"] for r in failed)  # the run went on
    assert "2 of 4 trials failed" in res.stdout
    assert leftovers(before, results) == []


def _start(path: Path, results: Path) -> Any:
    # fresh: `pgsweep progress` beside it finds it by its command line
    return pgsweep_start("run", str(path), "--results", str(results), fresh=True)


def _wait_for_trials(results: Path, n: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (results / "results.db").exists():
            try:
                if len(trials(results)) >= n:
                    return
            except sqlite3.OperationalError:
                pass
        time.sleep(0.2)
    raise AssertionError(f"fewer than {n} trials after {timeout} s")


def _assert_complete_once(results: Path, expected: int) -> None:
    ids = [r["id"] for r in trials(results)]
    assert len(ids) == expected and len(set(ids)) == expected


def _interrupt_mid_trial(
    tmp_path: Path, rounds: int, sig: signal.Signals
) -> tuple[Path, Path, Any, str, str]:
    """Start a run, let one trial finish, then signal pgsweep inside the next trial."""
    path = _experiment(tmp_path, 'server.work_mem = ["4MB", "8MB"]', rounds=rounds, duration="3s")
    results = tmp_path / "res"
    run = _start(path, results)
    _wait_for_trials(results, 1)
    # `pgsweep progress` from beside it: one of two trials done, an ETA, still running
    seen = json.loads(pgsweep("progress", str(results), "--json").stdout)
    assert (seen["done"], seen["total"], seen["running"]) == (1, 2, True), seen
    assert seen["eta_s"] is not None and seen["eta_s"] >= 0, seen
    # a fleet's question: it waits on the run, and answers once the run has ended
    waiter = pgsweep_start("progress", str(results), "--json", "--wait", "120",
                           env=dict(os.environ))
    time.sleep(1.5)  # inside the next trial's pgbench run
    assert waiter.poll() is None  # still waiting: the run goes on
    run.send_signal(sig)
    out, err = run.communicate(timeout=60)
    answer, _ = waiter.communicate(timeout=30)  # not the 120 s it may wait
    late = json.loads(answer)
    assert (late["done"], late["total"], late["running"]) == (1, 2, False), late
    after = pgsweep("progress", str(results)).stdout
    assert after.strip() == "1/2 trials, not running", after
    return path, results, run, out, err


def test_sigint_mid_trial_then_resume(tmp_path: Path, state_dir: Path) -> None:
    before = set(os.listdir("/tmp"))
    path, results, run, out, err = _interrupt_mid_trial(tmp_path, 1, signal.SIGINT)
    assert run.returncode == 130, err
    assert "--resume" in out
    assert len(trials(results)) == 1  # the interrupted trial is not kept
    assert leftovers(before, results) == []
    res = pgsweep("run", str(path), "--results", str(results), "--resume")
    assert res.returncode == 0, res.stderr
    assert "1 of 2 trials to run" in res.stdout
    _assert_complete_once(results, 2)
    assert leftovers(before, results) == []


def test_kill9_then_cleanup_then_resume(tmp_path: Path, state_dir: Path) -> None:
    before = set(os.listdir("/tmp"))
    path, results, run, _, _ = _interrupt_mid_trial(tmp_path, 1, signal.SIGKILL)
    assert run.returncode == -signal.SIGKILL
    tag = run_tag(results)  # this run's servers, not those of tests beside it
    orphans = {p: d for p, d in postmasters().items()
               if "cluster-" in d and (str(results) in d or f"-{tag}-" in d)}  # fmt: skip
    assert orphans, "kill -9 should leave the trial's server running"
    res = pgsweep("cleanup")
    assert res.returncode == 0 and "stopped postmaster" in res.stdout
    assert not any(p in postmasters() for p in orphans)
    assert leftovers(before, results) == []
    assert pgsweep("cleanup").stdout.strip() == "nothing left to clean up"
    res = pgsweep("run", str(path), "--results", str(results), "--resume")
    assert res.returncode == 0, res.stderr
    _assert_complete_once(results, 2)


def test_resume_refuses_a_changed_plan(tmp_path: Path, state_dir: Path) -> None:
    path = _experiment(tmp_path, 'server.work_mem = ["4MB", "8MB"]', rounds=1, duration="1s")
    results = tmp_path / "res"
    assert pgsweep("run", str(path), "--results", str(results)).returncode == 0
    path.write_text(path.read_text().replace('"8MB"', '"16MB"'))
    res = pgsweep("run", str(path), "--results", str(results), "--resume")
    assert res.returncode == 2 and "changed since this run started" in res.stderr
    assert "factors" in res.stderr
    # more rounds after the results were seen: refused, and the message says why
    path.write_text(path.read_text().replace('"16MB"', '"8MB"').replace("rounds = 1", "rounds = 2"))
    res = pgsweep("run", str(path), "--results", str(results), "--resume")
    assert res.returncode == 2 and "(rounds differ)" in res.stderr, res.stderr
    assert "one more look" in res.stderr and "--noise-from" in res.stderr
    again = pgsweep("run", str(path), "--results", str(results))
    assert again.returncode == 2 and "already holds results" in again.stderr


def test_custom_script_with_prewarm(open_dir: Path, state_dir: Path) -> None:
    tmp_path = open_dir  # the server user runs pgbench, which reads the script
    (tmp_path / "point.sql").write_text(
        "\\set aid random(1, 100000)\nSELECT abalance FROM pgbench_accounts WHERE aid = :aid;\n"
    )
    path = _experiment(
        tmp_path,
        "workload.clients = [1, 2]",
        script="point.sql",
        rounds=1,
        duration="1s",
        extra="prewarm = true",
    )
    results = tmp_path / "res"
    res = pgsweep("run", str(path), "--results", str(results))
    assert res.returncode == 0, res.stderr
    rows = trials(results)
    assert "prewarm" in json.loads(rows[0]["events_json"])
    assert "prewarm" not in json.loads(rows[1]["events_json"])  # same server: warm already
    argv = json.loads(rows[0]["pgbench_argv"])
    assert argv[argv.index("-f") + 1].endswith("point.sql") and "-n" in argv
    assert "restore" not in json.loads(rows[1]["events_json"])  # a read-only script
    assert (results / "scripts" / "0-point.sql").exists()


def test_sigterm_stops_like_ctrl_c(tmp_path: Path, state_dir: Path) -> None:
    before = set(os.listdir("/tmp"))
    _, results, run, out, err = _interrupt_mid_trial(tmp_path, 1, signal.SIGTERM)
    assert run.returncode == 130, err
    assert "resume with" in out
    assert leftovers(before, results) == []
    assert not list(state_dir.glob("*.json"))  # the run's registry entry is gone too
