"""Replication lag during the measured window: once a second, every standby's row of the
primary's pg_stat_replication (state, sync state, write/flush/replay lag, and the bytes
each position is behind the primary's current WAL position); before and after the window,
each standby's recovery conflicts. A standby that stops streaming, or whose replay falls
further behind than the limit, makes the trial fail with the second it happened."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any

from ..collect import environment
from ..postgres.cluster import Cluster
from ..store import TrialRecord
from .context import TrialContext, TrialFailure

SAMPLE = """
SELECT application_name, state, sync_state,
       extract(epoch FROM write_lag) * 1000, extract(epoch FROM flush_lag) * 1000,
       extract(epoch FROM replay_lag) * 1000,
       pg_wal_lsn_diff(pg_current_wal_lsn(), sent_lsn),
       pg_wal_lsn_diff(pg_current_wal_lsn(), write_lsn),
       pg_wal_lsn_diff(pg_current_wal_lsn(), flush_lsn),
       pg_wal_lsn_diff(pg_current_wal_lsn(), replay_lsn)
FROM pg_stat_replication
"""
CONFLICTS = """
SELECT coalesce(sum(confl_tablespace + confl_lock + confl_snapshot + confl_bufferpin
                    + confl_deadlock), 0)
FROM pg_stat_database_conflicts
"""
# columns of a stored second, after (standby, second)
COLUMNS = ("state", "sync_state", "write_lag_ms", "flush_lag_ms", "replay_lag_ms",
           "sent_bytes_behind", "write_bytes_behind", "flush_bytes_behind",
           "replay_bytes_behind")  # fmt: skip
NOT_STREAMING_LIMIT = 3  # consecutive seconds a standby may be missing before the trial fails


class LagSampler:
    """A Watcher (see layers.context): samples on a thread of its own, with its own
    connection to the primary, while pgbench runs."""

    def __init__(self, primary: Cluster, standbys: Mapping[str, Cluster], max_lag_s: float) -> None:
        self.primary = primary
        self.standbys = standbys  # name -> its cluster
        self.max_lag_s = max_lag_s
        self.rows: list[tuple[Any, ...]] = []  # (standby, second, *COLUMNS)
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._conflicts: dict[str, float] = {}

    def begin(self, trial: TrialContext) -> None:
        self._conflicts = {name: _conflicts(c) for name, c in self.standbys.items()}
        self._thread = threading.Thread(target=self._loop, name="lag-sampler", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        try:
            with self.primary.connect() as conn:
                started = time.monotonic()
                second = 0
                while not self._stop.wait(max(0.0, started + second + 1 - time.monotonic())):
                    second += 1
                    rows = _ours(conn.execute(SAMPLE).fetchall(), self.standbys)
                    if self._stop.is_set():
                        break  # end() has taken the rows: append nothing after
                    self.rows += [(name, second, *_floats(r[1:])) for name, r in rows.items()]
        except Exception as exc:  # reported by end(), in the trial's thread
            self.error = exc

    def end(self, trial: TrialContext, record: TrialRecord, abort: bool = False) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        if abort:
            return
        if self.error is not None:
            raise TrialFailure(lost_first(self.standbys.values(),
                                          f"sampling pg_stat_replication failed: {self.error}"))
        record.standby_seconds = list(self.rows)
        for name, cluster in self.standbys.items():  # every node's environment, not only
            with cluster.connect() as conn:  # the primary's: scope "c01.s1"
                record.environment[f"{record.config_id}.{name}"] = environment.settings(conn)
        conflicts = sum(_conflicts(c) - self._conflicts.get(n, 0.0)
                        for n, c in self.standbys.items())  # fmt: skip
        record.metrics.update(summarize(self.rows, list(self.standbys)))
        record.metrics["replication.conflicts"] = conflicts
        try:
            self.check()
        except TrialFailure as exc:  # a standby's host lost meanwhile is why: named first
            raise TrialFailure(lost_first(self.standbys.values(), str(exc))) from None

    def check(self) -> None:
        """TrialFailure when a standby stopped streaming or fell too far behind."""
        by_standby: dict[str, dict[int, Any]] = {n: {} for n in self.standbys}
        for row in self.rows:
            by_standby.setdefault(row[0], {})[row[1]] = row
        last = max((r[1] for r in self.rows), default=0)
        for name, seen in by_standby.items():
            missing = 0
            for second in range(1, last + 1):
                got = seen.get(second)
                missing = missing + 1 if got is None or got[2] != "streaming" else 0
                if missing >= NOT_STREAMING_LIMIT:
                    raise TrialFailure(
                        f"standby {name} stopped streaming in second {second - missing + 1} "
                        f"of the window (state {got[2] if got else 'gone'})"
                    )
                lag = got[6] if got is not None else None
                if lag is not None and lag > self.max_lag_s * 1000:
                    raise TrialFailure(
                        f"standby {name} fell {lag / 1000:.1f} s behind in second {second} "
                        f"(replication.max_lag = {self.max_lag_s:g} s)"
                    )


def summarize(rows: list[tuple[Any, ...]], names: list[str]) -> dict[str, float]:
    """Per-trial figures over every standby's seconds: mean and max of each lag (a lag
    PostgreSQL shows as NULL, caught up and idle, counts as 0), and the share of seconds a
    standby was synchronous."""
    out: dict[str, float] = {}
    if not rows:
        return out
    for i, column in enumerate(COLUMNS[2:], start=4):
        values = [float(r[i]) if r[i] is not None else 0.0 for r in rows]
        out[f"replication.{column}_mean"] = sum(values) / len(values)
        out[f"replication.{column}_max"] = max(values)
    out["replication.sync_share"] = sum(r[3] in ("sync", "quorum") for r in rows) / len(rows)
    out["replication.standbys_seen"] = float(len({r[0] for r in rows} & set(names)))
    return out


def _ours(rows: list[tuple[Any, ...]], names: Mapping[str, Any]) -> dict[str, tuple[Any, ...]]:
    """One row per standby of this set: another walsender (a standby reconnecting while
    its old walsender exits, or anyone's connection named like one) is not sampled; of two
    rows of one name, the streaming one."""
    out: dict[str, tuple[Any, ...]] = {}
    for row in rows:
        name = str(row[0])
        if name in names and (name not in out or out[name][1] != "streaming"):
            out[name] = row
    return out


def _floats(values: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(v if isinstance(v, str) or v is None else float(v) for v in values)


def _conflicts(cluster: Cluster) -> float:
    with cluster.connect() as conn:
        row = conn.execute(CONFLICTS).fetchone()
    return float(row[0]) if row else 0.0


def lost_first(standbys: Iterable[Cluster], why: str) -> str:
    """`why`, led by the standby host whose connection broke meanwhile, if one did: its
    agent took its standbys down as it ended, and that is why they do not stream (a
    loaded machine notices the missing standbys before the lost connection)."""
    lost = sorted({s.host.name for s in standbys if not s.host.alive()})
    return f"host {lost[0]} (a standby's) was lost: {why}" if lost else why
