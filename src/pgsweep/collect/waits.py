"""Where sessions waited during the measured window: a connection of its own samples
pg_stat_activity SAMPLE_HZ times a second (every backend and auxiliary process but
itself) and counts each (process type, wait class, wait event); divided by the number of
samples that is the average number of sessions in that state (average active sessions,
AAS). A process running without a wait event is on CPU ("CPU", "CPU"); an idle client
backend waits for its client ("Client", "ClientRead"), as PostgreSQL shows it.

Each sample is its own statement on an autocommit connection, so pg_stat_activity is read
afresh every time (inside one transaction PostgreSQL would repeat its first snapshot)."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from ..host.api import Connection

SAMPLE_HZ = 20.0  # at least 10 (issue 26); a sample costs a few hundred microseconds
SAMPLE = """
SELECT coalesce(backend_type, 'unknown'), state, wait_event_type, wait_event, pid
FROM pg_stat_activity WHERE pid <> pg_backend_pid()
"""
Key = tuple[str, str, str]  # (backend type, wait class, wait event)


def classify(row: tuple[Any, ...]) -> Key:
    """One pg_stat_activity row as (process type, wait class, wait event)."""
    backend, state, kind, event = (None if v is None else str(v) for v in row[:4])
    if kind is None or event is None:
        if state not in (None, "active", "fastpath function call"):
            return (backend or "unknown", "Idle", state)  # idle without a wait event
        return (backend or "unknown", "CPU", "CPU")
    return (backend or "unknown", kind, event)


def profile(counts: Counter[Key], samples: int) -> list[tuple[str, str, str, float]]:
    """(process type, wait class, wait event, average sessions), by type then sessions."""
    if samples <= 0:
        return []
    rows = [(*k, n / samples) for k, n in counts.items()]
    return sorted(rows, key=lambda r: (r[0], -r[3], r[1], r[2]))


class WaitSampler:
    """Samples on a thread of its own until stopped; `connect` opens its connection (a
    Cluster's, through the Host). What went wrong stays in `error` (explain collection
    never fails a trial: the trial's figures stand without it)."""

    def __init__(self, connect: Callable[[], AbstractContextManager[Connection]],
                 hz: float = SAMPLE_HZ, tick: Callable[[], None] | None = None,
                 tick_every: int = 4) -> None:  # fmt: skip
        self.connect = connect
        self.tick, self.tick_every = tick, tick_every  # also run every N samples, here
        self.period = 1.0 / hz
        self.counts: Counter[Key] = Counter()
        self.types: dict[int, str] = {}  # pid -> process type, of every process seen
        self.seen: Counter[int] = Counter()  # pid -> the samples it was in
        self.samples = 0
        self.seconds = 0.0  # from the first sample to the last
        self.pid: int | None = None  # the sampling backend's pid (not a process to count)
        self.native_id: int | None = None  # the sampling thread's (its CPU is the cost here)
        self.error: BaseException | None = None
        self._ready = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="wait-sampler", daemon=True)
        self._thread.start()
        self._ready.wait(timeout=15)  # connected (or failed): its pid is known from here

    def _loop(self) -> None:
        self.native_id = threading.get_native_id()
        try:
            with self.connect() as conn:
                row = conn.execute("SELECT pg_backend_pid()").fetchone()
                self.pid = int(row[0]) if row else None
                self._ready.set()
                began = time.monotonic()
                n = 0
                while not self._stop.is_set():
                    rows = conn.execute(SAMPLE).fetchall()
                    if self._stop.is_set():
                        break  # stop() has taken the counts: add nothing after
                    self.counts.update(classify(r) for r in rows)
                    self.types.update((int(r[4]), str(r[0] or "unknown")) for r in rows)
                    self.seen.update(int(r[4]) for r in rows)
                    self.samples += 1
                    self.seconds = time.monotonic() - began
                    n += 1
                    if self.tick is not None and n % self.tick_every == 0:
                        self.tick()
                    self._stop.wait(max(0.0, began + n * self.period - time.monotonic()))
        except Exception as exc:
            self.error = exc
        finally:
            self._ready.set()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def rate(self) -> float:
        """Samples a second actually taken."""
        return (self.samples - 1) / self.seconds if self.samples > 1 and self.seconds else 0.0
