"""pgbench's output parsed from files captured from real PostgreSQL 15 runs on this kind
of machine (tests/data/pgbench/pg15-*), and the PG 13, 14, 16 and 17 forms written from
their documentation and pgbench's printf formats (tests/data/pgbench/pg1?-docs-*)."""

from __future__ import annotations

import re

import pytest

from conftest import DATA
from pgsweep.postgres import pgbench

PG = DATA / "pgbench"


def test_pg15_summary() -> None:
    s = pgbench.parse_summary((PG / "pg15-tpcb-summary.out").read_text())
    assert s.tps == pytest.approx(1462.293016)
    assert s.transactions == 4385
    assert s.failed == 0
    assert s.latency_avg_ms == pytest.approx(1.366)
    assert s.latency_stddev_ms == pytest.approx(0.528)
    assert s.initial_connection_ms == pytest.approx(7.044)
    assert s.version == "15.18"
    # pgbench's tps is transactions over the run's duration: 4385 in ~3 s
    assert 4385 / 3.2 < s.tps < 4385 / 2.8


def test_pg15_progress_lines() -> None:
    p = pgbench.parse_progress((PG / "pg15-tpcb-progress.err").read_text())
    assert [x.at for x in p] == [1.0, 2.0, 3.0]
    assert [x.tps for x in p] == [1471.7, 1449.9, 1462.2]
    assert p[0].latency_ms == 1.351 and p[0].stddev_ms == 0.585 and p[0].failed == 0
    assert p[0].lag_ms is None and p[0].skipped is None


def test_pg15_rate_limited_run() -> None:
    s = pgbench.parse_summary((PG / "pg15-select-rate-limit-summary.out").read_text())
    assert s.tps == pytest.approx(495.306879) and s.transactions == 987
    (p,) = pgbench.parse_progress((PG / "pg15-select-rate-limit-progress.err").read_text())
    assert p.lag_ms == 0.134 and p.skipped == 0 and p.tps == 516.9


def test_pg13_two_tps_lines_take_excluding_connections() -> None:
    out = (
        "number of transactions actually processed: 10000\n"
        "latency average = 15.844 ms\n"
        "tps = 618.764555 (including connections establishing)\n"
        "tps = 622.977698 (excluding connections establishing)\n"
    )
    assert pgbench.parse_summary(out).tps == pytest.approx(622.977698)


@pytest.mark.parametrize(
    ("version", "tps", "transactions", "failed", "stddev"),
    [
        ("13", 852.130218, 51115, 0, 7.402),
        ("14", 896.967014, 10000, 0, 7.351),
        ("16", 896.967014, 9676, 324, 7.351),
        ("17", 1994.071112, 59821, 0, 0.861),
    ],
)
def test_summary_forms_by_version(
    version: str, tps: float, transactions: int, failed: int, stddev: float
) -> None:
    s = pgbench.parse_summary((PG / f"pg{version}-docs-summary.out").read_text())
    assert (s.tps, s.transactions, s.failed, s.latency_stddev_ms) == (
        pytest.approx(tps),
        transactions,
        failed,
        stddev,
    )
    assert s.version == (None if version in ("13", "14") else f"{version}.0")


def test_pg16_retries_and_pg17_skips_and_lag() -> None:
    s16 = pgbench.parse_summary((PG / "pg16-docs-summary.out").read_text())
    assert (s16.retried, s16.retries) == (5629, 103299)
    s17 = pgbench.parse_summary((PG / "pg17-docs-summary.out").read_text())
    assert (s17.skipped, s17.late, s17.lag_avg_ms, s17.lag_max_ms) == (179, 31, 0.088, 4.96)
    real = pgbench.parse_summary((PG / "pg15-select-R3000-L1.out").read_text())
    assert (real.skipped, real.late, real.lag_avg_ms, real.lag_max_ms) == (2187, 2481, 0.39, 17.249)


@pytest.mark.parametrize("version", ["13", "14", "16", "17"])
def test_progress_forms_by_version(version: str) -> None:
    p = pgbench.parse_progress((PG / f"pg{version}-docs-progress.err").read_text())
    assert len(p) >= 2 and all(x.tps > 800 for x in p)
    if version in ("13", "14"):  # no failed column before PG 15
        assert p[0].failed is None and p[2].lag_ms == 0.113 and p[2].skipped == 4
    if version == "16":
        assert (p[1].failed, p[1].retried, p[1].retries) == (4, 580, 10010)
    if version == "17":
        assert (p[1].failed, p[1].lag_ms, p[1].skipped) == (0, 0.081, 7)


@pytest.mark.parametrize(
    "line",
    [
        "tps = 896.967014 (measured by a future pgbench)",
        "latency average: 11.0 ms",
        "number of transactions actually processed: many",
    ],
)
def test_unknown_summary_form_fails_with_the_line(line: str) -> None:
    text = (PG / "pg15-tpcb-summary.out").read_text().replace("tps = 1462.293016", "xx") + line
    with pytest.raises(pgbench.ParseError, match="not understood: " + re.escape(repr(line))):
        pgbench.parse_summary(text)


def test_aborted_run_has_no_summary() -> None:
    text = (PG / "pg15-script-error.out").read_text()
    with pytest.raises(pgbench.ParseError, match="no tps"):
        pgbench.parse_summary(text)


def test_unknown_progress_form_fails_with_the_line() -> None:
    with pytest.raises(pgbench.ParseError, match=r"line 2.*progress: 2\.0 s, 12 tps"):
        pgbench.parse_progress(
            "progress: 1.0 s, 1.0 tps, lat 1.0 ms stddev 0.1\nprogress: 2.0 s, 12 tps\n"
        )


def test_argv_caps_threads_and_skips_vacuum_for_custom_scripts() -> None:
    w = pgbench.Workload("tpcb-like", clients=2, jobs=8, seconds=5, rate=100, latency_limit_ms=50)
    argv = w.argv("pgbench", ["-h", "/s"], seconds=5, vacuum=True)
    assert argv[argv.index("-j") + 1] == "2"
    assert argv[argv.index("-R") + 1] == "100" and argv[argv.index("-L") + 1] == "50"
    assert "-n" not in argv and argv[-1] == "postgres"
    custom = pgbench.Workload("/x/s.sql", 1, 1, 5).argv("pgbench", [], seconds=5, vacuum=True)
    assert "-n" in custom and custom[custom.index("-f") + 1] == "/x/s.sql"


@pytest.mark.parametrize(
    ("script", "sql", "writes"),
    [
        ("select-only", None, False),
        ("tpcb-like", None, True),
        ("simple-update", None, True),
        ("my.sql", "SELECT abalance FROM pgbench_accounts WHERE aid = :aid;", False),
        ("my.sql", "\\set aid 1\nUPDATE pgbench_accounts SET abalance = 0;", True),
    ],
)
def test_writes(script: str, sql: str | None, writes: bool) -> None:
    assert pgbench.writes(script, sql) is writes
