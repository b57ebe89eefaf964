"""The kernels of txlog for a small log, without numba: the same results as txlog_kernels
(tests/unit/test_txlog.py compares the two on real logs and on bad lines), for a short
trial's few thousand lines. numba costs about 1.3 CPU-s in each process that uses it
(its import, then the typing machinery its first cached kernel loads), against some
milliseconds here; a trial of a second or a minute at a modest rate pays that again in
every `pgsweep run`, and the suite ran about a hundred (stop 41). Also the constants and
the histogram's bins, which both kernel sets share."""

from __future__ import annotations

from typing import Any

import numpy as np

FAILED, SKIPPED, SERIALIZATION, DEADLOCK = -1, -2, -3, -4
PERCENTILES = (50.0, 90.0, 95.0, 99.0, 99.9)
SECOND_PERCENTILES = (50.0, 90.0, 99.0)
_EXACT_BELOW = 1000  # us: one bin per microsecond below this
_PER_DECADE = 900  # three significant digits above it
_DECADES = 8  # up to 10^11 us
NBINS = _EXACT_BELOW + _DECADES * _PER_DECADE
_MAX_US = 2**31 - 1  # latencies and lags are kept as int32 (35 minutes)
_OUTCOMES = {ord("f"): FAILED, ord("d"): DEADLOCK}
_POWERS = 10 ** np.arange(19, dtype=np.int64)


def bin_bounds(b: int) -> tuple[int, int]:
    """[low, high) of bin b in microseconds."""
    if b < _EXACT_BELOW:
        return b, b + 1
    e, x = (b - _EXACT_BELOW) // _PER_DECADE + 1, (b - _EXACT_BELOW) % _PER_DECADE + 100
    return x * 10**e, (x + 1) * 10**e


def bins_of(v: Any) -> Any:
    """The bin of each latency (>= 0): itself below 1 ms, then three significant digits."""
    v = np.asarray(v, np.int64)
    digits = np.searchsorted(_POWERS, v, side="right")  # 1000 has 4
    e = np.maximum(digits - 3, 0)
    x = v // _POWERS[e]
    return np.where(v < _EXACT_BELOW, v,
                    np.minimum(_EXACT_BELOW + (e - 1) * _PER_DECADE + (x - 100), NBINS - 1))


def count_lines(buf: Any, starts: Any, stops: Any) -> Any:
    return np.array([np.count_nonzero(buf[a:b] == 10) for a, b in zip(starts, stops, strict=True)],
                    np.int64)  # fmt: skip


def parse_all(buf: Any, starts: Any, stops: Any, offsets: Any, lat: Any, end: Any, lag: Any,
              retries: Any) -> tuple[Any, Any, Any, Any]:  # fmt: skip
    k = len(starts)
    counts, bads = np.zeros(k, np.int64), np.full(k, -1, np.int64)
    fmins, fmaxs = np.zeros(k, np.int64), np.zeros(k, np.int64)
    for j in range(k):
        counts[j], bads[j], fmins[j], fmaxs[j] = _parse_chunk(
            bytes(buf[starts[j]:stops[j]]), int(starts[j]), (lat, end, lag, retries),
            int(offsets[j]))  # fmt: skip
    return counts, bads, fmins, fmaxs


def _parse_chunk(data: bytes, base: int, arrays: tuple[Any, Any, Any, Any],
                 out: int) -> tuple[int, int, int, int]:  # fmt: skip
    """txlog_kernels.parse_chunk over one chunk's bytes (each line ends with a newline)."""
    lat, end, lag, retries = arrays
    n, bad, fmin, fmax, at = out, -1, 99, 0, base
    for line in data.split(b"\n")[:-1]:
        got = _line(line)
        if got is None:
            bad = at if bad < 0 else bad
        else:
            nf, lat[n], end[n], lag[n], retries[n] = got
            fmin, fmax, n = min(fmin, nf), max(fmax, nf), n + 1
        at += len(line) + 1
    return n - out, bad, fmin, fmax


def _line(line: bytes) -> tuple[int, int, int, int, int] | None:
    """(fields, latency or outcome, completion us, lag or -1, retries), or None for a line
    that is not one: six to eight fields, one space apart, all digits but the latency,
    which may be a word (failed, skipped, serialization, deadlock: by its first letters)."""
    f = line.split(b" ")
    if not 6 <= len(f) <= 8 or not all(x.isdigit() for i, x in enumerate(f) if i != 2):
        return None
    word = f[2]
    if word.isdigit():
        lat_v = int(word)
    elif word and word[0] in b"fsd":
        lat_v = _OUTCOMES.get(word[0], SKIPPED if word[1:2] == b"k" else SERIALIZATION)
    else:
        return None
    done = int(f[4]) * 1_000_000 + int(f[5])
    lag_v = int(f[6]) if len(f) > 6 else -1
    ret_v = int(f[7]) if len(f) > 7 else 0
    if lat_v > _MAX_US or lag_v > _MAX_US or done >= 2**63 or ret_v > _MAX_US:
        return None  # the compiled kernel's int64 would wrap: refused here
    return len(f), lat_v, done, lag_v, ret_v


def moments_and_hist(lat: Any, end: Any, lag: Any) -> tuple[Any, ...]:
    ok = lat >= 0
    vals = lat[ok].astype(np.int64)
    fv = vals.astype(np.float64)
    lags = lag[ok & (lag >= 0)].astype(np.int64)
    # sequential sums, as the compiled loop adds (cumsum rounds at each step alike)
    s = float(np.cumsum(fv)[-1]) if len(fv) else 0.0
    ss = float(np.cumsum(fv * fv)[-1]) if len(fv) else 0.0
    t0 = int((end - np.maximum(lat, 0)).min()) if len(lat) else int(np.iinfo(np.int64).max)
    hist = np.bincount(bins_of(vals), minlength=NBINS).astype(np.int64)
    lag_s = float(np.cumsum(lags.astype(np.float64))[-1]) if len(lags) else 0.0
    return (hist, len(vals), s, ss, int(vals.max()) if len(vals) else 0,
            int(np.count_nonzero((lat < 0) & (lat != SKIPPED))),
            int(np.count_nonzero(lat == SKIPPED)), len(lags), lag_s,
            int(lags.max()) if len(lags) else 0, t0)  # fmt: skip


def per_second(lat: Any, end: Any, lag: Any, t0: int, nsec: int, qs: Any) -> tuple[Any, ...]:
    sec = (end - t0) // 1_000_000
    sec = np.where((sec >= 0) & (sec < nsec), sec, nsec)
    outside = int(np.count_nonzero(sec == nsec))
    inside = sec < nsec
    ok = inside & (lat >= 0)

    def count(mask: Any) -> Any:
        return np.bincount(sec[mask], minlength=nsec)[:nsec].astype(np.int64)

    ok_s = count(ok)
    lat_sum = np.bincount(sec[ok], weights=lat[ok].astype(np.float64), minlength=nsec)[:nsec]
    with_lag = ok & (lag >= 0)
    lag_sum = np.bincount(sec[with_lag], weights=lag[with_lag].astype(np.float64),
                          minlength=nsec)[:nsec]  # fmt: skip
    lat_max = np.zeros(nsec)
    np.maximum.at(lat_max, sec[ok], lat[ok].astype(np.float64))
    pct = np.full((nsec, len(qs)), np.nan)
    bins, secs = bins_of(lat[ok]), sec[ok]
    for s in np.flatnonzero(ok_s):
        cum = np.cumsum(np.bincount(bins[secs == s], minlength=NBINS))
        for j, q in enumerate(qs):
            b = int(np.searchsorted(cum, int(np.ceil(q / 100.0 * ok_s[s])) - 1, side="right"))
            lo, hi = bin_bounds(b)
            pct[s, j] = lo if hi - lo == 1 else (lo + hi) / 2.0
    failed = count(inside & (lat < 0) & (lat != SKIPPED))
    return ok_s, failed, count(inside & (lat == SKIPPED)), lat_sum, lat_max, lag_sum, pct, outside


def values_in_bins(lat: Any, wanted: Any) -> Any:
    """The latencies whose bin is marked in `wanted`, for exact selection."""
    v = lat[lat >= 0]
    return v[wanted[bins_of(v)]].astype(np.int32)
