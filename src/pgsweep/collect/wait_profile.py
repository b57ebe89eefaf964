"""Where sessions waited, from pg_wait_sampling (issue 26) when the server preloads it
(`shared_preload_libraries = "pg_wait_sampling"`, Debian's postgresql-15-pg-wait-sampling):
its collector samples every process's wait event each `pg_wait_sampling.profile_period`
(10 ms by default: 100 a second, five times pgsweep's own sampler, and inside the server,
with no query per sample). pgsweep creates the extension in its own cluster, resets the
profile as the window begins and reads it, per process, as it ends; each process's type
comes from pgsweep's own pg_stat_activity sampler (which runs beside it: the types, and
the profile when the library is not there).

pg_wait_sampling 1.1 (Debian 12's) records a process only while it waits: its time on
CPU is what is left of its time in the window (the share of pgsweep's samples it was
in) after its samples in a wait state, as "CPU" (collect.waits's name for it)."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from .statements import preloaded

LIBRARY = "pg_wait_sampling"
PROFILE = """
SELECT pid, event_type, event, sum(count) FROM pg_wait_sampling_profile GROUP BY 1, 2, 3
"""


def start(conn: Any) -> float | None:
    """The profile emptied for the window; its sampling period in ms (None: the server
    does not preload the library, or profiles no process by its pid)."""
    if not preloaded(conn, LIBRARY):
        return None
    conn.execute(f"CREATE EXTENSION IF NOT EXISTS {LIBRARY}")
    row = conn.execute("SELECT current_setting('pg_wait_sampling.profile_period'), "
                       "current_setting('pg_wait_sampling.profile_pid')").fetchone()  # fmt: skip
    if row is None or str(row[1]) != "on":
        return None
    conn.execute("SELECT pg_wait_sampling_reset_profile()")
    return float(str(row[0]).removesuffix("ms"))


def read(conn: Any, types: Mapping[int, str], present: Mapping[int, float],
         skip: Collection[int], seconds: float,
         period_ms: float) -> tuple[list[tuple[str, str, str, float]], float]:  # fmt: skip
    """(process type, wait class, wait event, average sessions) over the window, and the
    samples one process had in it; `present`: pid -> the share of the window pgsweep's
    sampler saw it in. A process pgsweep's sampler never saw is "unknown"."""
    per_process = seconds * 1000.0 / period_ms
    if per_process <= 0:
        return [], 0.0
    counts: dict[tuple[str, str, str], float] = {}
    waited: dict[int, float] = {}
    for pid, kind, event, n in conn.execute(PROFILE).fetchall():
        if int(pid) in skip or not n:
            continue
        on_cpu = kind is None or event is None  # a later version's CPU samples
        state = ("CPU", "CPU") if on_cpu else (str(kind), str(event))
        key = (types.get(int(pid), "unknown"), *state)
        counts[key] = counts.get(key, 0.0) + float(n)
        waited[int(pid)] = waited.get(int(pid), 0.0) + float(n)
    for pid, share in present.items():  # the rest of a process's time: on CPU
        if pid in skip:
            continue
        cpu = share * per_process - waited.get(pid, 0.0)
        if cpu > 0:
            key = (types.get(pid, "unknown"), "CPU", "CPU")
            counts[key] = counts.get(key, 0.0) + cpu
    rows = [(*k, n / per_process) for k, n in counts.items()]
    return sorted(rows, key=lambda r: (r[0], -r[3], r[1], r[2])), per_process
