"""What a trial keeps from pgbench's per-transaction log, on real runs: figures that agree
with pgbench's own summary, lag and skips under -R/-L, the sampling rate used, and no log
at all when it is turned off."""

from __future__ import annotations

import gzip
import json
import sqlite3
from datetime import datetime
from pathlib import Path

import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from conftest import pgsweep, requires_pg, run_shared, trials
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



@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One real run shared by the tests of this module."""
    return run_shared(tmp_path_factory, "measure", EXPERIMENT)


@requires_pg
def test_log_figures_agree_with_pgbench(results: Path) -> None:
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
    # pgbench divides by its own clock (from its start to the last thread's end), the window
    # is 3 s from the first transaction's start: in a 3-second trial on a loaded machine
    # (CI's other lanes) the edges moved them 2.9% apart once; a window counted wrongly
    # (the sampling rate, the seconds) is off by a third or more
    assert m["window.tps"] == pytest.approx(s.tps, rel=0.05)
    assert sum(tps for tps, _, _ in seconds) / 3 == pytest.approx(m["window.tps"], rel=0.02)
    assert m["window.tps_vs_summary"] == pytest.approx(m["window.tps"] / s.tps)
    assert "stability.tps_cv" in m and m["stability.stall_seconds"] >= 0

    t, m, seconds, s = by_level["0.5"]
    assert "--sampling-rate=0.5" in json.loads(t["pgbench_argv"])
    assert m["log.sampling_rate"] == 0.5
    n, sd = s.transactions + s.skipped, ((s.transactions + s.skipped) * 0.25) ** 0.5
    assert abs(m["log.lines"] - n * 0.5) < 5 * sd
    assert m["tx.ok"] == s.transactions  # counts come from the summary when sampled
    # per-second counts are scaled back up by the sampling rate, not the sample's own count
    assert sum(tps for tps, _, _ in seconds) / len(seconds) == pytest.approx(
        m["window.tps"], rel=0.02)  # fmt: skip

    t, m, seconds, s = by_level["off"]
    assert "-l" not in json.loads(t["pgbench_argv"])
    assert seconds == [] and not any(k.startswith("latency.") for k in m)
    assert m["tx.ok"] == s.transactions and m["lag.mean_ms"] == s.lag_avg_ms


@requires_pg
@pytest.mark.parametrize("what", ["trials", "samples", "latency"])
def test_export_csv_and_parquet_hold_the_same_rows(results: Path, what: str) -> None:
    outs = {}
    for fmt in ("csv", "parquet", "json"):
        out = results.parent / f"{what}.{fmt}"
        res = pgsweep("export", str(results), "--format", fmt, "--what", what, "-o", str(out))
        assert res.returncode == 0, res.stderr
        outs[fmt] = out
    from_csv = pacsv.read_csv(outs["csv"]).to_pylist()
    from_parquet = pq.read_table(outs["parquet"]).to_pylist()
    from_json = json.loads(outs["json"].read_text())
    assert len(from_csv) == len(from_parquet) == len(from_json) > 0
    assert list(from_csv[0]) == list(from_parquet[0]) == list(from_json[0])
    for a, b, c in zip(from_csv, from_parquet, from_json, strict=True):
        for k in a:
            # the factor column mixes "auto", 0.5 and "off": text in every format
            if isinstance(b[k], datetime):  # timestamps; ISO 8601 text in JSON
                assert a[k] == b[k] == datetime.fromisoformat(c[k]), k
            elif isinstance(b[k], float):
                assert a[k] == pytest.approx(b[k], rel=1e-12) and c[k] == pytest.approx(b[k])
            else:
                assert str(a[k]) == str(b[k]) == str(c[k]) or a[k] is b[k] is c[k] is None, k
    # tidy: each row names its experiment, configuration, factor level, round and trial
    first = from_parquet[0]
    assert {"experiment", "config_id", "workload.latency_log", "round", "trial_id"} <= set(first)
    trial_ids = {t["id"] for t in trials(results)}
    if what == "trials":
        assert {r["trial_id"] for r in from_parquet} == trial_ids
        assert all(r["tps"] > 0 for r in from_parquet)
        assert {r["workload.latency_log"] for r in from_parquet} == {"auto", "0.5", "off"}
    if what == "samples":  # three seconds per trial, from the log or from progress lines
        for tid in trial_ids:
            rows = [r for r in from_parquet if r["trial_id"] == tid]
            assert len(rows) >= 2 and len({r["source"] for r in rows}) == 1
        # sampled or not, the exported per-second TPS averages to the trial's window TPS
        db = sqlite3.connect(results / "results.db")
        window = dict(db.execute("SELECT trial_id, value FROM metric WHERE name = 'window.tps'"))
        db.close()
        for tid, tps in window.items():
            rows = [r["tps"] for r in from_parquet if r["trial_id"] == tid and r["source"] == "log"]
            assert sum(rows) / len(rows) == pytest.approx(tps, rel=0.02)
    if what == "latency":
        db = sqlite3.connect(results / "results.db")
        ok = dict(db.execute("SELECT trial_id, value FROM metric WHERE name = 'tx.ok'"))
        rate = dict(db.execute(
            "SELECT trial_id, value FROM metric WHERE name = 'log.sampling_rate'"))  # fmt: skip
        db.close()
        for tid, r in rate.items():
            n = sum(row["n"] for row in from_parquet if row["trial_id"] == tid)
            assert n == ok[tid] if r == 1 else n > 0


@requires_pg
def test_a_read_only_workload_is_not_compared_on_bytes_per_transaction(results: Path) -> None:
    """select-only writes no WAL: ratios of zeros and stray bytes are noise, not findings."""
    res = pgsweep("report", str(results), "--format", "json")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    for c in data["configurations"]:
        assert "io.wal_bytes_per_tx" in c["negligible"]
        assert "io.wal_bytes_per_tx" not in c["values"]
    assert not [x for x in data["comparisons"] + data["effects"]
                if x["metric"] == "io.wal_bytes_per_tx"]  # fmt: skip
    assert any(
        w.startswith("WAL bytes / tx: c01, c02, c03 wrote under 64 B") for w in data["warnings"]
    )
    html = results.parent / "measure.html"
    res = pgsweep("report", str(results), "--format", "html", "-o", str(html))
    assert res.returncode == 0, res.stderr
    text = html.read_text()
    # no plot of stray bytes; one line in its place saying why
    assert 'data-plot="bytes"' not in text and 'data-plot-left-out="bytes"' in text
    assert "read-only workload" in text and 'data-plot="tps"' in text
