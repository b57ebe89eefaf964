"""What a trial keeps from pgbench's per-transaction log, on real runs: figures that agree
with pgbench's own summary, lag and skips under -R/-L, the sampling rate used, and no log
at all when it is turned off."""

from __future__ import annotations

import gzip
import json
import sqlite3
from pathlib import Path

import pytest

from conftest import pgsweep, requires_pg, trials, write_experiment
from pgsweep.postgres import pgbench

EXPERIMENT = """
[experiment]
name = "latency"
seed = 3
[cluster]
scale = 1
[workload]
script = "select-only"
clients = 2
jobs = 1
duration = "3s"
warmup = "0s"
rate = 1500
latency_limit = "2ms"
[repeat]
rounds = 1
[factors]
workload.latency_log = ["auto", 0.5, "off"]
"""


@requires_pg
def test_log_figures_agree_with_pgbench(tmp_path: Path, state_dir: Path) -> None:
    results = tmp_path / "res"
    res = pgsweep("run", str(write_experiment(tmp_path, EXPERIMENT)), "--results", str(results))
    assert res.returncode == 0, res.stderr + res.stdout
    db = sqlite3.connect(results / "results.db")
    levels = {c: json.loads(lv)["workload.latency_log"] for c, lv in db.execute(
        "SELECT id, levels_json FROM configuration")}  # fmt: skip
    by_level = {}
    for t in trials(results):
        metric = dict(db.execute("SELECT name, value FROM metric WHERE trial_id = ?", (t["id"],)))
        seconds = db.execute(
            "SELECT tps, skipped, lag_mean_ms FROM second WHERE trial_id = ? ORDER BY second",
            (t["id"],),
        ).fetchall()
        out = db.execute(
            "SELECT gz FROM artifact WHERE trial_id = ? AND name = 'pgbench.out'", (t["id"],)
        ).fetchone()
        summary = pgbench.parse_summary(gzip.decompress(out[0]).decode())
        by_level[str(levels[t["config_id"]])] = (t, metric, seconds, summary)
    db.close()

    t, m, seconds, s = by_level["auto"]
    argv = json.loads(t["pgbench_argv"])
    assert "-l" in argv and not any(a.startswith("--sampling-rate") for a in argv)
    assert m["log.sampling_rate"] == 1.0
    # every transaction logged: the log's counts are pgbench's
    assert (m["tx.ok"], m["tx.skipped"]) == (s.transactions, s.skipped)
    assert round(m["latency.mean_ms"], 3) == s.latency_avg_ms
    assert round(m["lag.mean_ms"], 3) == s.lag_avg_ms
    assert m["latency.p50_ms"] <= m["latency.p99_ms"] <= m["latency.max_ms"]
    assert len(seconds) == 3 and all(lag is not None for _, _, lag in seconds)
    assert sum(tps for tps, _, _ in seconds) + m["log.outside_window"] == m["tx.ok"]
    assert sum(sk for _, sk, _ in seconds) <= m["tx.skipped"]
    assert m["window.tps"] == pytest.approx(s.tps, rel=0.02)
    assert "stability.tps_cv" in m and m["stability.stall_seconds"] >= 0

    t, m, seconds, s = by_level["0.5"]
    assert "--sampling-rate=0.5" in json.loads(t["pgbench_argv"])
    assert m["log.sampling_rate"] == 0.5
    n, sd = s.transactions + s.skipped, ((s.transactions + s.skipped) * 0.25) ** 0.5
    assert abs(m["log.lines"] - n * 0.5) < 5 * sd
    assert m["tx.ok"] == s.transactions  # counts come from the summary when sampled

    t, m, seconds, s = by_level["off"]
    assert "-l" not in json.loads(t["pgbench_argv"])
    assert seconds == [] and not any(k.startswith("latency.") for k in m)
    assert m["tx.ok"] == s.transactions and m["lag.mean_ms"] == s.lag_avg_ms
