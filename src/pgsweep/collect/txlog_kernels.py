"""The numba kernels behind txlog: parse pgbench's per-transaction log from raw bytes and
reduce it (histograms, per-second counting sort, exact selection). Plain loops over
arrays, compiled once and cached; the Python-level API and its contract live in txlog,
the constants and a small log's kernels in txlog_small."""

from __future__ import annotations

import numba
import numpy as np

from .txlog_small import _EXACT_BELOW, _MAX_US, _PER_DECADE, NBINS, SKIPPED


@numba.njit(cache=True, nogil=True, inline="always")
def read_number(buf, i, e):  # type: ignore[no-untyped-def]
    """The decimal number at buf[i:e], the index after it, and how many digits it had."""
    v, j = 0, i
    while j < e and 48 <= buf[j] <= 57:
        v = v * 10 + (buf[j] - 48)
        j += 1
    return v, j, j - i


@numba.njit(cache=True, nogil=True, inline="always")
def after(buf, i, e):  # type: ignore[no-untyped-def]
    """The index after the separator at i (a space), or e: a read never crosses the line's
    newline at e, so a short line cannot take the next line's bytes, or those after the
    buffer's end (there is no bounds check in the compiled loop)."""
    return i + 1 if i < e and buf[i] == 32 else e


@numba.njit(cache=True, nogil=True)
def parse_chunk(buf, start, stop, lat, end, lag, retries, out):  # type: ignore[no-untyped-def]
    """Parse the lines in buf[start:stop] (each ends with a newline) into the arrays from
    index `out`. Returns (lines, byte offset of the first bad line or -1, fewest fields,
    most fields)."""
    i, n, bad, fmin, fmax = start, out, -1, 99, 0
    while i < stop:
        line_start, e = i, i
        while buf[e] != 10:  # stops at the chunk's last newline at the latest
            e += 1
        _, i, d0 = read_number(buf, i, e)  # client_id
        ok = d0 > 0 and i < e and buf[i] == 32
        _, i, d1 = read_number(buf, after(buf, i, e), e)  # transaction_no
        ok = ok and d1 > 0 and i < e and buf[i] == 32
        i = after(buf, i, e)
        c = buf[i]
        if 48 <= c <= 57:
            lat_v, i, _ = read_number(buf, i, e)
        else:  # a word names the outcome: failed, skipped, serialization, deadlock
            nxt = buf[i + 1] if i + 1 < e else 0
            lat_v = -1 if c == 102 else -2 if c == 115 and nxt == 107 else -3 if c == 115 else -4
            ok = ok and (c == 102 or c == 115 or c == 100)
            while i < e and buf[i] != 32:
                i += 1
        ok = ok and i < e and buf[i] == 32
        _, i, d3 = read_number(buf, after(buf, i, e), e)  # script_no
        ok = ok and d3 > 0 and i < e and buf[i] == 32
        epoch, i, d4 = read_number(buf, after(buf, i, e), e)
        ok = ok and d4 > 0 and i < e and buf[i] == 32
        us, i, d5 = read_number(buf, after(buf, i, e), e)
        ok = ok and d5 > 0
        nf, lag_v, ret_v = 6, -1, 0
        if ok and i < e and buf[i] == 32:
            lag_v, i, d6 = read_number(buf, i + 1, e)
            nf, ok = 7, d6 > 0
            if ok and i < e and buf[i] == 32:
                ret_v, i, d7 = read_number(buf, i + 1, e)
                nf, ok = 8, d7 > 0
        ok = ok and i == e and lat_v <= _MAX_US and lag_v <= _MAX_US
        if ok:
            fmin, fmax = min(fmin, nf), max(fmax, nf)
            lat[n], end[n], lag[n], retries[n] = lat_v, epoch * 1000000 + us, lag_v, ret_v
            n += 1
        elif bad < 0:
            bad = line_start
        i = e + 1
    return n - out, bad, fmin, fmax


@numba.njit(cache=True, parallel=True)
def count_lines(buf, starts, stops):  # type: ignore[no-untyped-def]
    counts = np.zeros(len(starts), np.int64)
    for j in numba.prange(len(starts)):
        c = 0
        for i in range(starts[j], stops[j]):
            c += buf[i] == 10
        counts[j] = c
    return counts


@numba.njit(cache=True, parallel=True)
def parse_all(buf, starts, stops, offsets, lat, end, lag, retries):  # type: ignore[no-untyped-def]
    k = len(starts)
    counts, bads = np.zeros(k, np.int64), np.full(k, -1, np.int64)
    fmins, fmaxs = np.zeros(k, np.int64), np.zeros(k, np.int64)
    for j in numba.prange(k):
        counts[j], bads[j], fmins[j], fmaxs[j] = parse_chunk(
            buf, starts[j], stops[j], lat, end, lag, retries, offsets[j]
        )
    return counts, bads, fmins, fmaxs


@numba.njit(cache=True, nogil=True)
def bin_of(v):  # type: ignore[no-untyped-def]
    if v < _EXACT_BELOW:
        return v
    e = 0
    while v >= 1000:
        v //= 10
        e += 1
    return min(_EXACT_BELOW + (e - 1) * _PER_DECADE + (v - 100), NBINS - 1)


@numba.njit(cache=True, nogil=True)
def bin_bounds(b):  # type: ignore[no-untyped-def]
    """[low, high) of bin b in microseconds."""
    if b < _EXACT_BELOW:
        return b, b + 1
    e, x = (b - _EXACT_BELOW) // _PER_DECADE + 1, (b - _EXACT_BELOW) % _PER_DECADE + 100
    return x * 10**e, (x + 1) * 10**e


@numba.njit(cache=True, nogil=True)
def rank_value(hist, rank):  # type: ignore[no-untyped-def]
    """Midpoint of the bin holding the value of the given 0-based rank."""
    acc = 0
    for b in range(len(hist)):
        acc += hist[b]
        if acc > rank:
            lo, hi = bin_bounds(b)
            return lo if hi - lo == 1 else (lo + hi) / 2.0
    return np.nan


@numba.njit(cache=True, parallel=True)
def per_second(lat, end, lag, t0, nsec, qs):  # type: ignore[no-untyped-def]
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
                hist[bin_of(v)] += 1
                if lag[i] >= 0:
                    lag_sum[s] += lag[i]
            elif v == SKIPPED:
                skipped[s] += 1
            else:
                failed[s] += 1
        if ok[s] > 0:
            for j in range(len(qs)):
                pct[s, j] = rank_value(hist, int(np.ceil(qs[j] / 100.0 * ok[s])) - 1)
    return ok, failed, skipped, lat_sum, lat_max, lag_sum, pct, cnt[nsec]


@numba.njit(cache=True, nogil=True)
def moments_and_hist(lat, end, lag):  # type: ignore[no-untyped-def]
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
            hist[bin_of(v)] += 1
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
def values_in_bins(lat, wanted):  # type: ignore[no-untyped-def]
    """The latencies whose bin is marked in `wanted`, for exact selection."""
    m = 0
    for i in range(len(lat)):
        if lat[i] >= 0 and wanted[bin_of(lat[i])]:
            m += 1
    out, m = np.empty(m, np.int32), 0
    for i in range(len(lat)):
        if lat[i] >= 0 and wanted[bin_of(lat[i])]:
            out[m] = lat[i]
            m += 1
    return out
