"""The results database and its writer: one SQLite file per results folder, written one
transaction per trial, so a crash or `kill -9` loses at most the trial in progress. The
schema carries a version (PRAGMA user_version) and is brought up to date by the migrations
in store.schema. Reports read through store.results, never with SQL of their own."""

from __future__ import annotations

import gzip
import json
import os
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import PgsweepError
from .schema import MIGRATIONS, SCHEMA_VERSION

# keys of txlog.Reduction.seconds, in the order of the `second` table's columns
SECOND_COLUMNS = (
    "second", "tps", "failed", "skipped", "latency_mean", "latency_p50", "latency_p90",
    "latency_p99", "latency_max", "lag_mean",
)  # fmt: skip


@dataclass
class TrialRecord:
    id: str
    ord: int
    round: int
    config_id: str
    status: str
    started_at: str
    finished_at: str
    reason: str | None = None
    log_tail: str | None = None
    warmup_s: int | None = None
    duration_s: int | None = None
    tps: float | None = None
    transactions: int | None = None
    failed_transactions: int | None = None
    latency_avg_ms: float | None = None
    latency_stddev_ms: float | None = None
    events: list[str] = field(default_factory=list)
    effective: dict[str, str] = field(default_factory=dict)
    server_started_at: str | None = None
    pgbench_argv: str | None = None
    host_group: str | None = None  # the group that ran it, in a sharded run
    shard: int | None = None
    samples: list[
        tuple[float, float, float | None, float | None, int | None, float | None, int | None]
    ] = field(default_factory=list)
    artifacts: dict[str, bytes] = field(default_factory=dict)  # name -> raw bytes
    counters: dict[str, float] = field(default_factory=dict)  # deltas over the window
    metrics: dict[str, float] = field(default_factory=dict)  # derived, see collect.metrics
    seconds: list[dict[str, float]] = field(default_factory=list)  # from the transaction log
    latency_bins: list[tuple[float, float, int]] = field(default_factory=list)
    load: dict[str, dict[str, float]] = field(default_factory=dict)  # cluster -> counters
    environment: dict[str, dict[str, str]] = field(default_factory=dict)  # scope -> values
    # (standby, second, state, sync_state, lags in ms, bytes behind): see collect.replication
    standby_seconds: list[tuple[Any, ...]] = field(default_factory=list)
    # (process type, wait class, wait event, average sessions): see collect.waits
    waits: list[tuple[str, str, str, float]] = field(default_factory=list)
    # (process type, processes, user_s, system_s, switches, faults): see collect.processes
    processes: list[tuple[Any, ...]] = field(default_factory=list)
    # (device, second, reads_s, ..., writeback_kb): see collect.device_series
    device_seconds: list[tuple[Any, ...]] = field(default_factory=list)
    tool_seconds: list[tuple[int, str, float]] = field(default_factory=list)  # second, name, value


@dataclass(frozen=True)
class Peek:
    """How far a run is, as a reader that changes nothing sees it (store.peek)."""

    trials: int  # recorded, ok or failed
    configurations: int
    rounds: int  # the plan's, or its shard's
    created_at: str


def peek(path: Path) -> Peek | None:
    """A look at a results.db another process may be writing: opened read-only (no
    migration, no journal rolled back), None while it is not readable yet or is locked."""
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=1.0)
    except sqlite3.Error:
        return None
    try:
        (trials,) = db.execute("SELECT count(*) FROM trial").fetchone()
        (configs,) = db.execute("SELECT count(*) FROM configuration").fetchone()
        plan, created = db.execute("SELECT plan_json, created_at FROM experiment").fetchone()
        spans = db.execute("SELECT value FROM environment WHERE scope = 'fleet' "
                           "AND name = 'rounds'").fetchone()  # fmt: skip
    except (sqlite3.Error, TypeError):
        return None
    finally:
        db.close()
    from ..plan import parse_spans

    rounds = len(parse_spans(spans[0])) if spans else int(json.loads(plan)["rounds"])
    return Peek(int(trials), int(configs), rounds, str(created))


def newer_schema(path: Path, version: int) -> PgsweepError:
    """The writer and the reader refuse a newer schema with the same words: columns this
    pgsweep does not know could change what a report means."""
    return PgsweepError(
        f"{path} was written by a newer pgsweep (schema {version}, this one "
        f"knows {SCHEMA_VERSION})",
        fix="upgrade pgsweep to read these results",
    )


# The last 8 bytes of a rollback journal that names a super-journal (SQLite's pager:
# writeSuperJournal). SQLite deletes that file, any path, after rolling the journal back.
_JOURNAL_MAGIC = bytes.fromhex("d9d505f920a163d7")


def check_journal(path: Path) -> None:
    """A hot journal beside results.db is rolled back when the database opens for writing.
    SQLite then deletes the super-journal the journal names, whatever path that is (a
    planted journal naming /etc/shadow deletes it, as root). pgsweep never attaches a
    second database, so its journals never name one: a journal that does was not written
    by pgsweep, and the folder is refused before SQLite sees it."""
    journal = Path(f"{path}-journal")
    try:
        fd = os.open(journal, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise PgsweepError(
            f"{journal} cannot be opened: {exc.strerror}",
            where=str(journal),
            fix="remove it if no run is writing to this folder",
        ) from None
    try:
        size = os.fstat(fd).st_size
        tail = os.pread(fd, 8, size - 8) if size >= 16 else b""
    finally:
        os.close(fd)
    if tail == _JOURNAL_MAGIC:
        raise PgsweepError(
            f"{journal} names a super-journal, which SQLite would delete on rollback: "
            "pgsweep never writes such a journal, so this one is not a run's",
            where=str(journal),
            fix="move that journal out of the folder: the database then stays as it is "
            "(a trial that was being written may look damaged)",
        )  # fmt: skip


class Store:
    """The writer. `rows` and `experiment` serve the run loop (resume checks, the count of
    failed trials); everything that reports reads goes through store.results.Results."""

    def __init__(self, path: Path) -> None:
        self.path = path
        check_journal(path)
        self.db = sqlite3.connect(path, isolation_level=None)
        self.db.execute("PRAGMA synchronous = FULL")
        self.db.execute("PRAGMA foreign_keys = ON")
        self._migrate()

    def close(self) -> None:
        self.db.close()

    def _migrate(self) -> None:
        version = self.db.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise newer_schema(self.path, version)
        for number in range(version, SCHEMA_VERSION):
            self.db.execute("BEGIN IMMEDIATE")
            # statement by statement: executescript would COMMIT half a migration
            for statement in MIGRATIONS[number].split(";"):
                if statement.strip():
                    self.db.execute(statement)
            self.db.execute(f"PRAGMA user_version = {number + 1}")
            self.db.execute("COMMIT")

    # ---- writing --------------------------------------------------------------------
    def write_experiment(
        self, row: dict[str, Any], configs: list[tuple[str, str, str, int]]
    ) -> None:
        with self.db:
            self.db.execute("BEGIN")
            cols = ", ".join(row)
            self.db.execute(
                f"INSERT INTO experiment (id, {cols}) VALUES (1, {', '.join('?' * len(row))})",
                list(row.values()),
            )
            self.db.executemany("INSERT INTO configuration VALUES (?, ?, ?, ?)", configs)

    def save_trial(self, t: TrialRecord) -> None:
        """Everything of one trial in one transaction: all of it is stored, or none."""
        cols = [
            "id",
            "ord",
            "round",
            "config_id",
            "status",
            "reason",
            "log_tail",
            "started_at",
            "finished_at",
            "warmup_s",
            "duration_s",
            "tps",
            "transactions",
            "failed_transactions",
            "latency_avg_ms",
            "latency_stddev_ms",
            "server_started_at",
            "pgbench_argv",
            "host_group",
            "shard",
        ]
        values = [getattr(t, c) for c in cols]
        cols += ["events_json", "effective_json"]
        values += [json.dumps(t.events), json.dumps(t.effective, sort_keys=True)]
        self.db.execute("BEGIN IMMEDIATE")
        try:
            self.db.execute(
                f"INSERT INTO trial ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                values,
            )
            self.db.executemany(
                "INSERT INTO sample VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [(t.id, *s) for s in t.samples],
            )
            self.db.executemany(
                "INSERT INTO counter VALUES (?, ?, ?)",
                [(t.id, n, v) for n, v in t.counters.items()],
            )
            self.db.executemany(
                "INSERT INTO metric VALUES (?, ?, ?)",
                [(t.id, n, v) for n, v in t.metrics.items()],
            )
            self.db.executemany(
                f"INSERT INTO second VALUES ({', '.join('?' * 11)})",
                [(t.id, *(s.get(k) for k in SECOND_COLUMNS)) for s in t.seconds],
            )
            self.db.executemany(
                f"INSERT INTO standby_second VALUES ({', '.join('?' * 12)})",
                [(t.id, *s) for s in t.standby_seconds],
            )
            self.db.executemany("INSERT INTO wait VALUES (?, ?, ?, ?, ?)",
                                [(t.id, *w) for w in t.waits])  # fmt: skip
            self.db.executemany(f"INSERT INTO device_second VALUES ({', '.join('?' * 12)})",
                                [(t.id, *d) for d in t.device_seconds])  # fmt: skip
            self.db.executemany("INSERT INTO tool_second VALUES (?, ?, ?, ?)",
                                [(t.id, *x) for x in t.tool_seconds])  # fmt: skip
            self.db.executemany(
                f"INSERT INTO process_cpu VALUES ({', '.join('?' * 9)})",
                [(t.id, *p[:2], *(None if v != v else v for v in p[2:])) for p in t.processes],
            )  # NaN (a figure /proc does not keep) is stored as NULL
            self.db.executemany(
                "INSERT INTO latency_bin VALUES (?, ?, ?, ?)",
                [(t.id, *b) for b in t.latency_bins],
            )
            self.db.executemany(
                "INSERT OR REPLACE INTO load_counter VALUES (?, ?, ?)",
                [(c, n, v) for c, values in t.load.items() for n, v in values.items()],
            )
            for scope, facts in t.environment.items():
                self._put_environment(scope, facts)
            self.db.executemany(
                "INSERT INTO artifact VALUES (?, ?, ?)",
                [(t.id, n, gzip.compress(b)) for n, b in t.artifacts.items()],
            )
            self.db.execute("COMMIT")
        except BaseException:
            self.db.execute("ROLLBACK")
            raise

    def _put_environment(self, scope: str, values: dict[str, str]) -> None:
        self.db.executemany(
            "INSERT OR REPLACE INTO environment VALUES (?, ?, ?)",
            [(scope, k, v) for k, v in values.items()],
        )

    def save_environment(self, scope: str, values: dict[str, str]) -> None:
        self.db.execute("BEGIN IMMEDIATE")
        self._put_environment(scope, values)
        self.db.execute("COMMIT")

    def environment_value(self, scope: str, name: str) -> str | None:
        row = self.db.execute("SELECT value FROM environment WHERE scope = ? AND name = ?",
                              (scope, name)).fetchone()  # fmt: skip
        return None if row is None else str(row[0])

    def has_environment(self, scope: str) -> bool:
        return (
            self.db.execute(
                "SELECT 1 FROM environment WHERE scope = ? LIMIT 1", (scope,)
            ).fetchone()
            is not None
        )

    # ---- reading --------------------------------------------------------------------
    def experiment(self) -> dict[str, Any] | None:
        cur = self.db.execute("SELECT * FROM experiment")
        row = cur.fetchone()
        return dict(zip([d[0] for d in cur.description], row, strict=True)) if row else None

    def done_trials(self) -> set[str]:
        return {r[0] for r in self.db.execute("SELECT id FROM trial")}

    def failed_count(self) -> int:
        return int(self.db.execute("SELECT count(*) FROM trial WHERE status = 'failed'")
                   .fetchone()[0])  # fmt: skip

    def environment_scopes(self) -> set[str]:
        """Scopes recorded so far ("host", "cluster-N", configuration ids)."""
        return {r[0] for r in self.db.execute("SELECT DISTINCT scope FROM environment")}

    def artifact(self, trial_id: str, name: str) -> bytes | None:
        row = self.db.execute(
            "SELECT gz FROM artifact WHERE trial_id = ? AND name = ?", (trial_id, name)
        ).fetchone()
        return gzip.decompress(row[0]) if row else None
