"""sysbench's output (1.0, its PostgreSQL driver), read into pgsweep's names.

A run with `--report-interval=1 --histogram=on` prints one line per second, the latency
histogram, then its summary. Parsed here: transactions and queries per second, errors
and reconnects (counts and rates), latency min/avg/max and the percentile asked for, the
percentiles pgsweep reports computed from the histogram, and the per-second series. The
forms are those of output captured from real runs (tests/data/sysbench/)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_SECOND = re.compile(
    r"^\[ *(\d+)s \] thds: (\d+) tps: ([\d.]+) qps: ([\d.]+) \(r/w/o: ([\d.]+)/([\d.]+)/"
    r"([\d.]+)\) lat \(ms,(\d+)%\): ([\d.]+) err/s: ([\d.]+) reconn/s: ([\d.]+)", re.M)
_COUNT = re.compile(r"^\s+(transactions|queries|ignored errors|reconnects):\s+(\d+)\s+"
                    r"\(([\d.]+) per sec\.\)", re.M)  # fmt: skip
_LATENCY = re.compile(r"^\s+(min|avg|max|(\d+)th percentile|sum):\s+([\d.]+)$", re.M)
_TIME = re.compile(r"^\s+total time:\s+([\d.]+)s$", re.M)
_BIN = re.compile(r"^\s+([\d.]+) \|\**\s+(\d+)$", re.M)
_VERSION = re.compile(r"^sysbench (\S+)", re.M)
PERCENTILES = (50, 90, 95, 99, 99.9)


class SysbenchParseError(Exception):
    """The output is not a finished sysbench run's."""


@dataclass
class Second:
    t: int  # seconds since the start of the run
    threads: int
    tps: float
    qps: float
    reads: float
    writes: float
    other: float
    latency_pct_ms: float  # at the percentile asked for (`lat (ms,N%)`)
    errors: float  # per second
    reconnects: float


@dataclass
class SysbenchRun:
    version: str
    seconds: float
    tps: float
    qps: float
    transactions: int
    queries: int
    errors: int
    reconnects: int
    latency: dict[str, float] = field(default_factory=dict)  # min, avg, max, pNN (ms)
    histogram: list[tuple[float, int]] = field(default_factory=list)  # (ms, count)
    per_second: list[Second] = field(default_factory=list)

    def metrics(self) -> dict[str, float]:
        """The trial's metrics under pgbench's names where they mean the same (tps,
        latency_ms.*), sysbench's own beside them (qps, errors, reconnects)."""
        out = {"tps": self.tps, "sysbench.qps": self.qps, "tx.count": float(self.transactions),
               "sysbench.queries": float(self.queries), "tx.failed": float(self.errors),
               "sysbench.errors_per_s": self.errors / self.seconds if self.seconds else 0.0,
               "sysbench.reconnects": float(self.reconnects)}  # fmt: skip
        out.update({f"latency_ms.{k}": v for k, v in self.latency.items()})
        return out


def parse(text: str) -> SysbenchRun:
    counts = {m.group(1): (int(m.group(2)), float(m.group(3))) for m in _COUNT.finditer(text)}
    total = _TIME.search(text)
    if "transactions" not in counts or "queries" not in counts or total is None:
        raise SysbenchParseError("no summary (SQL statistics, total time) in sysbench's output")
    latency: dict[str, float] = {}
    for m in _LATENCY.finditer(text):
        name = m.group(1)
        if name == "sum":
            continue
        latency[f"p{m.group(2)}" if m.group(2) else name] = float(m.group(3))
    bins = [(float(v), int(c)) for v, c in _BIN.findall(text)]
    latency.update(percentiles(bins))
    version = _VERSION.search(text)
    return SysbenchRun(
        version=version.group(1) if version else "?", seconds=float(total.group(1)),
        tps=counts["transactions"][1], qps=counts["queries"][1],
        transactions=counts["transactions"][0], queries=counts["queries"][0],
        errors=counts.get("ignored errors", (0, 0.0))[0],
        reconnects=counts.get("reconnects", (0, 0.0))[0],
        latency=latency, histogram=bins,
        per_second=[_second(m) for m in _SECOND.findall(text)],
    )  # fmt: skip


def _second(m: tuple[str, ...]) -> Second:
    """One `[ Ns ]` line's fields (m[7] is the percentile its latency is at)."""
    tps, qps, reads, writes, other = (float(v) for v in m[2:7])
    return Second(int(m[0]), int(m[1]), tps, qps, reads, writes, other, float(m[8]),
                  float(m[9]), float(m[10]))  # fmt: skip


def percentiles(bins: list[tuple[float, int]]) -> dict[str, float]:
    """p50 .. p99.9 from sysbench's histogram: the smallest bin value at or above which
    that share of the events lies (sysbench's own percentile rule, on its bins)."""
    total = sum(c for _, c in bins)
    if not total:
        return {}
    out = {}
    for pct in PERCENTILES:
        need, seen = total * pct / 100, 0
        for value, count in sorted(bins):
            seen += count
            if seen >= need:
                out[f"p{pct:g}"] = value
                break
    return out
