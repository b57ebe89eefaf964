"""CPU by process type over the measured window, from /proc through the Host: user and
system time, voluntary and involuntary context switches, minor and major page faults of
the postmaster's children, each classified by the title PostgreSQL gives it (client
backend, walwriter, checkpointer, ...), and of the pgbench client (the times and faults
the process that ran and reaped it gained over the window: /proc/self/stat's cutime,
cstime, cminflt and cmajflt, read on the client's host; the kernel keeps no context
switches of reaped children there, so the client has none).

A process that exits inside the window (a backend whose client disconnected, an
autovacuum worker) is gone from /proc when the window closes; the postmaster's own
cutime/cstime/cminflt/cmajflt gain what it used when it is reaped, so those, less what the
gone processes had used before the window opened, are kept as type "exited"."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from ..host.api import Host

NAN = math.nan  # a figure /proc does not keep (context switches of reaped processes)
TICKS_PER_S = 100.0  # USER_HZ: the unit of /proc/PID/stat's times on every Linux port
# /proc/PID/stat fields after "(comm)", counted from 0 at the state letter
_MINFLT, _CMINFLT, _MAJFLT, _CMAJFLT, _UTIME, _STIME, _CUTIME, _CSTIME = 7, 8, 9, 10, 11, 12, 13, 14
_STARTTIME = 19
FIGURES = ("user_s", "system_s", "voluntary_switches", "involuntary_switches",
           "minor_faults", "major_faults")  # fmt: skip
# titles of PostgreSQL's own processes ("postgres: [cluster_name: ]TITLE ..."), longest
# first; every other child of the postmaster is a client backend
_TITLES = (
    ("autovacuum launcher", "autovacuum launcher"),
    ("autovacuum worker", "autovacuum worker"),
    ("logical replication launcher", "logical replication launcher"),
    ("logical replication", "logical replication worker"),
    ("background writer", "background writer"),
    ("checkpointer", "checkpointer"),
    ("walwriter", "walwriter"),
    ("walsender", "walsender"),
    ("walreceiver", "walreceiver"),
    ("walsummarizer", "walsummarizer"),
    ("archiver", "archiver"),
    ("stats collector", "stats collector"),
    ("startup", "startup"),
    ("parallel worker", "parallel worker"),
    ("io worker", "io worker"),
)


@dataclass(frozen=True)
class Usage:
    """One process's counters: FIGURES in their units (seconds, counts)."""

    kind: str
    started: int  # starttime in ticks since boot: a reused pid is another process
    values: tuple[float, ...]
    children: tuple[float, ...] = ()  # the reaped children's user_s, system_s, minor, major


@dataclass
class Snapshot:
    postmaster: Usage | None = None
    processes: dict[int, Usage] = field(default_factory=dict)
    client: tuple[float, ...] = ()  # reaped children of the client's runner


def classify(title: str) -> str:
    """The process type of a postmaster child, from its title (/proc/PID/cmdline)."""
    text = title.replace("\0", " ").strip()
    if not text.startswith("postgres:"):
        return "client backend"  # not retitled (yet): a backend being born
    rest = text[len("postgres:"):].strip()
    # "NAME: TITLE" with a cluster_name first (a cluster named "walwriter" has client
    # backends titled "postgres: walwriter: user db [local] idle"), else "TITLE"
    candidates = (rest.split(": ", 1)[1], rest) if ": " in rest else (rest,)
    for candidate in candidates:
        for prefix, kind in _TITLES:
            if candidate.startswith(prefix):
                return kind
        if len(candidates) == 2:
            return "client backend"  # after a cluster_name: no known title
    return "client backend"


def parse_stat(text: str) -> list[str]:
    """The fields of /proc/PID/stat after the command name (which may hold spaces)."""
    return text[text.rindex(")") + 2 :].split()


def usage(stat: str, status: str, kind: str) -> Usage:
    f = parse_stat(stat)
    switches = {k: float(v.split()[0]) for k, _, v in
                (line.partition(":") for line in status.splitlines())
                if k in ("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")}  # fmt: skip
    values = (float(f[_UTIME]) / TICKS_PER_S, float(f[_STIME]) / TICKS_PER_S,
              switches.get("voluntary_ctxt_switches", 0.0),
              switches.get("nonvoluntary_ctxt_switches", 0.0),
              float(f[_MINFLT]), float(f[_MAJFLT]))  # fmt: skip
    return Usage(kind, int(f[_STARTTIME]), values, reaped(stat))


def cpu_seconds(stat: str) -> float:
    """A process's (or thread's) user + system time so far, from its /proc stat."""
    f = parse_stat(stat)
    return (float(f[_UTIME]) + float(f[_STIME])) / TICKS_PER_S


def reaped(stat: str) -> tuple[float, ...]:
    """What a process's reaped children used: user_s, system_s, minor and major faults."""
    f = parse_stat(stat)
    return (float(f[_CUTIME]) / TICKS_PER_S, float(f[_CSTIME]) / TICKS_PER_S,
            float(f[_CMINFLT]), float(f[_CMAJFLT]))  # fmt: skip


def _read(texts: list[str | None]) -> Usage | None:
    """A process's usage from its cmdline, stat and status, None when it is gone (it may
    exit between reads)."""
    cmdline, stat, status = texts
    if cmdline is None or stat is None or status is None:
        return None
    try:
        return usage(stat, status, classify(cmdline))
    except Exception:  # half-written by a process exiting, or a remote host's word for it
        return None


def snapshot(host: Host, postmaster: int | None, client: Host | None,
             skip: frozenset[int] = frozenset()) -> Snapshot:  # fmt: skip
    """The postmaster's children (but `skip`: pgsweep's own sampling backend) and the
    client runner's reaped children, now: two reads of the host (one message each to a
    remote host's agent, sampled 5 times a second), whatever the number of processes."""
    snap = Snapshot()
    if postmaster is not None:
        base = Path(f"/proc/{postmaster}")
        stat, text = _texts(host, [base / "stat", base / "task" / str(postmaster) / "children"])
        snap.postmaster = None if stat is None else _postmaster(stat)
        pids = [int(p) for p in (text or "").split() if p.isdigit() and int(p) not in skip]
        paths = [Path(f"/proc/{pid}/{name}") for pid in pids
                 for name in ("cmdline", "stat", "status")]  # fmt: skip
        texts = _texts(host, paths)
        for i, pid in enumerate(pids):
            got = _read(texts[3 * i:3 * i + 3])
            if got is not None:
                snap.processes[pid] = got
    if client is not None:
        try:
            snap.client = reaped(client.read_text(Path("/proc/self/stat")))
        except Exception:
            snap.client = ()
    return snap


def _postmaster(stat: str) -> Usage | None:
    """What it reaped is all pgsweep needs of the postmaster: its stat alone."""
    try:
        return Usage("postmaster", int(parse_stat(stat)[_STARTTIME]), (0.0,) * len(FIGURES),
                     reaped(stat))  # fmt: skip
    except Exception:  # half-written by a postmaster exiting
        return None


def _texts(host: Host, paths: list[Path]) -> list[str | None]:
    """The files' texts, all None when the host cannot answer at all."""
    if not paths:
        return []
    try:
        return host.read_texts(paths)
    except Exception:  # a remote host's word for a failure: nothing was read
        return [None] * len(paths)


def track(host: Host, postmaster: int | None, seen: dict[int, Usage],
          skip: frozenset[int] = frozenset()) -> None:  # fmt: skip
    """Inside the window: the postmaster's children now, into `seen` (pid -> last usage):
    a process born and gone inside the window (pgbench's backends) leaves its type and
    its last figures there."""
    if postmaster is not None:
        seen.update(snapshot(host, postmaster, None, skip).processes)


def delta(before: Snapshot, after: Snapshot, seen: dict[int, Usage] | None = None,
          ) -> list[tuple[str, int, tuple[float, ...]]]:  # fmt: skip
    """(process type, processes, FIGURES) over the window: each process's gain from the
    window's start (or its birth) to the window's end (or the last time `seen` saw it);
    what processes that exited used after they were last seen, from the postmaster's
    reaped children; and "pgbench client" from the client runner's (NaN: not in /proc)."""
    # every process seen alive in the window, by (pid, start time): a reused pid is
    # another process; the latest figures of each (a process gone before `seen` saw it
    # again keeps its figures from the window's start: it gained nothing we saw)
    last = {(pid, u.started): u for pid, u in before.processes.items()}
    last.update({(pid, u.started): u for pid, u in (seen or {}).items()})
    last.update({(pid, u.started): u for pid, u in after.processes.items()})
    sums: dict[str, list[float]] = {}
    count: dict[str, int] = {}
    for (pid, started), now in last.items():
        then = before.processes.get(pid)
        start = then.values if then is not None and then.started == started else None
        acc = sums.setdefault(now.kind, [0.0] * len(FIGURES))
        for i, v in enumerate(now.values):
            acc[i] += max(v - (start[i] if start else 0.0), 0.0)
        count[now.kind] = count.get(now.kind, 0) + 1
    out = [(k, count[k], tuple(v)) for k, v in sums.items()]
    if before.postmaster is not None and after.postmaster is not None:
        alive = {(pid, u.started) for pid, u in after.processes.items()}
        gone = [u for key, u in last.items() if key not in alive]
        reaped_gain = [a - b for a, b in zip(after.postmaster.children,
                                             before.postmaster.children, strict=True)]
        known = [sum(u.values[i] for u in gone) for i in (0, 1, 4, 5)]
        rest = [max(g - k, 0.0) for g, k in zip(reaped_gain, known, strict=True)]
        kinds = {u.kind for u in gone}
        kind = kinds.pop() if len(kinds) == 1 else "exited"  # pgbench's backends, exiting
        if kind in sums:
            out = [(k, n, _add(v, rest)) if k == kind else (k, n, v) for k, n, v in out]
        elif any(rest):
            out.append((kind, len(gone), (rest[0], rest[1], NAN, NAN, rest[2], rest[3])))
    out.sort(key=lambda row: row[0])
    if before.client and after.client:
        c = [max(a - b, 0.0) for a, b in zip(after.client, before.client, strict=True)]
        out.append(("pgbench client", 1, (c[0], c[1], NAN, NAN, c[2], c[3])))
    return out


def _add(values: tuple[float, ...], exited: list[float]) -> tuple[float, ...]:
    """A type's figures plus what its processes that exited in the window used (times
    and faults: /proc keeps no context switches of reaped processes)."""
    extra = (exited[0], exited[1], 0.0, 0.0, exited[2], exited[3])
    return tuple(a + b for a, b in zip(values, extra, strict=True))
