"""sysbench (1.0, its PostgreSQL driver): the command lines of a workload, and its output
read into pgsweep's names.

A run with `--report-interval=1 --histogram=on` prints one line per second, the latency
histogram, then its summary. Parsed here: transactions and queries per second, errors
and reconnects (counts and rates), latency min/avg/max and the percentile asked for, the
percentiles pgsweep reports computed from the histogram, and the per-second series. The
forms are those of output captured from real runs (tests/data/sysbench/)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

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
PACKAGE = "sysbench"  # Debian's package; its PostgreSQL driver is compiled in
SCRIPTS = Path("/usr/share/sysbench")  # where Debian's package keeps its Lua tests
# The tests that share oltp_common.lua's tables (sbtest1..N, `prepare` makes them), so one
# loaded cluster serves any of them: test -> whether it changes data. A test is named, never
# given as a path: sysbench runs a name that holds a path as a Lua script of its own.
TESTS = {
    "oltp_read_write": True, "oltp_read_only": False, "oltp_point_select": False,
    "oltp_update_index": True, "oltp_update_non_index": True, "oltp_write_only": True,
    "oltp_insert": True, "oltp_delete": True,
}  # fmt: skip


@dataclass(frozen=True)
class Workload:
    """One configuration's sysbench run: `test` on `tables` tables of `table_size` rows;
    `clients` threads for `seconds`; `rate` transactions/s in all (None: as fast as it
    goes)."""

    test: str
    tables: int
    table_size: int
    clients: int
    seconds: int
    rate: float | None = None

    def common(self, sysbench: str, conn: list[str]) -> list[str]:
        return [sysbench, self.test, "--db-driver=pgsql", *conn, "--pgsql-db=postgres",
                f"--tables={self.tables}", f"--table-size={self.table_size}"]  # fmt: skip

    def prepare_argv(self, sysbench: str, conn: list[str]) -> list[str]:
        """The load phase: the tables and their rows, with the secondary indexes."""
        return [*self.common(sysbench, conn), "prepare"]

    def argv(self, sysbench: str, conn: list[str], *, seconds: int) -> list[str]:
        """A run: one report a second, the latency histogram, the 99th percentile per
        second, no time limit of its own beyond `seconds` (the run's timeout is pgsweep's)."""
        argv = self.common(sysbench, conn)
        argv += [f"--threads={self.clients}", f"--time={seconds}", "--report-interval=1",
                 "--histogram=on", "--percentile=99"]  # fmt: skip
        if self.rate is not None:
            argv.append(f"--rate={max(1, round(self.rate))}")
        return [*argv, "run"]


def conn_args(pgbench_conn: list[str]) -> list[str]:
    """pgbench's connection arguments (-h HOST -p PORT -U USER) as sysbench's."""
    names = {"-h": "--pgsql-host", "-p": "--pgsql-port", "-U": "--pgsql-user"}
    pairs = zip(pgbench_conn[::2], pgbench_conn[1::2], strict=True)
    return [f"{names[flag]}={value}" for flag, value in pairs]


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
        """The trial's metrics under pgbench's names where they mean the same (tx.ok,
        latency.*_ms), sysbench's own beside them (qps, queries, errors, reconnects). An
        error sysbench counts ("ignored errors": a deadlock, a unique violation) rolled the
        transaction back and began it again: pgbench's retries (tx.retries), not a failed
        transaction; an error it does not ignore ends the run, which fails the trial."""
        out = {"tx.ok": float(self.transactions), "tx.failed": 0.0,
               "tx.retries": float(self.errors), "sysbench.qps": self.qps,
               "sysbench.queries": float(self.queries), "sysbench.errors": float(self.errors),
               "sysbench.errors_per_s": self.errors / self.seconds if self.seconds else 0.0,
               "sysbench.reconnects": float(self.reconnects)}  # fmt: skip
        out.update({f"latency.{'mean' if k == 'avg' else k}_ms": v
                    for k, v in self.latency.items()})  # fmt: skip
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
    if "max" in latency:  # a bin's value may lie above the slowest event (its own p99 too)
        latency.update({k: min(v, latency["max"]) for k, v in latency.items()
                        if k.startswith("p")})  # fmt: skip
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
