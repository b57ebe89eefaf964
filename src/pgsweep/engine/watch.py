"""`pgsweep progress DIR`: how far the run writing a results folder is, from another
terminal or host: its trials done of those its plan (or its shard) gives it, the ETA at
the pace so far, and whether a `pgsweep run ... --results DIR` process still runs on this
machine. Read only. A fleet's controller asks each host this while its shard runs
(engine.fleet), so the fleet's progress bar counts each group's trials. `pgsweep stop
DIR` sends those runs Ctrl-C, by PID: a fleet's controller stopped by Ctrl-C stops each
host's shard so."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..host import folders
from ..host.local import LOCAL
from ..store.db import peek


def progress(given: Path) -> dict[str, Any]:
    """{"done", "total" (None before the run made its store), "eta_s", "running"}. The
    store is only peeked at (read-only: the run writing it is not disturbed)."""
    running = _running(given)
    folder = folders.results_folder(given)
    out: dict[str, Any] = {"done": 0, "total": None, "eta_s": None, "running": running}
    db = folder / "results.db"
    folders.check_file(db, "the results folder's")
    seen = peek(db) if db.is_file() else None
    if seen is None:
        return out
    total = seen.rounds * seen.configurations
    out |= {"done": seen.trials, "total": total}
    if 0 < seen.trials < total:
        elapsed = (datetime.now(UTC) - datetime.fromisoformat(seen.created_at)).total_seconds()
        out["eta_s"] = round(elapsed / seen.trials * (total - seen.trials))
    return out


def progress_awaited(given: Path, wait_s: float, every: float = 0.5) -> dict[str, Any]:
    """progress(), answered once the run's process has ended or `wait_s` have passed,
    whichever comes first: a fleet's question waits on its host, so the end of a shard is
    seen at once while a long one is still asked only every `wait_s` seconds."""
    first = progress(given)
    pids = runs_writing(given) if first["running"] and wait_s > 0 else []
    deadline = time.monotonic() + wait_s
    while pids and time.monotonic() < deadline:
        time.sleep(every)
        pids = [p for p in pids if Path(f"/proc/{p}").exists()]
    return progress(given) if wait_s > 0 and first["running"] else first


def _running(given: Path) -> bool:
    return bool(runs_writing(given))


def runs_writing(given: Path) -> list[int]:
    """The `pgsweep run` processes of this user whose --results is this folder (as given,
    or resolved)."""
    names, found = {str(given), os.path.realpath(given)}, []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        seen = LOCAL.process(int(entry))
        if seen is None:
            continue
        argv, owner = seen
        if owner != os.geteuid():  # another user's process naming the folder is no run of it
            continue
        if "run" in argv and any(a == "--results" and i + 1 < len(argv) and argv[i + 1] in names
                                 for i, a in enumerate(argv)):  # fmt: skip
            found.append(int(entry))
    return found


def stop(given: Path, wait_s: float) -> tuple[list[int], list[int]]:
    """Ctrl-C, by PID, to each run writing the folder (it stops its trial and puts its
    machine back, resumable), then up to `wait_s` for them to end: (signalled, still
    running)."""
    pids = runs_writing(given)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGINT)
    deadline = time.monotonic() + wait_s
    left = [p for p in pids if Path(f"/proc/{p}").exists()]
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = [p for p in left if Path(f"/proc/{p}").exists()]
    return pids, left


def line(p: dict[str, Any]) -> str:
    """The human form: `12/40 trials, ETA 0:14:00, running`."""
    total = "?" if p["total"] is None else str(p["total"])
    eta = p.get("eta_s")
    when = f", ETA {_clock(eta)}" if eta is not None and p["running"] else ""
    return f"{p['done']}/{total} trials{when}, {'running' if p['running'] else 'not running'}"


def _clock(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def as_json(p: dict[str, Any]) -> str:
    return json.dumps(p, sort_keys=True)
