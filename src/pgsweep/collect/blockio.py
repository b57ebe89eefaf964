"""Block-I/O latency histograms (issue 26, opt in: [experiment] io_latency): `perf script`
output of the kernel's `block:block_rq_issue` and `block:block_rq_complete` tracepoints,
recorded for the server's data and WAL devices only (a filter on the device number), paired
issue to completion into one latency per request, and counted per device and kind of request
in quarter-octave buckets (each bucket 2^(1/4), about 19%, wider than the one below it).
Kept per trial as the artifact io_latency.tsv."""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict, deque
from dataclasses import dataclass

ARTIFACT = "io_latency.tsv"
STEPS = 4  # buckets per doubling
KINDS = ("read", "write", "flush", "discard", "other")

# "254,0 WS 4096 () 12644072 + 8 0x2,0,4 [comm]" (issue: with the request's bytes);
# "254,0 WS () 12644072 + 8 0x2,0,4 [0]" (complete: with its error); the ioprio field
# (0x2,0,4) is newer kernels' only
_EVENT = re.compile(r"^\s*(\d+)\.(\d+):\s+block:block_rq_(issue|complete):\s+(\d+),(\d+)\s+"
                    r"(\S+)\s+(?:\d+\s+)?\(.*?\)\s+(\d+)\s+\+\s+(\d+)")  # fmt: skip


def kind(rwbs: str) -> str:
    """A request's kind from the kernel's RWBS letters: an F first is a flush before the
    request (FWS: a write), then its operation: R read, W write, D discard, F a cache flush
    (FF), N any other (write-zeroes, zone operations)."""
    op = rwbs[1:2] if rwbs.startswith("F") and len(rwbs) > 1 else rwbs[:1]
    return {"R": "read", "W": "write", "D": "discard", "F": "flush"}.get(op, "other")


def bucket(seconds: float) -> int:
    """The bucket of a latency: k holds [2^(k/4), 2^((k+1)/4)) microseconds, under 1 us in 0."""
    us = seconds * 1e6
    return 0 if us < 1.0 else math.floor(STEPS * math.log2(us))


def bounds_us(k: int) -> tuple[float, float]:
    return (0.0 if k == 0 else 2 ** (k / STEPS)), 2 ** ((k + 1) / STEPS)


def histogram(script: str, devices: dict[tuple[int, int], str]) -> Counter[tuple[str, str, int]]:
    """`perf script -F time,event,trace --ns` -> (device name, kind, bucket) -> requests, for
    the devices named by (major, minor). A request is its device, first sector and length;
    its latency runs from its issue to its first completion (a write with a flush before or
    after it completes once more with length 0 when that flush is done: not counted). Cache
    flushes have no sector (issued at 0, completed at -1): they are paired in order. A
    request issued before the window or completed after it is not counted."""
    issued: dict[tuple[int, int, int, int], float] = {}
    flushes: dict[tuple[int, int], deque[float]] = defaultdict(deque)
    out: Counter[tuple[str, str, int]] = Counter()
    for line in script.splitlines():
        m = _EVENT.match(line)
        if not m:
            continue
        secs, frac, what, major, minor, rwbs, sector, length = m.groups()
        dev = (int(major), int(minor))
        if dev not in devices:
            continue
        at = int(secs) + int(frac) / 10 ** len(frac)
        knd = kind(rwbs)
        began: float | None = None
        if knd == "flush" and length == "0":
            if what == "issue":
                flushes[dev].append(at)
            elif flushes[dev]:
                began = flushes[dev].popleft()
        elif what == "issue":
            issued[(*dev, int(sector), int(length))] = at  # a stale one is replaced
        elif length != "0":
            began = issued.pop((*dev, int(sector), int(length)), None)
        if began is not None:
            out[(devices[dev], knd, bucket(max(at - began, 0.0)))] += 1
    return out


def to_text(hist: Counter[tuple[str, str, int]]) -> str:
    lines = ["device\tkind\tbucket\trequests\n"]
    lines += [f"{d}\t{k}\t{b}\t{n}\n" for (d, k, b), n in sorted(hist.items())]
    return "".join(lines)


def parse(text: str) -> Counter[tuple[str, str, int]]:
    """An io_latency.tsv artifact back into its histogram (lines it cannot read are skipped)."""
    out: Counter[tuple[str, str, int]] = Counter()
    for line in text.splitlines()[1:]:
        parts = line.split("\t")
        if len(parts) == 4 and parts[1] in KINDS and parts[2].isdigit() and parts[3].isdigit():
            out[(parts[0], parts[1], int(parts[2]))] += int(parts[3])
    return out


@dataclass(frozen=True)
class Latency:
    """One device's requests of one kind in a trial's window: how many and their quantiles
    in microseconds, each the geometric middle of its bucket (within 10% of the truth)."""

    device: str
    kind: str
    requests: int
    p50_us: float
    p90_us: float
    p99_us: float
    max_us: float  # the top of the highest bucket reached


def summaries(hist: Counter[tuple[str, str, int]]) -> list[Latency]:
    per: dict[tuple[str, str], dict[int, int]] = defaultdict(dict)
    for (dev, knd, b), n in hist.items():
        per[(dev, knd)][b] = per[(dev, knd)].get(b, 0) + n
    out = []
    for (dev, knd), counts in sorted(per.items()):
        total = sum(counts.values())
        out.append(Latency(dev, knd, total, _quantile(counts, total, 0.5),
                           _quantile(counts, total, 0.9), _quantile(counts, total, 0.99),
                           bounds_us(max(counts))[1]))  # fmt: skip
    return out


def _quantile(counts: dict[int, int], total: int, q: float) -> float:
    seen = 0
    for b in sorted(counts):
        seen += counts[b]
        if seen >= q * total:
            low, high = bounds_us(b)
            return math.sqrt(max(low, 0.5) * high)
    return math.nan
