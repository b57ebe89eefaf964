"""sysbench's output, parsed from runs captured here (sysbench 1.0.20, its PostgreSQL
driver, against PostgreSQL 15 over a private socket; tests/data/sysbench/README)."""

from __future__ import annotations

import pytest

from conftest import DATA
from pgsweep.postgres import sysbench
from pgsweep.postgres.sysbench import SysbenchParseError, parse, percentiles

SB = DATA / "sysbench"


def test_read_write_run_with_histogram() -> None:
    run = parse((SB / "oltp_read_write-histogram.out").read_text())
    assert run.version == "1.0.20"
    # oltp_read_write: 14 reads, 4 writes, BEGIN and COMMIT per transaction; two threads
    # on two 2,000-row tables deadlock now and then (20 here), and sysbench retries those
    assert run.queries == 87880 and run.transactions == 4376 and run.errors == 20
    assert run.queries == pytest.approx(20 * run.transactions, rel=0.01)
    assert run.tps == pytest.approx(run.transactions / run.seconds, rel=0.01)
    assert run.qps == pytest.approx(20 * run.tps, rel=0.01)
    assert [s.t for s in run.per_second] == [1, 2, 3]
    assert [s.threads for s in run.per_second] == [2, 2, 1]  # one thread done in the last
    assert all(s.qps == pytest.approx(20 * s.tps, rel=0.02) for s in run.per_second)
    assert [s.errors for s in run.per_second] == [5, 6, 9]
    assert sum(s.tps for s in run.per_second) == pytest.approx(run.transactions, rel=0.05)
    # every event is in the histogram, and its p99 is sysbench's own 99th percentile
    assert sum(c for _, c in run.histogram) == run.transactions
    lat = run.latency
    assert lat["min"] <= lat["p50"] <= lat["p90"] <= lat["p95"] <= lat["p99"] <= lat["max"]
    assert lat["min"] <= lat["avg"] <= lat["max"]
    printed = float(next(line.split()[-1] for line in
                         (SB / "oltp_read_write-histogram.out").read_text().splitlines()
                         if "99th percentile" in line))  # fmt: skip
    assert lat["p99"] == pytest.approx(printed, abs=0.005)  # printed to 2 decimals
    m = run.metrics()
    assert run.tps == 1456.38 and m["sysbench.qps"] == run.qps == 29247.37
    # a deadlock sysbench ignores is a transaction begun again: pgbench's retries
    assert m["tx.retries"] == m["sysbench.errors"] == 20 and m["tx.failed"] == 0
    assert m["tx.ok"] == 4376 and m["latency.p99_ms"] == lat["p99"]
    assert m["latency.mean_ms"] == lat["avg"] and "latency.avg_ms" not in m


def test_point_select_run_one_query_a_transaction() -> None:
    run = parse((SB / "oltp_point_select.out").read_text())
    assert run.queries == run.transactions and len(run.per_second) == 1  # 2 s: one report
    assert not run.histogram and "p50" not in run.latency and "p95" in run.latency


def test_rated_run_skips_queue_lines() -> None:
    text = (SB / "oltp_read_write-rate.out").read_text()
    run = parse(text)
    assert len(run.per_second) == 2
    assert run.tps == pytest.approx(200, rel=0.25)  # --rate=200


def test_output_without_summary_is_refused() -> None:
    text = (SB / "oltp_read_write-histogram.out").read_text()
    with pytest.raises(SysbenchParseError):
        parse(text.split("SQL statistics")[0])


def test_percentiles_from_bins() -> None:
    bins = [(1.0, 50), (2.0, 40), (3.0, 9), (10.0, 1)]
    assert percentiles(bins) == {"p50": 1.0, "p90": 2.0, "p95": 3.0, "p99": 3.0, "p99.9": 10.0}
    assert percentiles([]) == {}


def test_no_percentile_above_the_slowest_transaction() -> None:
    """sysbench's top bin (204.114 ms) and its own 99th percentile lie above its max
    (202.40): a percentile is never above the slowest event, so both are cut to it."""
    run = parse((SB / "pgsweep-oltp_read_write-delayed.out").read_text())
    assert run.latency["max"] == 202.40 and max(b for b, _ in run.histogram) == 204.114
    assert run.latency["p99"] == run.latency["p99.9"] == 202.40
    assert run.latency["p50"] <= run.latency["p95"] <= run.latency["p99"]


def test_pgsweeps_own_window_into_its_names() -> None:
    """The window as pgsweep runs it (its command line, tests/data/sysbench/README)."""
    run = parse((SB / "pgsweep-oltp_read_write.out").read_text())
    assert (run.transactions, run.tps, run.errors) == (2288, 761.16, 11)
    assert [s.t for s in run.per_second] == [1, 2, 3]
    assert [s.latency_pct_ms for s in run.per_second] == [4.65, 4.33, 5.00]  # --percentile=99
    assert sum(c for _, c in run.histogram) == run.transactions
    m = run.metrics()
    assert m["tx.retries"] == m["sysbench.errors"] == 11 and m["tx.ok"] == 2288
    assert m["latency.p99_ms"] == pytest.approx(4.65, abs=0.005)
    assert m["sysbench.queries"] / m["tx.ok"] == pytest.approx(20, rel=0.01)


def test_command_lines() -> None:
    w = sysbench.Workload("oltp_read_only", tables=3, table_size=500, clients=4, seconds=7,
                          rate=99.6)  # fmt: skip
    conn = sysbench.conn_args(["-h", "/tmp/s/c1", "-p", "5432", "-U", "pgsweep"])
    assert conn == ["--pgsql-host=/tmp/s/c1", "--pgsql-port=5432", "--pgsql-user=pgsweep"]
    common = ["/usr/bin/sysbench", "oltp_read_only", "--db-driver=pgsql", *conn,
              "--pgsql-db=postgres", "--tables=3", "--table-size=500"]  # fmt: skip
    assert w.prepare_argv("/usr/bin/sysbench", conn) == [*common, "prepare"]
    run = w.argv("/usr/bin/sysbench", conn, seconds=2)
    assert run[: len(common)] == common and run[-1] == "run"
    assert {"--threads=4", "--time=2", "--report-interval=1", "--histogram=on",
            "--percentile=99", "--rate=100"} == set(run[len(common):-1])  # fmt: skip
    unlimited = sysbench.Workload("oltp_read_only", 1, 1, 1, 1)
    assert not any(a.startswith("--rate") for a in unlimited.argv("sb", conn, seconds=1))


def test_tests_that_write_are_known() -> None:
    assert not sysbench.TESTS["oltp_read_only"] and not sysbench.TESTS["oltp_point_select"]
    assert all(sysbench.TESTS[t] for t in ("oltp_read_write", "oltp_update_index",
                                            "oltp_write_only", "oltp_insert", "oltp_delete"))
    # every name is a bare name: nothing sysbench could take for a script's path
    assert all(t.isidentifier() and "." not in t for t in sysbench.TESTS)


def test_a_report_past_the_window_is_not_a_second_of_it() -> None:
    """sysbench on a loaded machine prints `[ 3s ]` for a 2 s run (its threads ending late):
    the window's seconds are the first two."""
    from pgsweep.engine.measure_sysbench import within_window

    run = parse((SB / "oltp_read_write-histogram.out").read_text())
    assert [r.t for r in run.per_second] == [1, 2, 3]
    assert [r.t for r in within_window(run.per_second, 2)] == [1, 2]
    assert [r.t for r in within_window(run.per_second, 3)] == [1, 2, 3]
    assert [r.t for r in within_window(run.per_second, None)] == [1, 2, 3]
