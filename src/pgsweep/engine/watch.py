"""`pgsweep progress DIR`: how far the run writing a results folder is, from another
terminal or host: its trials done of those its plan (or its shard) gives it, the ETA at
the pace so far, and whether a `pgsweep run ... --results DIR` process still runs on this
machine. Read only. A fleet's controller asks each host this while its shard runs
(engine.fleet), so the fleet's progress bar counts each group's trials."""

from __future__ import annotations

import json
import os
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


def _running(given: Path) -> bool:
    """A `pgsweep run` process whose --results is this folder (as given, or resolved)."""
    names = {str(given), os.path.realpath(given)}
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
            return True
    return False


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
