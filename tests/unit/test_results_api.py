"""The read API of a results folder (pgsweep.store.Results) returns what the writer stored:
values, not just shapes, in run order, with the ok-only filters the reports rely on; and it
refuses folders it cannot read with the exit codes the CLI has always used."""

from __future__ import annotations

import json
import math
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pgsweep.errors import EXIT_INPUT, EXIT_INTERNAL, PgsweepError
from pgsweep.store import (
    MIGRATIONS,
    SCHEMA_VERSION,
    TPS,
    Configuration,
    Fact,
    LatencyBin,
    ProcessCpu,
    Results,
    Sample,
    Second,
    Store,
    TrialRecord,
    Wait,
)
from synthetic import make_results

FACTORS = {"server.x": [1, 2], "server.y": ["a", "b"]}
TPS_VALUES = {(c, r): 100.0 * (c + 1) + r for c in range(4) for r in (1, 2, 3)}
P99 = {(c, r): 1.0 + c + r / 10 for c in range(4) for r in (1, 2, 3)}


@pytest.fixture
def synthetic(tmp_path: Path) -> Path:
    metrics = {k: {"latency.p99_ms": v, "io.wal_bytes_per_tx": 500.0} for k, v in P99.items()}
    return make_results(tmp_path / "res", FACTORS, TPS_VALUES, 3, metrics=metrics)


def test_experiment_configurations_and_trials_of_a_synthetic_run(synthetic: Path) -> None:
    with Results(synthetic) as r:
        exp = r.experiment()
        assert (exp.name, exp.seed, exp.rounds) == ("synthetic", 1, 3)
        assert exp.factors == ["server.x", "server.y"]
        assert exp.created_at == "2026-11-22T00:00:00+00:00"
        assert (exp.pgsweep_version, exp.postgres_version) == ("test", "15.18")
        assert exp.file_text == '[experiment]\nname = "synthetic"\n'
        configs = r.configurations()
        assert [c.id for c in configs] == ["c01", "c02", "c03", "c04"]
        assert [c.levels for c in configs] == [
            {"server.x": 1, "server.y": "a"}, {"server.x": 1, "server.y": "b"},
            {"server.x": 2, "server.y": "a"}, {"server.x": 2, "server.y": "b"},
        ]  # fmt: skip
        assert all(isinstance(c, Configuration) and c.group == 0 for c in configs)
        index = {c.id: i for i, c in enumerate(configs)}
        trials = r.trials()
        assert [t.ord for t in trials] == sorted(t.ord for t in trials)  # run order
        assert len(trials) == 12 and all(t.ok for t in trials)
        assert [t.round for t in trials] == sorted(t.round for t in trials)
        assert {t.id: t.tps for t in trials} == {
            t.id: TPS_VALUES[(index[t.config_id], t.round)] for t in trials
        }
        assert r.trials(ok_only=True) == trials


def test_metrics_by_trial_and_by_configuration_and_round(synthetic: Path) -> None:
    with Results(synthetic) as r:
        index = {c.id: i for i, c in enumerate(r.configurations())}
        trials = r.trials()
        p99 = r.metric("latency.p99_ms")
        assert list(p99) == [t.id for t in trials]  # run order
        assert p99 == {t.id: P99[(index[t.config_id], t.round)] for t in trials}
        by_round = r.metric_by_round("latency.p99_ms")
        assert by_round == {(c, rd): P99[(index[c], rd)] for c in index for rd in (1, 2, 3)}
        tps = r.metric_by_round(TPS)  # pgbench's summary TPS, from the trial rows
        assert tps == {(c, rd): TPS_VALUES[(index[c], rd)] for c in index for rd in (1, 2, 3)}
        assert r.metric("no.such.metric") == {} and r.metric_by_round("no.such") == {}
        assert r.metrics() == {
            t.id: {"io.wal_bytes_per_tx": 500.0, "latency.p99_ms": p99[t.id]} for t in trials
        }
        assert r.counters() == {} and r.all_seconds() == {} and r.latency_bins() == {}


def _write_experiment(store: Store) -> None:
    plan = {"factors": [{"name": "server.x", "cost": "restart"}], "rounds": 1}
    store.write_experiment(
        {"name": "full", "file_text": "text", "fingerprint": "fp", "seed": 7,
         "plan_json": json.dumps(plan), "created_at": "2026-01-01T00:00:00+00:00",
         "pgsweep_version": "1.2", "postgres_version": "17.2"},
        [("c01", "x=1", json.dumps({"server.x": 1}), 0),
         ("c02", "x=2", json.dumps({"server.x": 2}), 1)],
    )  # fmt: skip


SECONDS = [
    {"second": 0.0, "tps": 10.0, "failed": 0.0, "skipped": 1.0, "latency_mean": 1.5,
     "latency_p50": 1.0, "latency_p90": 2.0, "latency_p99": 3.0, "latency_max": 4.0,
     "lag_mean": 0.25},
    {"second": 1.0, "tps": 12.0, "failed": 2.0, "skipped": 0.0, "latency_mean": 1.25,
     "latency_p50": 1.0, "latency_p90": 2.5, "latency_p99": 3.5, "latency_max": 9.0,
     "lag_mean": None},
]  # fmt: skip


def _full_trial() -> TrialRecord:
    """A trial with something in every table."""
    t = TrialRecord("r1-c02", 2, 1, "c02", "ok", "2026-01-01T00:00:05+00:00",
                    "2026-01-01T00:00:09+00:00", warmup_s=1, duration_s=3, tps=11.0,
                    transactions=33, failed_transactions=2, latency_avg_ms=1.4,
                    latency_stddev_ms=0.3, server_started_at="2026-01-01T00:00:04+00:00",
                    pgbench_argv=json.dumps(["pgbench", "-T", "3"]))  # fmt: skip
    t.events = ["restart", "restore"]
    t.effective = {"shared_buffers": "16384", "fsync": "off"}
    t.samples = [(2.0, 12.5, 1.3, 0.2, 1, 0.1, 0), (1.0, 10.5, 1.5, None, None, None, None)]
    t.counters = {"pg.xact_commit": 33.0, "disk.DEV.sectors_written": 800.0}
    t.metrics = {"latency.p99_ms": 3.5, "stability.checkpoints": 1.0}
    t.seconds = SECONDS
    t.latency_bins = [(2.0, 4.0, 5), (0.5, 1.0, 20), (1.0, 2.0, 8)]
    t.load = {"cluster-1": {"io.bytes_written": 1e6, "io.seconds": 2.5}}
    t.environment = {"cluster-1": {"pgdata.fstype": "ext4"}, "c02": {"fsync": "off"}}
    t.artifacts = {"pgbench.out": b"tps = 11.0\n", "server.log": b"LOG: ready\n"}
    t.waits = [("client backend", "CPU", "CPU", 0.5), ("walwriter", "IO", "WALWrite", 0.1),
               ("client backend", "IO", "WALSync", 1.25)]  # fmt: skip
    t.processes = [("walwriter", 1, 0.5, 0.25, 10.0, 1.0, 3.0, 0.0),
                   ("pgbench client", 1, 1.0, 2.0, math.nan, math.nan, 9.0, 0.0)]  # fmt: skip
    return t


@pytest.fixture
def full(tmp_path: Path) -> Path:
    """Written out of run order (ord 2 before ord 1), with a failed trial that has a
    metric: the reader must sort and filter, not echo insertion order."""
    folder = tmp_path / "full"
    folder.mkdir()
    store = Store(folder / "results.db")
    _write_experiment(store)
    store.save_environment("host", {"kernel": "6.1", "cpu_count": "8"})
    store.save_trial(_full_trial())
    failed = TrialRecord("r1-c01", 1, 1, "c01", "failed", "2026-01-01T00:00:00+00:00",
                         "2026-01-01T00:00:04+00:00", reason="pgbench exited 1\nmore",
                         log_tail="FATAL: no")  # fmt: skip
    failed.metrics = {"latency.p99_ms": 99.0}
    store.save_trial(failed)
    store.close()
    return folder


def test_trials_in_run_order_with_every_column_and_the_ok_filter(full: Path) -> None:
    with Results(full) as r:
        assert r.experiment().plan == {
            "factors": [{"name": "server.x", "cost": "restart"}], "rounds": 1
        }  # fmt: skip
        assert [(c.id, c.label, c.group) for c in r.configurations()] == [
            ("c01", "x=1", 0), ("c02", "x=2", 1),
        ]  # fmt: skip
        failed, ok = r.trials()
        assert (failed.id, failed.ok, failed.status, failed.tps) == (
            "r1-c01",
            False,
            "failed",
            None,
        )
        assert (failed.reason, failed.log_tail) == ("pgbench exited 1\nmore", "FATAL: no")
        assert (failed.events, failed.effective, failed.pgbench_argv) == ((), {}, None)
        assert (ok.id, ok.ord, ok.round, ok.config_id, ok.ok) == ("r1-c02", 2, 1, "c02", True)
        assert (ok.started_at, ok.finished_at) == (
            "2026-01-01T00:00:05+00:00", "2026-01-01T00:00:09+00:00",
        )  # fmt: skip
        assert (ok.warmup_s, ok.duration_s, ok.tps, ok.transactions) == (1, 3, 11.0, 33)
        assert (ok.failed_transactions, ok.latency_avg_ms, ok.latency_stddev_ms) == (2, 1.4, 0.3)
        assert ok.server_started_at == "2026-01-01T00:00:04+00:00"
        assert ok.events == ("restart", "restore")
        assert ok.effective == {"shared_buffers": "16384", "fsync": "off"}
        assert ok.pgbench_argv == ("pgbench", "-T", "3")
        assert r.trials(ok_only=True) == [ok]
        assert r.metric("latency.p99_ms") == {"r1-c01": 99.0, "r1-c02": 3.5}
        assert r.metric("latency.p99_ms", ok_only=True) == {"r1-c02": 3.5}
        assert r.metric_by_round("latency.p99_ms") == {("c02", 1): 3.5}
        assert r.metric(TPS) == {"r1-c02": 11.0}  # the failed trial has no TPS
        assert r.metric_by_round(TPS) == {("c02", 1): 11.0}


def test_per_trial_tables(full: Path) -> None:
    with Results(full) as r:
        assert r.metrics() == {
            "r1-c01": {"latency.p99_ms": 99.0},
            "r1-c02": {"latency.p99_ms": 3.5, "stability.checkpoints": 1.0},
        }
        assert r.counters() == {
            "r1-c02": {"disk.DEV.sectors_written": 800.0, "pg.xact_commit": 33.0}
        }
        assert r.seconds("r1-c02") == [
            Second(0, 10.0, 0, 1, 1.5, 1.0, 2.0, 3.0, 4.0, 0.25),
            Second(1, 12.0, 2, 0, 1.25, 1.0, 2.5, 3.5, 9.0, None),
        ]
        assert r.seconds("r1-c01") == [] and r.all_seconds() == {"r1-c02": r.seconds("r1-c02")}
        assert r.samples("r1-c02") == [  # by time, not as written
            Sample(1.0, 10.5, 1.5, None, None, None, None),
            Sample(2.0, 12.5, 1.3, 0.2, 1, 0.1, 0),
        ]
        assert r.all_samples() == {"r1-c02": r.samples("r1-c02")}
        assert r.latency_bins() == {
            "r1-c02": [LatencyBin(0.5, 1.0, 20), LatencyBin(1.0, 2.0, 8), LatencyBin(2.0, 4.0, 5)]
        }
        assert r.load_counters() == {"cluster-1": {"io.bytes_written": 1e6, "io.seconds": 2.5}}
        assert r.artifact_names("r1-c02") == ["pgbench.out", "server.log"]
        assert r.artifact("r1-c02", "server.log") == b"LOG: ready\n"
        assert r.artifact("r1-c02", "nothing") is None and r.artifact_names("r1-c01") == []
        assert r.waits() == {"r1-c02": [  # by process type, then most sessions first
            Wait("client backend", "IO", "WALSync", 1.25),
            Wait("client backend", "CPU", "CPU", 0.5),
            Wait("walwriter", "IO", "WALWrite", 0.1)]}  # fmt: skip
        assert r.process_cpu() == {"r1-c02": [  # NaN (not kept by /proc) reads as None
            ProcessCpu("pgbench client", 1, 1.0, 2.0, None, None, 9.0, 0.0),
            ProcessCpu("walwriter", 1, 0.5, 0.25, 10.0, 1.0, 3.0, 0.0)]}  # fmt: skip


def test_environment_host_then_clusters_then_configurations(full: Path) -> None:
    with Results(full) as r:
        assert r.environment() == [
            Fact("host", "cpu_count", "8"), Fact("host", "kernel", "6.1"),
            Fact("cluster-1", "pgdata.fstype", "ext4"), Fact("c02", "fsync", "off"),
        ]  # fmt: skip


def test_reading_leaves_the_file_as_it_was(full: Path) -> None:
    before = (full / "results.db").read_bytes()
    with Results(full) as r:
        r.trials()
        r.environment()
    assert (full / "results.db").read_bytes() == before


def test_a_folder_with_special_characters_in_its_name(tmp_path: Path) -> None:
    folder = make_results(tmp_path / "a?b#c %41", {"server.x": [1]}, {(0, 1): 5.0}, 1)
    with Results(folder) as r:
        assert [t.tps for t in r.trials()] == [5.0]


def test_a_folder_without_results_db(tmp_path: Path) -> None:
    with pytest.raises(PgsweepError) as err:
        Results(tmp_path)
    assert err.value.exit_code == EXIT_INPUT and "holds no results.db" in err.value.what
    with pytest.raises(PgsweepError) as err:
        Results(tmp_path / "missing")
    assert err.value.exit_code == EXIT_INPUT


def test_a_newer_schema_is_refused(synthetic: Path) -> None:
    db = sqlite3.connect(synthetic / "results.db")
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    db.close()
    with pytest.raises(PgsweepError) as err:
        Results(synthetic)
    assert err.value.exit_code == EXIT_INPUT and "newer pgsweep" in err.value.what
    assert err.value.fix == "upgrade pgsweep to read these results"


def test_a_file_that_is_not_a_database(tmp_path: Path) -> None:
    (tmp_path / "results.db").write_bytes(b"not sqlite at all, " * 100)
    with pytest.raises(PgsweepError) as err:
        Results(tmp_path)
    assert err.value.exit_code == EXIT_INTERNAL and "could not be read" in err.value.what


def test_a_folder_without_an_experiment(tmp_path: Path) -> None:
    Store(tmp_path / "results.db").close()  # a run that died before writing its plan
    with Results(tmp_path) as r, pytest.raises(PgsweepError) as err:
        r.experiment()
    assert "holds no experiment" in err.value.what


def test_an_older_schema_is_migrated_on_open(tmp_path: Path) -> None:
    """A folder written before the metric tables existed (schema 3) still reads."""
    db = sqlite3.connect(tmp_path / "results.db")
    for migration in MIGRATIONS[:3]:
        db.executescript(migration)
    db.execute("PRAGMA user_version = 3")
    plan = json.dumps({"factors": [], "rounds": 1})
    with db:
        db.execute("INSERT INTO experiment VALUES (1, 'old', '', '', 1, ?, 'then', 'v', '14')",
                   (plan,))  # fmt: skip
        db.execute("INSERT INTO configuration VALUES ('c01', '', '{}', 0)")
        db.execute(
            "INSERT INTO trial (id, ord, round, config_id, status, started_at, finished_at, "
            "tps) VALUES ('r1-c01', 1, 1, 'c01', 'ok', 'a', 'b', 42.0)"
        )
        db.execute("INSERT INTO counter VALUES ('r1-c01', 'pg.xact_commit', 5)")
    db.close()
    with Results(tmp_path) as r:
        assert r.experiment().name == "old" and r.metric_by_round(TPS) == {("c01", 1): 42.0}
        assert r.counters() == {"r1-c01": {"pg.xact_commit": 5.0}} and r.metrics() == {}
        assert r.all_seconds() == {} and r.latency_bins() == {} and r.load_counters() == {}
        assert r.waits() == {} and r.process_cpu() == {}  # from before explain collection
    check = sqlite3.connect(tmp_path / "results.db")
    assert check.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    check.close()


def test_a_run_killed_mid_trial_leaves_results_that_read(synthetic: Path) -> None:
    """kill -9 inside the writer's transaction leaves a hot journal, which a read-only
    connection cannot roll back: the reader lets the writer do it, and sees the trials
    that were committed, none of the one in progress."""
    code = textwrap.dedent(f"""
        import os
        from pgsweep.store import Store, TrialRecord
        store = Store({str(synthetic / "results.db")!r})
        store.db.execute("PRAGMA cache_size = 2")  # spill to the file: a hot journal
        t = TrialRecord("r9-c01", 99, 9, "c01", "ok", "a", "b", tps=1.0)
        t.artifacts = {{f"big{{i}}": os.urandom(20000) for i in range(40)}}
        store.db.execute("BEGIN IMMEDIATE")
        store.db.execute("UPDATE trial SET tps = -1")
        store.db.executemany("INSERT INTO artifact VALUES (?, ?, ?)",
                             [(t.id, n, b) for n, b in t.artifacts.items()])
        os._exit(9)
    """)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 9, res.stderr
    assert (synthetic / "results.db-journal").exists()
    with Results(synthetic) as r:
        assert sorted(t.tps for t in r.trials()) == sorted(TPS_VALUES.values())
        assert r.artifact_names("r9-c01") == []
