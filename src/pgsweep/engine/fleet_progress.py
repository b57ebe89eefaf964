"""A fleet's progress while its shards run (issue 28). Each host's play asks its host
`pgsweep progress DIR --json --wait S` while the shard's `pgsweep run` process lives there
(an `until` loop of the play, engine.fleet): each question waits on the host up to S
(PROGRESS_S, or the inventory's pgsweep_progress_interval, and half the host's timeout at
most) and answers at once when the shard's process ends, so a shard's end is seen without
a polling delay; every answer is one of ansible-runner's job events. A thread here reads
those events as they are written and hands the latest answer of every group to a
callback: the progress bar's trials done per group and the fleet's ETA (its slowest
group's). It removes each answer it has read, so a fleet running for days keeps a small
events folder (and a small set of names seen)."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..host.local import LOCAL

# how often each host answers, unless the inventory says (WAIT). Each question runs
# Ansible's module and `pgsweep progress` on the host being measured, about 1 CPU-s:
# every 5 s that was up to a fifth of a core taken from its trials; every 30 s, 3%.
PROGRESS_S = 30
# inventory variable pgsweep_progress_interval: seconds between two answers, 1 at least;
# a question must answer within the host's timeout (engine.fleet.HOST_TIMEOUT) or the
# host counts as lost: it waits half of that at most
WAIT = (f"{{{{ [[pgsweep_progress_interval | default({PROGRESS_S}) | int, 1] | max, "
        "[(pgsweep_host_timeout | default(120) | int) // 2, 1] | max] | min }}")
TASK = "progress"  # the play's task that asks
Report = Callable[[dict[str, dict[str, Any]]], None]  # group -> {"done", "total", ...}


class EventWatcher(threading.Thread):
    """Reads `events` (a job_events folder) every `every` seconds until stopped."""

    def __init__(self, events: Path, group_of: dict[str, str], report: Report,
                 every: float = 1.0) -> None:  # fmt: skip
        super().__init__(name="fleet-progress", daemon=True)
        self.events, self.group_of, self.report, self.every = events, group_of, report, every
        self.seen: set[str] = set()
        self.state: dict[str, dict[str, Any]] = {}
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.wait(self.every):
            self.scan()

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=10)
        self.scan()

    def scan(self) -> None:
        if not self.events.is_dir():
            return
        changed = False
        fresh = [p for p in self.events.glob("*.json")
                 if p.name not in self.seen and not p.name.endswith("-partial.json")]
        for path in sorted(fresh, key=lambda p: _counter(p.name)):
            try:
                event = json.loads(LOCAL.output(path))
            except (OSError, ValueError):
                continue  # being written: read next time
            changed |= self._take(event)
            if _asked_again(event):  # taken, and no one reads it after: the folder stays small
                LOCAL.remove_tree(path)
            else:
                self.seen.add(path.name)
        if changed:
            with contextlib.suppress(Exception):  # a bar that fails must not stop the fleet
                self.report(dict(self.state))

    def _take(self, event: dict[str, Any]) -> bool:
        data = event.get("event_data", {})
        if event.get("event") not in ("runner_retry", "runner_on_ok") or data.get("task") != TASK:
            return False
        group = self.group_of.get(str(data.get("host")))
        try:
            answer = json.loads(data.get("res", {}).get("stdout", ""))
        except ValueError:
            return False
        if group is None or not isinstance(answer, dict) or self.state.get(group) == answer:
            return False
        self.state[group] = answer
        return True


def _asked_again(event: dict[str, Any]) -> bool:
    """One of the progress task's answers while the shard still ran (Ansible's `until`
    retry): one per host every PROGRESS_S seconds, 2,880 a day, each a file of a few kB.
    Only the task's last result (runner_on_ok or _failed) says how the play went on."""
    data = event.get("event_data", {})
    return event.get("event") == "runner_retry" and data.get("task") == TASK


def _counter(name: str) -> int:
    """ansible-runner names its events COUNTER-UUID.json (and writes UUID-partial.json
first, which is skipped)."""
    head = name.split("-", 1)[0]
    return int(head) if head.isdigit() else 0


def fleet_eta(state: dict[str, dict[str, Any]]) -> float | None:
    """The slowest running group's ETA, in seconds (None: none known yet)."""
    etas = [float(p["eta_s"]) for p in state.values()
            if p.get("running") and p.get("eta_s") is not None]  # fmt: skip
    return max(etas) if etas else None
