"""What a run shows while it works: a progress bar with the configuration, trials done and
left, and an ETA on a terminal; one line per trial elsewhere (logs, CI)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from ..core import printable
from ..plan import Configuration, Plan, Trial
from ..store import TrialRecord


class ConsoleReporter:
    def __init__(self, console: Console) -> None:
        self.console = console
        self.progress: Progress | None = None
        self.task: TaskID | None = None
        self.total = 0

    def building(self, line: str) -> None:
        """A step of the builds made before the first trial."""
        self.console.print(line, markup=False, highlight=False)

    def started(self, plan: Plan, todo: list[Trial], results: Path, notes: list[str]) -> None:
        for note in notes:
            self.console.print(f"note: {printable(note)}", markup=False, highlight=False)
        self.total = len(todo)
        self.console.print(
            printable(f"results: {results}  ({len(todo)} of {len(plan.trials)} trials to run,"
                      f" seed {plan.seed})"), markup=False, highlight=False,
        )  # fmt: skip
        if self.console.is_terminal:
            self.progress = Progress(
                TextColumn("{task.description}", markup=False),  # levels are data
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TextColumn("ETA"),
                TimeRemainingColumn(),
                console=self.console,
                transient=False,
            )
            self.progress.start()
            self.task = self.progress.add_task("starting", total=len(todo))

    def trial_started(self, trial: Trial, config: Configuration, done: int) -> None:
        text = printable(f"{trial.id} {config.label()}")
        if self.progress is not None and self.task is not None:
            self.progress.update(self.task, description=text[:60])

    def trial_finished(self, trial: Trial, record: TrialRecord, done: int) -> None:
        if record.status == "ok":
            what = f"{record.tps:,.1f} tps"
        else:
            what = f"FAILED: {printable((record.reason or ' ').splitlines()[0][:120])}"
        line = f"[{done}/{self.total}] {trial.id} ({record.config_id}): {what}"
        if self.progress is not None and self.task is not None:
            self.progress.console.print(line, markup=False, highlight=False)
            self.progress.update(self.task, completed=done)
        else:
            self.console.print(line, markup=False, highlight=False)

    def stopped_early(self, rounds: int, reason: str) -> None:
        line = f"stopping after round {rounds}: {reason}"
        (self.progress.console if self.progress else self.console).print(line, markup=False)

    def finished(self) -> None:
        if self.progress is not None:
            self.progress.stop()


class FleetProgress:
    """A fleet's shards as they run (engine.fleet_progress): a bar per group with its
    trials done and ETA on a terminal; elsewhere a line whenever a group's count moves,
    with the fleet's ETA (its slowest group's)."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.progress: Progress | None = None
        self.tasks: dict[str, TaskID] = {}
        self.last = ""
        if console.is_terminal:
            self.progress = Progress(TextColumn("{task.description}", markup=False),
                                     BarColumn(), MofNCompleteColumn(), TextColumn("ETA"),
                                     TimeRemainingColumn(), console=console)  # fmt: skip
            self.progress.start()

    def update(self, state: dict[str, dict[str, Any]]) -> None:
        from ..engine.fleet_progress import fleet_eta

        if self.progress is not None:
            for group, p in state.items():
                if group not in self.tasks:
                    self.tasks[group] = self.progress.add_task(printable(group), total=None)
                self.progress.update(self.tasks[group], completed=p.get("done", 0),
                                     total=p.get("total"))  # fmt: skip
            return
        eta = fleet_eta(state)
        line = "progress: " + ", ".join(
            f"{printable(g)} {p.get('done', 0)}/{p.get('total') or '?'}"
            for g, p in sorted(state.items())) + (f"; fleet ETA {eta:.0f} s" if eta else "")
        if line != self.last:
            self.console.print(line, markup=False, highlight=False)
            self.last = line

    def finished(self) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None  # once: a stopped fleet ends it before its last lines
