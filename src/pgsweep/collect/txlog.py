"""pgbench's per-transaction log (`-l`) reduced to counts, latency percentiles and
per-second series.

A line is `client_id transaction_no time script_no time_epoch time_us [schedule_lag]
[retries]`; `time` is the latency in microseconds (under `-R` measured from the scheduled
start) or a word: `skipped`, `failed`, `serialization`, `deadlock`. Logs reach tens of
millions of lines, so parsing and reduction are numba kernels over the raw bytes, split at
line ends across the CPUs (bench/log-reduction measures them against a plain Python loop).

Trial percentiles are exact (numpy's linear interpolation), found by a histogram pass that
narrows each rank to one bin and a sort of that bin's values. Per-second percentiles come
from the histogram alone: exact below 1 ms, above it the midpoint of a bin three
significant digits wide (at most 0.5% off, typically 0.1%)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numba
import numpy as np
import numpy.typing as npt

FAILED, SKIPPED, SERIALIZATION, DEADLOCK = -1, -2, -3, -4
PERCENTILES = (50.0, 90.0, 95.0, 99.0, 99.9)
SECOND_PERCENTILES = (50.0, 90.0, 99.0)
_EXACT_BELOW = 1000  # us: one bin per microsecond below this
_PER_DECADE = 900  # three significant digits above it
_DECADES = 8  # up to 10^11 us
NBINS = _EXACT_BELOW + _DECADES * _PER_DECADE
_MAX_US = 2**31 - 1  # latencies and lags are kept as int32 (35 minutes)

I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]


class LogError(Exception):
    pass


@numba.njit(cache=True, nogil=True, inline="always")
def _number(buf, i):  # type: ignore[no-untyped-def]
    """The decimal number at buf[i:], the index after it, and how many digits it had."""
    v, j = 0, i
    while 48 <= buf[j] <= 57:
        v = v * 10 + (buf[j] - 48)
        j += 1
    return v, j, j - i


@numba.njit(cache=True, nogil=True)
def _parse_chunk(buf, start, stop, lat, end, lag, retries, out):  # type: ignore[no-untyped-def]
    """Parse the lines in buf[start:stop] (each ends with a newline) into the arrays from
    index `out`. Returns (lines, byte offset of the first bad line or -1, fewest fields,
    most fields)."""
    i, n, bad, fmin, fmax = start, out, -1, 99, 0
    while i < stop:
        line_start, ok = i, True
        _, i, d0 = _number(buf, i)  # client_id
        ok = d0 > 0 and buf[i] == 32
        _, i, d1 = _number(buf, i + 1)  # transaction_no
        ok = ok and d1 > 0 and buf[i] == 32
        i += 1
        c = buf[i]
        if 48 <= c <= 57:
            lat_v, i, _ = _number(buf, i)
        else:  # a word names the outcome: failed, skipped, serialization, deadlock
            nxt = buf[i + 1]
            lat_v = -1 if c == 102 else -2 if c == 115 and nxt == 107 else -3 if c == 115 else -4
            ok = ok and (c == 102 or c == 115 or c == 100)
            while buf[i] != 32 and buf[i] != 10:
                i += 1
        ok = ok and buf[i] == 32
        _, i, d3 = _number(buf, i + 1)  # script_no
        ok = ok and d3 > 0 and buf[i] == 32
        epoch, i, d4 = _number(buf, i + 1)
        ok = ok and d4 > 0 and buf[i] == 32
        us, i, d5 = _number(buf, i + 1)
        ok = ok and d5 > 0
        nf, lag_v, ret_v = 6, -1, 0
        if ok and buf[i] == 32:
            lag_v, i, d6 = _number(buf, i + 1)
            nf, ok = 7, d6 > 0
            if ok and buf[i] == 32:
                ret_v, i, d7 = _number(buf, i + 1)
                nf, ok = 8, d7 > 0
        ok = ok and buf[i] == 10 and lat_v <= _MAX_US and lag_v <= _MAX_US
        if ok:
            fmin, fmax = min(fmin, nf), max(fmax, nf)
            lat[n], end[n], lag[n], retries[n] = lat_v, epoch * 1000000 + us, lag_v, ret_v
            n += 1
        elif bad < 0:
            bad = line_start
        while buf[i] != 10:
            i += 1
        i += 1
    return n - out, bad, fmin, fmax


@numba.njit(cache=True, parallel=True)
def _count_lines(buf, starts, stops):  # type: ignore[no-untyped-def]
    counts = np.zeros(len(starts), np.int64)
    for j in numba.prange(len(starts)):
        c = 0
        for i in range(starts[j], stops[j]):
            c += buf[i] == 10
        counts[j] = c
    return counts


@numba.njit(cache=True, parallel=True)
def _parse_all(buf, starts, stops, offsets, lat, end, lag, retries):  # type: ignore[no-untyped-def]
    k = len(starts)
    counts, bads = np.zeros(k, np.int64), np.full(k, -1, np.int64)
    fmins, fmaxs = np.zeros(k, np.int64), np.zeros(k, np.int64)
    for j in numba.prange(k):
        counts[j], bads[j], fmins[j], fmaxs[j] = _parse_chunk(
            buf, starts[j], stops[j], lat, end, lag, retries, offsets[j]
        )
    return counts, bads, fmins, fmaxs


@numba.njit(cache=True, nogil=True)
def _bin(v):  # type: ignore[no-untyped-def]
    if v < _EXACT_BELOW:
        return v
    e = 0
    while v >= 1000:
        v //= 10
        e += 1
    return min(_EXACT_BELOW + (e - 1) * _PER_DECADE + (v - 100), NBINS - 1)


@numba.njit(cache=True, nogil=True)
def _bin_bounds(b):  # type: ignore[no-untyped-def]
    """[low, high) of bin b in microseconds."""
    if b < _EXACT_BELOW:
        return b, b + 1
    e, x = (b - _EXACT_BELOW) // _PER_DECADE + 1, (b - _EXACT_BELOW) % _PER_DECADE + 100
    return x * 10**e, (x + 1) * 10**e


@numba.njit(cache=True, nogil=True)
def _rank_value(hist, rank):  # type: ignore[no-untyped-def]
    """Midpoint of the bin holding the value of the given 0-based rank."""
    acc = 0
    for b in range(len(hist)):
        acc += hist[b]
        if acc > rank:
            lo, hi = _bin_bounds(b)
            return lo if hi - lo == 1 else (lo + hi) / 2.0
    return np.nan


@numba.njit(cache=True, parallel=True)
def _per_second(lat, end, lag, t0, nsec, qs):  # type: ignore[no-untyped-def]
    """Counting sort of the lines by second since t0, then per second: outcome counts,
    latency sum/max, lag sum, and percentiles from a histogram."""
    n = len(lat)
    sec = np.empty(n, np.int32)
    cnt = np.zeros(nsec + 1, np.int64)  # the last slot holds lines outside the window
    for i in range(n):
        s = (end[i] - t0) // 1000000
        s = s if 0 <= s < nsec else nsec
        sec[i] = s
        cnt[s] += 1
    first = np.zeros(nsec + 2, np.int64)
    first[1:] = np.cumsum(cnt)
    pos, order = first[:-1].copy(), np.empty(n, np.int32)
    for i in range(n):
        order[pos[sec[i]]] = i
        pos[sec[i]] += 1
    ok = np.zeros(nsec, np.int64)
    failed, skipped = np.zeros(nsec, np.int64), np.zeros(nsec, np.int64)
    lat_sum, lat_max, lag_sum = np.zeros(nsec), np.zeros(nsec), np.zeros(nsec)
    pct = np.full((nsec, len(qs)), np.nan)
    for s in numba.prange(nsec):
        hist = np.zeros(NBINS, np.int64)
        for k in range(first[s], first[s + 1]):
            i = order[k]
            v = lat[i]
            if v >= 0:
                ok[s] += 1
                lat_sum[s] += v
                lat_max[s] = max(lat_max[s], v)
                hist[_bin(v)] += 1
                if lag[i] >= 0:
                    lag_sum[s] += lag[i]
            elif v == SKIPPED:
                skipped[s] += 1
            else:
                failed[s] += 1
        if ok[s] > 0:
            for j in range(len(qs)):
                pct[s, j] = _rank_value(hist, int(np.ceil(qs[j] / 100.0 * ok[s])) - 1)
    return ok, failed, skipped, lat_sum, lat_max, lag_sum, pct, cnt[nsec]


@numba.njit(cache=True, nogil=True)
def _moments_and_hist(lat, end, lag):  # type: ignore[no-untyped-def]
    hist = np.zeros(NBINS, np.int64)
    n, s, ss, mx = 0, 0.0, 0.0, 0
    failed, skipped, nlag, lag_s, lag_mx = 0, 0, 0, 0.0, 0
    t0 = np.iinfo(np.int64).max  # the earliest start: completion minus latency
    for i in range(len(lat)):
        v = lat[i]
        t0 = min(t0, end[i] - max(v, 0))
        if v >= 0:
            n += 1
            s += v
            ss += float(v) * v
            mx = max(mx, v)
            hist[_bin(v)] += 1
            if lag[i] >= 0:
                nlag += 1
                lag_s += lag[i]
                lag_mx = max(lag_mx, lag[i])
        elif v == SKIPPED:
            skipped += 1
        else:
            failed += 1
    return hist, n, s, ss, mx, failed, skipped, nlag, lag_s, lag_mx, t0


@numba.njit(cache=True, nogil=True)
def _values_in_bins(lat, wanted):  # type: ignore[no-untyped-def]
    """The latencies whose bin is marked in `wanted`, for exact selection."""
    m = 0
    for i in range(len(lat)):
        if lat[i] >= 0 and wanted[_bin(lat[i])]:
            m += 1
    out, m = np.empty(m, np.int32), 0
    for i in range(len(lat)):
        if lat[i] >= 0 and wanted[_bin(lat[i])]:
            out[m] = lat[i]
            m += 1
    return out


@dataclass
class Lines:
    """Parsed log: one entry per line; lat < 0 holds the outcome codes above."""

    lat: I32
    end: I64  # completion time, microseconds since the epoch
    lag: I32  # schedule lag in microseconds, -1 when not logged
    retries: I32
    fields: tuple[int, int]  # fewest and most fields seen


def parse(paths: list[Path], threads: int | None = None) -> Lines:
    """Parse pgbench's log files (one per thread) into one set of arrays. Fails on the first
    line not understood, quoting it: a skipped line would bias every percentile."""
    k = max(1, threads or numba.get_num_threads())
    files = [_split(p, k) for p in paths]  # (path, buffer, starts, stops, lines per chunk)
    total = sum(int(f[4].sum()) for f in files)
    if total >= 2**31:
        raise LogError(f"{total:,} lines is more than one trial's log can hold; sample it")
    lat, end = np.empty(total, np.int32), np.empty(total, np.int64)
    lag, retries = np.empty(total, np.int32), np.empty(total, np.int32)
    at, fmin, fmax = 0, 99, 0
    for path, buf, starts, stops, lines in files:
        offsets = at + np.concatenate(([0], np.cumsum(lines)[:-1])).astype(np.int64)
        _, bads, fmins, fmaxs = _parse_all(buf, starts, stops, offsets, lat, end, lag, retries)
        if (bads >= 0).any():
            _fail(path, buf, int(bads[bads >= 0].min()))
        seen = fmaxs > 0
        if seen.any():
            fmin, fmax = min(fmin, int(fmins[seen].min())), max(fmax, int(fmaxs[seen].max()))
        at += int(lines.sum())
    return Lines(lat, end, lag, retries, (fmin, fmax) if fmax else (0, 0))


def _split(path: Path, k: int) -> tuple[Path, Any, I64, I64, I64]:
    """Map a file (no copy: the page cache is read in place) and cut it into k chunks at
    line ends; count each chunk's lines."""
    size = path.stat().st_size
    if size == 0:
        none = np.zeros(0, np.int64)
        return path, np.zeros(1, np.uint8), none, none, none
    buf = np.memmap(path, np.uint8, mode="r")
    if buf[-1] != 10:
        raise LogError(f"{path.name} does not end with a newline: was pgbench stopped mid-line?")
    bounds = [0]
    for j in range(1, k):
        nl = np.flatnonzero(buf[size * j // k : size * j // k + 4096] == 10)
        if len(nl) and bounds[-1] < size * j // k + nl[0] + 1 < size:
            bounds.append(size * j // k + int(nl[0]) + 1)
    bounds.append(size)
    starts, stops = np.array(bounds[:-1], np.int64), np.array(bounds[1:], np.int64)
    return path, buf, starts, stops, _count_lines(buf, starts, stops)


def _fail(path: Path, buf: Any, at: int) -> None:
    number = int(np.count_nonzero(buf[:at] == 10)) + 1
    text = bytes(buf[at : at + 200]).split(b"\n")[0].decode(errors="replace")
    raise LogError(
        f"line {number} of {path.name} (pgbench's transaction log) is not understood: {text!r}"
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
    moments = _moments_and_hist(lat, end, lag)
    hist, n, s, ss, mx, failed, skipped, nlag, lag_s, lag_mx, t0 = moments
    per = _per_second(lat, end, lag, t0, seconds, np.array(SECOND_PERCENTILES))
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
        for q, v in zip(PERCENTILES, exact_percentiles(lat, hist, n, PERCENTILES), strict=True):
            red.latency[f"p{q:g}"] = v / 1000
        red.latency["max"] = mx / 1000
        red.histogram = [
            (lo / 1000, hi / 1000, int(c))
            for b, c in enumerate(hist)
            if c
            for lo, hi in [_bin_bounds(b)]
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


def exact_percentiles(lat: I32, hist: I64, n: int, qs: tuple[float, ...]) -> list[float]:
    """numpy.percentile(lat[lat >= 0], qs) without sorting everything: find the bins holding
    the ranks each percentile interpolates between, then sort only those bins' values."""
    cum = np.cumsum(hist)
    ranks = []
    for q in qs:
        h = (n - 1) * q / 100.0
        ranks += [int(np.floor(h)), min(int(np.floor(h)) + 1, n - 1)]
    wanted = np.zeros(len(hist), np.bool_)
    wanted[np.searchsorted(cum, np.array(ranks) + 1, side="left")] = True
    values = np.sort(_values_in_bins(lat, wanted))
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
