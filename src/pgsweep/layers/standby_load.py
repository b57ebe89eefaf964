"""A read load on every standby during the measured window (workload.standby_script):
one pgbench per standby, started with the measured run and as long as it, its figures
kept apart from the primary's. Standby queries are what recovery conflicts cancel: pgbench
retries a cancelled query (SQLSTATE 40001) until the window ends and counts it."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Mapping
from pathlib import Path

from ..host import bounded, proc, safefs
from ..postgres import pgbench
from ..postgres.cluster import Cluster
from ..store import TrialRecord
from .context import TrialContext, TrialFailure

_RETRIED = re.compile(r"number of transactions retried: (\d+)")
_ABORTED = re.compile(r"client \d+ aborted")
_NONE = re.compile(r"number of transactions actually processed: 0\b")


class StandbyLoad:
    """A Watcher (see layers.context)."""

    def __init__(self, standbys: Mapping[str, Cluster], workload: pgbench.Workload) -> None:
        self.standbys = standbys
        self.workload = workload
        self.running: dict[str, tuple[subprocess.Popen[bytes], Path, Path]] = {}

    def begin(self, trial: TrialContext) -> None:
        folder = safefs.private_dir(trial.run.private / f"standby-load-{trial.id}", 0o700)
        pgb = trial.client.path("pgbench")
        for name, standby in self.standbys.items():
            argv = self.workload.argv(pgb, standby.pgbench_conn_args(),
                                      seconds=self.workload.seconds, vacuum=False)  # fmt: skip
            out, err = folder / f"{name}.out", folder / f"{name}.err"
            self.running[name] = (proc.start(argv, out=out, err=err, user=trial.run.user),
                                  out, err)  # fmt: skip

    def end(self, trial: TrialContext, record: TrialRecord, abort: bool = False) -> None:
        """Wait for each standby's pgbench (it runs as long as the window), or with `abort`
        (the trial is failing, or Ctrl-C) stop it now; TrialFailure when one ran without
        producing a summary (it could not connect, or every client died)."""
        try:
            broken = self._collect(record, abort)
        finally:
            for popen, _, _ in self.running.values():  # none outlives the trial, Ctrl-C too
                proc.kill_group(popen, grace=1.0)
            self.running.clear()
            safefs.remove_tree(trial.run.private / f"standby-load-{trial.id}")
        if broken and not abort:
            raise TrialFailure("the standby read load failed: " + "; ".join(broken))

    def _collect(self, record: TrialRecord, abort: bool) -> list[str]:
        tps = retried = aborted = failed = 0.0
        broken = []
        for name, (popen, out, err) in self.running.items():
            try:
                if not abort:
                    popen.wait(timeout=self.workload.seconds + 60)
            except subprocess.TimeoutExpired:
                pass
            proc.kill_group(popen, grace=1.0 if abort else 5.0)
            try:  # pgbench runs as the server user, and a script's \shell can print
                stdout, stderr = bounded.read_output(out), bounded.read_output(err)
            except bounded.TooLarge as exc:
                broken.append(f"{name}: {exc}")
                continue
            record.artifacts[f"standby-{name}.out"] = stdout
            record.artifacts[f"standby-{name}.err"] = stderr
            text, errors = stdout.decode(errors="replace"), stderr.decode(errors="replace")
            aborted += len(_ABORTED.findall(errors))
            m = _RETRIED.search(text)
            retried += float(m.group(1)) if m else 0.0
            try:
                summary = pgbench.parse_summary(text)
            except pgbench.ParseError:
                if popen.returncode == 0 and _NONE.search(text):
                    continue  # ran, and no read completed (conflicts cancelled them all): 0
                last = (errors.strip().splitlines() or ["no output"])[-1]
                broken.append(f"{name} (exit {popen.returncode}): {last}")
                continue
            tps, failed = tps + summary.tps, failed + summary.failed
        record.metrics.update({"standby.tps": tps, "standby.retried": retried,
                               "standby.failed": failed,
                               "standby.clients_aborted": aborted})  # fmt: skip
        return broken
