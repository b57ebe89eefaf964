"""pgbench: the command line for a workload, and parsers for its summary (stdout) and its
per-second progress lines (stderr). Parsers fail loudly, quoting the line they could not
read, rather than store a wrong number."""

from __future__ import annotations

import re
from dataclasses import dataclass

BUILTIN_SCRIPTS = ("tpcb-like", "simple-update", "select-only")


class ParseError(Exception):
    pass


@dataclass(frozen=True)
class Workload:
    script: str  # a builtin name or a path to a custom .sql file
    clients: int
    jobs: int
    seconds: int
    protocol: str = "simple"
    rate: float | None = None
    latency_limit_ms: float | None = None
    max_tries: int = 1

    def argv(
        self,
        pgbench: str,
        conn: list[str],
        *,
        seconds: int,
        vacuum: bool,
        log_prefix: str | None = None,
        sampling_rate: float = 1.0,
    ) -> list[str]:
        """The command line; with log_prefix, per-transaction logging (-l), sampled below 1."""
        argv = [pgbench, *conn]
        argv += ["-b", self.script] if self.builtin else ["-f", self.script]
        # pgbench spreads clients over threads; more threads than clients is an error.
        argv += ["-c", str(self.clients), "-j", str(min(self.jobs, self.clients))]
        argv += ["-T", str(seconds), "-P", "1", "-M", self.protocol]
        if self.rate is not None:
            argv += ["-R", f"{self.rate:g}"]
        if self.latency_limit_ms is not None:
            argv += ["-L", f"{self.latency_limit_ms:g}"]
        if self.max_tries != 1:
            argv += ["--max-tries", str(self.max_tries)]
        if log_prefix is not None:
            argv += ["-l", f"--log-prefix={log_prefix}"]
            if sampling_rate < 1:
                argv.append(f"--sampling-rate={sampling_rate:g}")
        if not vacuum or not self.builtin:
            argv.append("-n")
        argv.append("postgres")
        return argv

    @property
    def builtin(self) -> bool:
        return self.script in BUILTIN_SCRIPTS


@dataclass
class Summary:
    tps: float
    transactions: int
    failed: int
    latency_avg_ms: float | None
    latency_stddev_ms: float | None
    initial_connection_ms: float | None
    version: str | None
    skipped: int = 0
    retried: int = 0
    retries: int = 0
    late: int = 0  # above the -L latency limit (without -R)
    lag_avg_ms: float | None = None
    lag_max_ms: float | None = None


_NUM = r"([-+]?\d+(?:\.\d+)?|NaN|nan|inf)"
_SUMMARY_PATTERNS = {
    "version": re.compile(r"^pgbench \(([^)\s]+)"),
    "transactions": re.compile(r"^number of transactions actually processed: (\d+)"),
    "failed": re.compile(r"^number of failed transactions: (\d+)"),
    "skipped": re.compile(r"^number of transactions skipped: (\d+)"),
    "retried": re.compile(r"^number of transactions retried: (\d+)"),
    "retries": re.compile(r"^total number of retries: (\d+)"),
    "late": re.compile(r"^number of transactions above the [\d.]+ ms latency limit: (\d+)"),
    "lag": re.compile(rf"^rate limit schedule lag: avg {_NUM} \(max {_NUM}\) ms"),
    "latency_avg_ms": re.compile(rf"^latency average = {_NUM} ms"),
    "latency_stddev_ms": re.compile(rf"^latency stddev = {_NUM} ms"),
    "initial_connection_ms": re.compile(rf"^initial connection time = {_NUM} ms"),
    # PG 14+: one line "(without initial connection time)"; PG 13 and older printed two
    # lines, "including" and "excluding connections establishing": take "excluding".
    "tps": re.compile(
        rf"^tps = {_NUM} \((?:without initial connection time|excluding connections establishing)\)"
    ),
}


# Lines that carry a number pgsweep stores: one that starts like these but matches no
# pattern above is a form this parser does not know, and fails rather than go unread.
_MUST_MATCH = (
    "tps = ",
    "latency average",
    "number of transactions actually processed",
    "number of failed transactions",
)
_PG13_INCLUDING = re.compile(rf"^tps = {_NUM} \(including connections establishing\)$")


def parse_summary(stdout: str) -> Summary:
    found: dict[str, str] = {}
    for number, line in enumerate(stdout.splitlines(), start=1):
        if (
            line.startswith(_MUST_MATCH)
            and not _PG13_INCLUDING.match(line)
            and not any(p.match(line) for p in _SUMMARY_PATTERNS.values())
        ):
            raise ParseError(f"line {number} of pgbench's summary is not understood: {line!r}")
        for key, pattern in _SUMMARY_PATTERNS.items():
            m = pattern.match(line)
            if m and key not in found:
                found[key] = m.group(1)
                if key == "lag":
                    found["lag_max"] = m.group(2)
    if "tps" not in found or "transactions" not in found:
        tail = "\n".join(stdout.strip().splitlines()[-5:]) or "(empty output)"
        raise ParseError(f"pgbench printed no tps/transactions summary; its output ended:\n{tail}")

    def num(key: str) -> float | None:
        return float(found[key]) if key in found else None

    return Summary(
        tps=float(found["tps"]),
        transactions=int(found["transactions"]),
        failed=int(found.get("failed", 0)),
        skipped=int(found.get("skipped", 0)),
        retried=int(found.get("retried", 0)),
        retries=int(found.get("retries", 0)),
        late=int(found.get("late", 0)),
        lag_avg_ms=num("lag"),
        lag_max_ms=num("lag_max"),
        latency_avg_ms=num("latency_avg_ms"),
        latency_stddev_ms=num("latency_stddev_ms"),
        initial_connection_ms=num("initial_connection_ms"),
        version=found.get("version"),
    )


@dataclass(frozen=True)
class Progress:
    at: float  # seconds since the run started
    tps: float
    latency_ms: float
    stddev_ms: float | None
    failed: int | None
    lag_ms: float | None
    skipped: int | None
    retried: int | None = None
    retries: int | None = None


_PROGRESS = re.compile(
    rf"^progress: {_NUM} s, {_NUM} tps, lat {_NUM} ms stddev {_NUM}"
    rf"(?:, (\d+) failed)?(?:, lag {_NUM} ms)?(?:, (\d+) skipped)?"
    r"(?:, (\d+) retried, (\d+) retries)?\s*$"
)


def parse_progress(stderr: str) -> list[Progress]:
    """Per-second progress lines (-P 1). A line that starts like one but does not parse is
    an error: a silently skipped second would bias every per-second statistic."""
    out: list[Progress] = []
    for number, line in enumerate(stderr.splitlines(), start=1):
        if not line.startswith("progress: "):
            continue
        m = _PROGRESS.match(line)
        if not m:
            raise ParseError(f"line {number} of pgbench's progress is not understood: {line!r}")
        at, tps, lat, sd, failed, lag, skipped, retried, retries = m.groups()
        out.append(
            Progress(
                at=float(at),
                tps=float(tps),
                latency_ms=float(lat),
                stddev_ms=float(sd) if sd not in (None, "NaN", "nan") else None,
                failed=int(failed) if failed is not None else None,
                lag_ms=float(lag) if lag is not None else None,
                skipped=int(skipped) if skipped is not None else None,
                retried=int(retried) if retried is not None else None,
                retries=int(retries) if retries is not None else None,
            )
        )
    return out


def writes(script: str, custom_sql: str | None) -> bool:
    """Whether a workload changes data (so each trial must start from the snapshot)."""
    if script in BUILTIN_SCRIPTS:
        return script != "select-only"
    keywords = (
        r"\b(insert|update|delete|merge|copy|create|drop|alter|truncate|vacuum|cluster"
        r"|reindex|call)\b"
    )
    return custom_sql is None or re.search(keywords, custom_sql, re.IGNORECASE) is not None
