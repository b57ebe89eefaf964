"""pgbench's per-transaction log (`-l`) reduced to counts, latency percentiles and
per-second series.

A line is `client_id transaction_no time script_no time_epoch time_us [schedule_lag]
[retries]`; `time` is the latency in microseconds (under `-R` measured from the scheduled
start) or a word: `skipped`, `failed`, `serialization`, `deadlock`. Logs reach tens of
millions of lines, so parsing and reduction are numba kernels over the raw bytes, split at
line ends across the CPUs (bench/log-reduction measures them against a plain Python loop).
A log of at most SMALL_BYTES (a short trial's) takes txlog_small's numpy kernels instead,
which give the same results without numba's start-up (about 1 CPU-s per process).

Trial percentiles are exact (numpy's linear interpolation), found by a histogram pass that
narrows each rank to one bin and a sort of that bin's values. Per-second percentiles come
from the histogram alone: exact below 1 ms, above it the midpoint of a bin three
significant digits wide (at most 0.5% off, typically 0.1%)."""

from __future__ import annotations

import io
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import numpy.typing as npt

from . import txlog_small
from .txlog_small import PERCENTILES, SECOND_PERCENTILES, bin_bounds

MAX_LOG_BYTES = 4 << 30  # about 100 million lines: more is a log to sample
# at most this many bytes or lines, the numpy kernels: 0.74 CPU-s for 136,000 lines
# against numba's 1.06 (with its start-up), 0.05 for 9,000 against 1.16 (bench/log_small.py)
SMALL_BYTES = 4 << 20
SMALL_LINES = 120_000
I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]


class LogError(Exception):
    pass


@dataclass
class Lines:
    """Parsed log: one entry per line; lat < 0 holds the outcome codes above."""

    lat: I32
    end: I64  # completion time, microseconds since the epoch
    lag: I32  # schedule lag in microseconds, -1 when not logged
    retries: I32
    fields: tuple[int, int]  # fewest and most fields seen


def parse(sources: Sequence[Path | BinaryIO], threads: int | None = None) -> Lines:
    """Parse pgbench's log files (one per thread; paths, or files already opened safely)
    into one set of arrays. Fails on the first line not understood, naming its number and
    file: a skipped line would bias every percentile. The line itself is not quoted: the
    file lives where the server user can write, and its bytes do not belong in a report."""
    sizes = [_size(s) for s in sources]
    small = sum(sizes) <= SMALL_BYTES
    kernels = txlog_small if small else _compiled()
    k = 1 if small else max(1, threads or _cpus())
    # (name, buffer, starts, stops, lines per chunk)
    files = [_split(s, size, k, kernels) for s, size in zip(sources, sizes, strict=True)]
    total = sum(int(f[4].sum()) for f in files)
    if total >= 2**31:
        raise LogError(f"{total:,} lines is more than one trial's log can hold; sample it")
    lat, end = np.empty(total, np.int32), np.empty(total, np.int64)
    lag, retries = np.empty(total, np.int32), np.empty(total, np.int32)
    at, fmin, fmax = 0, 99, 0
    for name, buf, starts, stops, lines in files:
        offsets = at + np.concatenate(([0], np.cumsum(lines)[:-1])).astype(np.int64)
        _, bads, fmins, fmaxs = kernels.parse_all(buf, starts, stops, offsets, lat, end, lag,
                                                  retries)  # fmt: skip
        if (bads >= 0).any():
            _fail(name, buf, int(bads[bads >= 0].min()))
        seen = fmaxs > 0
        if seen.any():
            fmin, fmax = min(fmin, int(fmins[seen].min())), max(fmax, int(fmaxs[seen].max()))
        at += int(lines.sum())
    return Lines(lat, end, lag, retries, (fmin, fmax) if fmax else (0, 0))


def _compiled() -> Any:
    """The numba kernels, loaded when a log is large enough to be worth their start-up."""
    from . import txlog_kernels

    return txlog_kernels


def _cpus() -> int:
    import numba

    return int(numba.get_num_threads())


def _size(source: Path | BinaryIO) -> int:
    if isinstance(source, Path):
        return source.stat().st_size
    if isinstance(source, io.BytesIO):  # read back from another host, already in memory
        return len(source.getbuffer())
    return os.fstat(source.fileno()).st_size


def _split(source: Path | BinaryIO, size: int, k: int,
           kernels: Any) -> tuple[str, Any, I64, I64, I64]:  # fmt: skip
    """Read a file of `size` bytes (a file that shrinks meanwhile is refused) and cut it
    into k chunks at line ends; count each chunk's lines."""
    name = source.name if isinstance(source, Path) else f"log file {source.name}"
    if size == 0:
        none = np.zeros(0, np.int64)
        return name, np.zeros(1, np.uint8), none, none, none
    if size > MAX_LOG_BYTES:
        raise LogError(f"{name} holds {size:,} bytes, more than one trial's log may "
                       f"({MAX_LOG_BYTES:,}); sample it (workload.latency_log)")  # fmt: skip
    if isinstance(source, io.BytesIO):
        buf = np.frombuffer(source.getbuffer(), np.uint8).copy()
    else:
        buf = _read_all(source, size, name)
    if buf[-1] != 10:
        raise LogError(f"{name} does not end with a newline: was pgbench stopped mid-line?")
    bounds = [0]
    for j in range(1, k):
        nl = np.flatnonzero(buf[size * j // k : size * j // k + 4096] == 10)
        if len(nl) and bounds[-1] < size * j // k + nl[0] + 1 < size:
            bounds.append(size * j // k + int(nl[0]) + 1)
    bounds.append(size)
    starts, stops = np.array(bounds[:-1], np.int64), np.array(bounds[1:], np.int64)
    return name, buf, starts, stops, kernels.count_lines(buf, starts, stops)


def _read_all(source: Path | BinaryIO, size: int, name: str) -> Any:
    """The file's bytes, read (not mapped: a file the server user can truncate while it is
    mapped would kill pgsweep with SIGBUS); a file that shrinks meanwhile is refused. Read
    in 64 MiB pieces on every CPU (preadv releases the GIL)."""
    buf = np.empty(size, np.uint8)
    view = memoryview(buf)  # type: ignore[arg-type]
    fd = os.open(source, os.O_RDONLY) if isinstance(source, Path) else source.fileno()
    step = 64 << 20

    def piece(at: int) -> None:
        end = min(at + step, size)
        while at < end:
            n = os.preadv(fd, [view[at:end]], at)
            if not n:
                raise LogError(f"{name} shrank while it was read (at {at:,} of {size:,} bytes)")
            at += n

    try:
        with ThreadPoolExecutor(max(1, min(os.cpu_count() or 1, size // step + 1))) as pool:
            list(pool.map(piece, range(0, size, step)))
    finally:
        if isinstance(source, Path):
            os.close(fd)
    return buf


def _fail(name: str, buf: Any, at: int) -> None:
    number = int(np.count_nonzero(buf[:at] == 10)) + 1
    length = len(bytes(buf[at : at + 4096]).split(b"\n")[0])
    raise LogError(
        f"line {number} of {name} (pgbench's transaction log, {length} bytes from offset "
        f"{at}) is not a transaction log line"
    )


@dataclass
class Reduction:
    """What a trial keeps from its log. Latencies in milliseconds."""

    lines: int
    ok: int
    failed: int
    skipped: int
    retried: int
    retries: int
    outside_window: int
    window_s: float
    window_tps: float
    latency: dict[str, float] = field(default_factory=dict)  # mean, stddev, p50.., max
    lag: dict[str, float] = field(default_factory=dict)  # mean, max (only under -R)
    seconds: list[dict[str, float]] = field(default_factory=list)
    histogram: list[tuple[float, float, int]] = field(default_factory=list)  # low, high ms, n


def reduce(lines: Lines, seconds: int) -> Reduction:
    """Counts, exact percentiles and per-second series over the window [t0, t0 + seconds),
    where t0 is the earliest transaction start (completion minus latency; for skipped and
    failed lines, their completion)."""
    lat, end, lag = lines.lat, lines.end, lines.lag
    kernels = txlog_small if len(lat) <= SMALL_LINES else _compiled()
    moments = kernels.moments_and_hist(lat, end, lag)
    hist, n, s, ss, mx, failed, skipped, nlag, lag_s, lag_mx, t0 = moments
    per = kernels.per_second(lat, end, lag, t0, seconds, np.array(SECOND_PERCENTILES))
    ok_s, failed_s, skipped_s, lat_sum, lat_max, lag_sum, pct, outside = per
    red = Reduction(
        lines=len(lat), ok=n, failed=failed, skipped=skipped,
        retried=int((lines.retries > 0).sum()), retries=int(lines.retries.sum()),
        outside_window=int(outside), window_s=float(seconds),
        window_tps=float(ok_s.sum()) / seconds,
    )  # fmt: skip
    if n:
        mean = s / n
        red.latency = {"mean": mean / 1000, "stddev": _stddev(n, s, ss) / 1000}
        pcts = exact_percentiles(lat, hist, n, PERCENTILES, kernels.values_in_bins)
        for q, v in zip(PERCENTILES, pcts, strict=True):
            red.latency[f"p{q:g}"] = v / 1000
        red.latency["max"] = mx / 1000
        red.histogram = [
            (lo / 1000, hi / 1000, int(c))
            for b, c in enumerate(hist)
            if c
            for lo, hi in [bin_bounds(b)]
        ]
    if nlag:
        red.lag = {"mean": lag_s / nlag / 1000, "max": lag_mx / 1000}
    for sec in range(seconds):
        row = {"second": float(sec), "tps": float(ok_s[sec]), "failed": float(failed_s[sec])}
        row["skipped"] = float(skipped_s[sec])
        if ok_s[sec]:
            row["latency_mean"] = lat_sum[sec] / ok_s[sec] / 1000
            row["latency_max"] = lat_max[sec] / 1000
            for q, v in zip(SECOND_PERCENTILES, pct[sec], strict=True):
                row[f"latency_p{q:g}"] = float(v) / 1000
            if nlag:
                row["lag_mean"] = lag_sum[sec] / ok_s[sec] / 1000
        red.seconds.append(row)
    return red


def _stddev(n: int, s: float, ss: float) -> float:
    # population stddev, as pgbench prints it
    return float(np.sqrt(max(ss / n - (s / n) ** 2, 0.0)))


def exact_percentiles(lat: I32, hist: I64, n: int, qs: tuple[float, ...],
                      values_in_bins: Any = txlog_small.values_in_bins) -> list[float]:  # fmt: skip
    """numpy.percentile(lat[lat >= 0], qs) without sorting everything: find the bins holding
    the ranks each percentile interpolates between, then sort only those bins' values."""
    cum = np.cumsum(hist)
    ranks = []
    for q in qs:
        h = (n - 1) * q / 100.0
        ranks += [int(np.floor(h)), min(int(np.floor(h)) + 1, n - 1)]
    wanted = np.zeros(len(hist), np.bool_)
    wanted[np.searchsorted(cum, np.array(ranks) + 1, side="left")] = True
    values = np.sort(values_in_bins(lat, wanted))
    # rank r in bin b sits at (r - values before b) + (wanted values in earlier bins)
    before = cum - hist
    wanted_before = np.cumsum(np.where(wanted, hist, 0)) - np.where(wanted, hist, 0)

    def at(rank: int) -> float:
        b = int(np.searchsorted(cum, rank + 1, side="left"))
        return float(values[rank - before[b] + wanted_before[b]])

    out = []
    for q in qs:
        h = (n - 1) * q / 100.0
        lo = int(np.floor(h))
        a, b = at(lo), at(min(lo + 1, n - 1))
        out.append(a + (h - lo) * (b - a))
    return out
