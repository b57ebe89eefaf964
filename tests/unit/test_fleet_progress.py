"""The fleet's progress watcher on job events captured from a real ansible-runner run
(tests/data/fleet-events): each group's latest answer reaches the callback, the answers
it has read while the task was asked again are removed (a fleet of days keeps a small
folder: one per host every 30 s otherwise), and the task's last result, which the
dispatch reads afterwards for how the play went, is kept."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from pgsweep.engine.fleet_progress import TASK, EventWatcher

EVENTS = Path(__file__).resolve().parents[1] / "data" / "fleet-events"


def test_answers_are_read_in_order_and_only_the_retries_removed(tmp_path: Path) -> None:
    assert TASK == "progress"  # the captured play's task has engine.fleet's name
    folder = tmp_path / "job_events"
    folder.mkdir()
    files = sorted(EVENTS.glob("*.json"), key=lambda p: int(p.name.split("-")[0]))
    reports: list[dict[str, Any]] = []
    watcher = EventWatcher(folder, {"localhost": "alpha"}, reports.append)
    for f in files[:6]:  # the play so far: started, then asked twice ("running")
        shutil.copy(f, folder / f.name)
    watcher.scan()
    assert reports == [{"alpha": {"done": 2, "total": 4, "eta_s": 10, "running": True}}]
    names = sorted(p.name.split("-")[0] for p in folder.glob("*.json"))
    assert names == ["1", "2", "3", "4"]  # the two answers taken are gone
    assert len(watcher.seen) == 4
    for f in files[6:]:  # its last answer (runner_on_ok) and the play's end
        shutil.copy(f, folder / f.name)
    watcher.scan()
    assert reports[-1] == {"alpha": {"done": 3, "total": 4, "eta_s": 10, "running": False}}
    assert sorted(int(p.name.split("-")[0]) for p in folder.glob("*.json")) == [1, 2, 3, 4, 7, 8]
    watcher.scan()  # nothing new: no report, nothing read twice
    assert len(reports) == 2


def test_a_partial_event_is_left_for_ansible_runner(tmp_path: Path) -> None:
    folder = tmp_path / "job_events"
    folder.mkdir()
    retry = sorted(EVENTS.glob("5-*.json"))[0]
    partial = folder / "b5afab79-fc10-4a39-8afe-488a3dc4fb6c-partial.json"
    shutil.copy(retry, partial)
    reports: list[dict[str, Any]] = []
    EventWatcher(folder, {"localhost": "alpha"}, reports.append).scan()
    assert partial.exists() and not reports
