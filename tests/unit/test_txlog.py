"""The per-transaction log reducer against real PG 15 logs (tests/data/pgbench/pg15-*.txlog*,
captured with -l from real runs beside their summaries): every figure is recomputed here
independently, with a plain split() parse and numpy, and checked against pgbench's own
summary lines."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from conftest import DATA
from pgsweep.collect import txlog
from pgsweep.postgres import pgbench

PG = DATA / "pgbench"
TPCB = [PG / "pg15-tpcb-c2j2.txlog.0", PG / "pg15-tpcb-c2j2.txlog.1"]
RATE_LIMITED = [PG / "pg15-select-R3000-L1.txlog"]


def plain_parse(paths: list[Path]) -> list[list[str]]:
    return [line.split() for p in paths for line in p.read_text().splitlines()]


def test_percentiles_and_moments_equal_numpy_and_pgbench() -> None:
    rows = plain_parse(TPCB)
    lat = np.array([int(r[2]) for r in rows])
    red = txlog.reduce(txlog.parse(TPCB), seconds=3)
    expected = np.percentile(lat, txlog.PERCENTILES) / 1000
    got = [red.latency[f"p{q:g}"] for q in txlog.PERCENTILES]
    assert got == pytest.approx(list(expected), rel=1e-12)
    assert red.latency["max"] == lat.max() / 1000
    summary = pgbench.parse_summary((PG / "pg15-tpcb-c2j2.out").read_text())
    # pgbench prints its mean and (population) stddev rounded to the microsecond
    assert round(red.latency["mean"], 3) == summary.latency_avg_ms
    assert round(red.latency["stddev"], 3) == summary.latency_stddev_ms
    assert red.ok == summary.transactions == len(rows)
    assert red.window_tps == pytest.approx(summary.tps, rel=0.01)


def test_rate_limited_log_counts_skipped_and_lag() -> None:
    rows = plain_parse(RATE_LIMITED)
    red = txlog.reduce(txlog.parse(RATE_LIMITED), seconds=3)
    summary = pgbench.parse_summary((PG / "pg15-select-R3000-L1.out").read_text())
    assert red.skipped == summary.skipped == sum(r[2] == "skipped" for r in rows) == 2187
    assert red.ok == summary.transactions
    assert red.failed == 0
    # under -R the logged time runs from the scheduled start: it is pgbench's average
    assert round(red.latency["mean"], 3) == summary.latency_avg_ms
    assert round(red.lag["mean"], 3) == summary.lag_avg_ms
    assert red.lag["max"] == summary.lag_max_ms
    ok = np.array([int(r[2]) for r in rows if r[2] != "skipped"])
    assert red.latency["p99"] == pytest.approx(np.percentile(ok, 99) / 1000, rel=1e-12)


def test_per_second_series_partitions_the_window() -> None:
    lines = txlog.parse(TPCB)
    red = txlog.reduce(lines, seconds=3)
    assert [s["second"] for s in red.seconds] == [0.0, 1.0, 2.0]
    assert sum(s["tps"] for s in red.seconds) + red.outside_window == red.ok
    t0 = int((lines.end - lines.lat).min())
    for s in red.seconds:
        lo = t0 + int(s["second"]) * 1_000_000
        in_second = lines.lat[(lines.end >= lo) & (lines.end < lo + 1_000_000)]
        assert s["tps"] == len(in_second)
        assert s["latency_max"] == in_second.max() / 1000
        # per-second percentiles come from the histogram: within half a bin of three
        # significant digits (exact below 1 ms)
        for q in txlog.SECOND_PERCENTILES:
            exact = np.percentile(in_second, q, method="inverted_cdf")
            half_bin = 0 if exact < 1000 else 10 ** (np.floor(np.log10(exact)) - 2) / 2
            assert abs(s[f"latency_p{q:g}"] * 1000 - exact) <= half_bin


def test_histogram_holds_every_transaction_in_ordered_bins() -> None:
    red = txlog.reduce(txlog.parse(TPCB), seconds=3)
    assert sum(n for _, _, n in red.histogram) == red.ok
    lows = [lo for lo, _, _ in red.histogram]
    assert lows == sorted(lows)
    assert all(lo < hi for lo, hi, _ in red.histogram)


def test_threads_split_gives_the_same_lines() -> None:
    one = txlog.parse(TPCB, threads=1)
    many = txlog.parse(TPCB, threads=5)
    for name in ("lat", "end", "lag", "retries"):
        assert np.array_equal(getattr(one, name), getattr(many, name))
    assert one.fields == (6, 6)


def test_sampled_log_is_about_the_sampling_rate() -> None:
    red = txlog.reduce(txlog.parse([PG / "pg15-select-sampled0.1.txlog"]), seconds=3)
    total = pgbench.parse_summary((PG / "pg15-select-sampled0.1.out").read_text()).transactions
    expected, sd = total * 0.1, (total * 0.1 * 0.9) ** 0.5
    assert abs(red.lines - expected) < 4 * sd


def test_failures_and_retries_columns() -> None:
    red = txlog.reduce(txlog.parse([PG / "pg16-docs-txlog.log"]), seconds=1)
    assert (red.ok, red.failed, red.skipped) == (2, 2, 0)
    assert (red.retried, red.retries) == (3, 5)
    assert red.latency["max"] == 3.012


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("0 1 100 0 1700000000 5\n0 2 1x0 0 1700000000 9\n", 2),
        ("0 1 100 0 1700000000 5\n0 2 100 0\n", 2),
        ("0 1 aborted 0 1700000000 5\n", 1),
        ("0 1 100 0 1700000000 5 1 2 3\n", 1),
    ],
)
def test_a_line_not_understood_fails_with_its_number(tmp_path: Path, text: str, line: int) -> None:
    log = tmp_path / "log"
    log.write_text(text)
    bad = text.splitlines()[line - 1]
    with pytest.raises(txlog.LogError, match=f"line {line} of log ") as err:
        txlog.parse([log])
    # the line is described, never quoted: the file is the server user's to write
    assert f"{len(bad)} bytes" in str(err.value) and bad not in str(err.value)


def test_a_cut_log_fails(tmp_path: Path) -> None:
    log = tmp_path / "log"
    log.write_text("0 1 100 0 1700000000 5\n0 2 10")
    with pytest.raises(txlog.LogError, match="newline"):
        txlog.parse([log])


def test_a_short_line_never_reads_past_its_own_newline() -> None:
    """The kernel reads without bounds checks: a line with too few fields must stop at its
    newline. It read the next fields past it, into the next line (which it then swallowed
    whole) or, at the end of the buffer, into memory after it (a segfault seen in the
    suite when those bytes held no newline for a page)."""
    from pgsweep.collect.txlog_kernels import parse_chunk

    text = b"0 2 100 0\n0 3 120 0 1700000000 7\n"
    buf = np.frombuffer(text, np.uint8)
    lat, end = np.zeros(2, np.int32), np.zeros(2, np.int64)
    lag, retries = np.zeros(2, np.int32), np.zeros(2, np.int32)
    parsed, bad, _, _ = parse_chunk(buf, 0, len(text), lat, end, lag, retries, 0)
    assert (parsed, bad) == (1, 0)  # the short line is bad, the next one is read as itself
    assert lat[0] == 120 and end[0] == 1700000000 * 1000000 + 7


REAL = {"tpcb": TPCB, "rate-limited": RATE_LIMITED,
        "sampled": [PG / "pg15-select-sampled0.1.txlog"], "failures": [PG / "pg16-docs-txlog.log"]}


@pytest.mark.parametrize("name", list(REAL))
def test_a_small_logs_numpy_kernels_give_the_compiled_kernels_figures(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A short trial's log takes txlog_small's kernels, a long one's numba's: on the real
    logs, every array and every figure of the reduction is the same, to the last bit."""
    paths = REAL[name]
    assert sum(p.stat().st_size for p in paths) <= txlog.SMALL_BYTES
    seconds = 1 if name == "failures" else 3
    small = txlog.parse(paths)
    small_red = txlog.reduce(small, seconds)
    monkeypatch.setattr(txlog, "SMALL_BYTES", -1)
    monkeypatch.setattr(txlog, "SMALL_LINES", -1)
    big = txlog.parse(paths)
    for array in ("lat", "end", "lag", "retries"):
        assert np.array_equal(getattr(small, array), getattr(big, array)), array
    assert small.fields == big.fields
    assert small_red == txlog.reduce(big, seconds)


@pytest.mark.parametrize("text", [
    b"0 1 100 0 1700000000 5\n0 2 1x0 0 1700000000 9\n",
    b"0 1 100 0 1700000000 5\n0 2 100 0\n",
    b"0 1 aborted 0 1700000000 5\n",
    b"0 1 100 0 1700000000 5 1 2 3\n",
    b"0 1 skipped 0 1700000000 5 7\n1 1 serialization 0 1700000000 6 0 2\n",
    b"0 1 s 0 1700000000 5\n0 2 deadlock 0 1700000000 6 0 1\n0 3 failed 0 1700000000 7 0 0\n",
    b"0 1 100 0 1700000000 5 \n",
    b"0  1 100 0 1700000000 5\n",
    b" 0 1 100 0 1700000000 5\n",
    b"\n0 1 100 0 1700000000 5\n",
    b"0 1 100 0 1700000000 5 3000000000\n",
    b"0 1 99999999999 0 1700000000 5\n",
    b"0 1 100 0 1700000000 5\r\n",
    b"0 1 \xd9\xa1 0 1700000000 5\n",
], ids=range(14))
def test_both_kernel_sets_read_each_line_alike(text: bytes) -> None:
    """Lines pgbench writes, and lines it never would: both kernel sets take or refuse the
    same ones, with the same values and the first refused line at the same offset."""
    from pgsweep.collect import txlog_kernels, txlog_small

    buf = np.frombuffer(text, np.uint8)
    starts, stops = np.array([0], np.int64), np.array([len(text)], np.int64)
    got = []
    for kernels in (txlog_small, txlog_kernels):
        n = int(kernels.count_lines(buf, starts, stops)[0])
        arrays = (np.zeros(n, np.int32), np.zeros(n, np.int64), np.zeros(n, np.int32),
                  np.zeros(n, np.int32))  # fmt: skip
        counts = kernels.parse_all(buf, starts, stops, np.zeros(1, np.int64), *arrays)
        parsed = int(counts[0][0])
        got.append(([int(c[0]) for c in counts], [a[:parsed].tolist() for a in arrays]))
    assert got[0] == got[1]


def test_a_small_log_never_loads_numba() -> None:
    """What the small kernels are for: a short trial's process never pays numba's start."""
    code = ("import sys; from pathlib import Path; from pgsweep.collect import txlog; "
            f"txlog.reduce(txlog.parse([Path({str(TPCB[0])!r}), Path({str(TPCB[1])!r})]), 3); "
            "print('numba' in sys.modules)")  # fmt: skip
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
