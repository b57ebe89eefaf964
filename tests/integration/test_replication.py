"""The replication layer with real servers: a primary and a streaming standby made by
pg_basebackup, async and sync, behind a private network link with and without a bandwidth
limit (tc tbf); lags sampled once a second; a stall provoked with remote_apply behind a
standby whose reads conflict with replay, and prevented by hot_standby_feedback (seed 4's
lesson); and kill -9 followed by `pgsweep restore` leaving no
server, namespace or link."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import sys
import time
from pathlib import Path

import pytest

from conftest import (
    leftovers,
    pgsweep,
    pgsweep_start,
    postmasters,
    requires_pg,
    run_shared,
    stop_and_restore,
    trials,
    write_experiment,
)
from pgsweep.host.workarea import run_tag

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from sshhosts import harness_link

HOST_LINKS = {p.name for p in Path("/sys/class/net").iterdir()}  # before any test here
root_only = pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")

NETWORK = """
[experiment]
name = "replication"
seed = 7
[repeat]
rounds = 1
[workload]
clients = 4
duration = "2s"
warmup = "0s"
[cluster]
scale = 2
[replication]
standbys = 1
network = true
[factors]
replication.mode = ["async", "sync"]
replication.bandwidth = ["1mbit", "10gbit"]
"""



def _ours() -> list[str]:
    """pgsweep's namespaces still on the machine (the veth pair and its qdisc live inside
    them), and any interface a run added to the host's own network (it must add none)."""
    return [p.name for p in Path("/run/netns").glob("pgsweep-*")] + sorted(
        {p.name for p in Path("/sys/class/net").iterdir()} - HOST_LINKS
        - {p.name for p in Path("/sys/class/net").iterdir() if harness_link(p.name)}
    )


def _rows(results: Path, sql: str) -> list[tuple]:  # type: ignore[type-arg]
    db = sqlite3.connect(results / "results.db")
    rows = db.execute(sql).fetchall()
    db.close()
    return rows


@pytest.fixture(scope="module")
def network_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")
    before = set(_ours())
    results = run_shared(tmp_path_factory, "replication", NETWORK)
    assert set(_ours()) == before, "the run left a namespace or link"
    assert not leftovers(set(os.listdir("/tmp")), results)
    return results


def _levels(results: Path) -> dict[str, dict[str, object]]:
    rows = _rows(results, "SELECT id, levels_json FROM configuration")
    return {c: json.loads(lv) for c, lv in rows}


@requires_pg
@root_only
def test_standbys_stream_in_the_asked_sync_state_with_lags_each_second(network_run: Path) -> None:
    levels = _levels(network_run)
    rows = trials(network_run)
    assert [t["status"] for t in rows] == ["ok"] * 4, [t["reason"] for t in rows]
    for t in rows:
        mode = levels[t["config_id"]]["replication.mode"]
        seconds = _rows(network_run, "SELECT state, sync_state, write_lag_ms, replay_lag_ms, "
                        f"standby FROM standby_second WHERE trial_id = '{t['id']}'")  # fmt: skip
        assert len(seconds) >= 1, t["id"]  # a 2 s window, sampled once a second
        assert {s[0] for s in seconds} == {"streaming"}
        assert {s[1] for s in seconds} == {"sync" if mode == "sync" else "async"}, t["id"]
        assert {s[4] for s in seconds} == {"s1"}
        # behind 1 mbit the standby always lags; behind 10 gbit it may be caught up at two
        # replies in a row, and PostgreSQL then shows no lag (NULL) until more WAL comes
        if levels[t["config_id"]]["replication.bandwidth"] == "1mbit":
            assert any(s[3] is not None and s[3] > 0 for s in seconds), t["id"]
        assert all(s[3] is None or s[3] >= 0 for s in seconds), t["id"]
        effective = json.loads(t["effective_json"])
        assert effective["replication.state"] == f"s1: streaming {mode}"
        assert effective["synchronous_standby_names"] == ("FIRST 1 (s1)" if mode == "sync" else "")
        assert float(effective["replication.rtt_ms"]) > 0  # measured over the veth link
        assert "new-standbys" in json.loads(t["events_json"])
    # every node's environment: each standby's own settings, as it reports them
    names = _rows(network_run, "SELECT scope, value FROM environment WHERE name = 'cluster_name'")
    assert {(s.split(".")[1], v) for s, v in names} == {("s1", "s1 (command line)")}
    assert {s.split(".")[0] for s, _ in names} == set(levels)


@requires_pg
@root_only
def test_a_bandwidth_limit_slows_sync_replication_in_the_same_run(network_run: Path) -> None:
    levels = _levels(network_run)
    tps = {}
    for t in trials(network_run):
        lv = levels[t["config_id"]]
        tps[(lv["replication.mode"], lv["replication.bandwidth"])] = t["tps"]
    # a direction, not a speed: tpcb's WAL at 1 mbit holds every synchronous commit back
    assert tps[("sync", "1mbit")] < tps[("sync", "10gbit")] / 2, tps
    res = pgsweep("report", str(network_run), "--format", "markdown")
    assert res.returncode == 0, res.stderr
    assert "## Replication" in res.stdout and "max replay lag ms" in res.stdout
    out = network_run / "standbys.json"
    res = pgsweep("export", str(network_run), "--what", "standbys", "--format", "json", "-o",
                  str(out))  # fmt: skip
    assert res.returncode == 0, res.stderr
    rows = json.loads(out.read_text())
    assert len(rows) == len(_rows(network_run, "SELECT 1 FROM standby_second"))
    assert {r["replication.mode"] for r in rows} == {"async", "sync"}


CONFLICT = """
[experiment]
name = "conflict"
seed = 4
[repeat]
rounds = 1
[workload]
clients = 4
duration = "6s"
warmup = "1s"
standby_script = "hold.sql"
standby_clients = 2
[cluster]
scale = 1
[server]
synchronous_commit = "remote_apply"
[replication]
standbys = 1
mode = "sync"
[replication.standby]
max_standby_streaming_delay = "3s"
[factors]
replication.standby.hot_standby_feedback = [false, true]
"""
# a standby read that holds its snapshot for 5 s: the primary's pruning of
# pgbench_branches (updated by every tpcb transaction) conflicts with it. One statement:
# a conflict that finds the session between two statements of an open transaction ends
# its connection (FATAL), and pgbench aborts that client and the trial's standby load
# (ci94); inside the statement it is an ERROR pgbench counts as a failed transaction.
HOLD = "SELECT s, pg_sleep(5) FROM (SELECT sum(bbalance) AS s FROM pgbench_branches) b;\n"


@requires_pg
def test_remote_apply_behind_a_conflicting_standby_read_stalls_and_feedback_prevents_it(
    open_dir: Path, state_dir: Path
) -> None:
    """Seed 4's lesson: without hot_standby_feedback the standby's reads conflict with
    replay; replay waits max_standby_streaming_delay, and under remote_apply every commit
    on the primary waits with it: whole seconds without a transaction, which the report
    names. With feedback on, no conflict and no stall, in the same run."""
    (open_dir / "hold.sql").write_text(HOLD)
    results = open_dir / "res"
    res = pgsweep("run", str(write_experiment(open_dir, CONFLICT)), "--results", str(results))
    assert res.returncode == 0, res.stderr + res.stdout
    levels = _levels(results)
    metrics: dict[object, dict[str, float]] = {}
    for config, name, value in _rows(
        results, "SELECT t.config_id, m.name, m.value FROM trial t "
        "JOIN metric m ON m.trial_id = t.id"
    ):  # fmt: skip
        feedback = levels[config]["replication.standby.hot_standby_feedback"]
        metrics.setdefault(feedback, {})[name] = value
    off, on = metrics[False], metrics[True]
    assert off["replication.conflicts"] >= 1 and on["replication.conflicts"] == 0
    assert off["stability.zero_tps_seconds"] >= 1 and on["stability.zero_tps_seconds"] == 0
    assert on["standby.tps"] > 0  # the standby's reads ran, and are reported on their own
    report = pgsweep("report", str(results), "--format", "markdown").stdout
    assert "no transaction completed (stalls" in report, report
    assert "## Replication" in report
    html = open_dir / "report.html"
    assert pgsweep("report", str(results), "--format", "html", "-o", str(html)).returncode == 0
    text = html.read_text()
    assert 'data-table="replication"' in text and 'data-plot="replay-lag-over-time"' in text


@requires_pg
@root_only
def test_kill_9_then_restore_leaves_no_standby_namespace_or_link(
    tmp_path: Path, state_dir: Path
) -> None:
    body = NETWORK.replace('duration = "2s"', 'duration = "60s"')
    path = write_experiment(tmp_path, body)
    results = tmp_path / "r"
    run = pgsweep_start("run", str(path), "--results", str(results))
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not (_ours() and _standby_running(results)):
            time.sleep(0.3)
        assert _ours() and _standby_running(results), "no standby behind a link within 2 min"
        run.send_signal(signal.SIGKILL)
        run.wait(timeout=30)
        assert _ours(), "kill -9 leaves them for restore"
        res = pgsweep("restore")
        assert res.returncode == 0, res.stderr
        assert "namespace pgsweep-" in res.stdout, res.stdout
        assert not _ours(), res.stdout
        assert not _standby_running(results) and not list(state_dir.glob("*.undo"))
        assert not [d for d in postmasters().values() if f"-{run_tag(results)}-" in d]
    finally:
        stop_and_restore(run)


def _standby_running(results: Path) -> bool:
    """A standby of this test's run: its work area is named after the results folder."""
    work = f"pgsweep-work-{results.name}-{run_tag(results)}-"
    return any(work in d and d.endswith("-s1/conf") for d in postmasters().values())
