"""pgbench's output parsed from files captured from real PostgreSQL 15 runs on this kind
of machine (tests/data/pgbench/pg15-*), plus the PG 13 tps form from its documentation."""

from __future__ import annotations

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
