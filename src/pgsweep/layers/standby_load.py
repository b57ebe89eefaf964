"""A read load on every standby during the measured window (workload.standby_script):
one pgbench per standby, started with the measured run and as long as it, its figures
kept apart from the primary's. Standby queries are what recovery conflicts cancel: pgbench
retries a cancelled query (SQLSTATE 40001) until the window ends and counts it.

Each pgbench runs on its standby's host (`Host.start`), beside it, over its private socket
there: here for a standby beside the primary, on the standby's own host when [roles] puts
it there (a custom script copied into the standby's folder on that host first, read here by
descriptor). Its output is read back through that host, bounded."""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Mapping
from pathlib import Path

from ..host import bounded
from ..host.api import Host
from ..postgres import pgbench
from ..postgres.cluster import Cluster
from ..store import TrialRecord
from .context import TrialContext, TrialFailure

_RETRIED = re.compile(r"number of transactions retried: (\d+)")
_ABORTED = re.compile(r"client \d+ aborted")
_NONE = re.compile(r"number of transactions actually processed: 0\b")


@dataclasses.dataclass
class _Running:
    host: Host
    pid: int | None  # None until it started
    out: Path
    err: Path
    script: Path  # a custom script's copy there (none is made for a built-in or here)


class StandbyLoad:
    """A Watcher (see layers.context)."""

    def __init__(self, standbys: Mapping[str, Cluster], workload: pgbench.Workload) -> None:
        self.standbys = standbys
        self.workload = workload
        self.running: dict[str, _Running] = {}

    def begin(self, trial: TrialContext) -> None:
        """One pgbench per standby; when one cannot start (or Ctrl-C comes), those started
        are stopped and their files removed before the error goes on (the engine ends only
        the watchers whose begin finished)."""
        pgb = trial.client.path("pgbench")
        try:
            for name, standby in self.standbys.items():
                host, stem = standby.host, f"load-{trial.id}"
                script = standby.root / f"{stem}.sql"
                self.running[name] = _Running(host, None, standby.scratch / f"{stem}.out",
                                              standby.scratch / f"{stem}.err", script)  # fmt: skip
                w = self._script_there(trial, standby, script)
                argv = w.argv(pgb, standby.pgbench_conn_args(), seconds=w.seconds, vacuum=False)
                r = self.running[name]
                r.pid = host.start(argv, out=r.out, err=r.err, user=trial.run.user)
        except BaseException:
            self._put_away()
            raise

    def _script_there(self, trial: TrialContext, standby: Cluster, copy: Path) -> pgbench.Workload:
        """The workload as it runs on the standby's host: a custom script copied there (the
        server user's, read only, in the standby's root-owned 0711 folder) when that host
        is not this one."""
        w = self.workload
        if w.builtin or standby.host is trial.run.host:
            return w
        # the run's frozen copy, on the server's host (by descriptor, the server user's)
        text = trial.run.host.read_owned(Path(w.script), trial.run.host.ids(trial.run.user)[0],
                                         1 << 20)  # fmt: skip
        standby.host.write_file(copy, text, 0o400, standby.host.ids(trial.run.user))
        return dataclasses.replace(w, script=str(copy))

    def end(self, trial: TrialContext, record: TrialRecord, abort: bool = False) -> None:
        """Wait for each standby's pgbench (it runs as long as the window), or with `abort`
        (the trial is failing, or Ctrl-C) stop it now; TrialFailure when one ran without
        producing a summary (it could not connect, or every client died)."""
        try:
            broken = self._collect(record, abort)
        finally:
            self._put_away()
        if broken and not abort:
            raise TrialFailure("the standby read load failed: " + "; ".join(broken))

    def _put_away(self) -> None:
        """Stop every pgbench started and remove its files, each host on its own: one host
        lost does not leave the others' running (its error is raised after)."""
        first: BaseException | None = None
        for r in self.running.values():  # none outlives the trial, Ctrl-C too
            try:
                if r.pid is not None:
                    r.host.stop(r.pid, grace=1.0)
                for path in (r.out, r.err, r.script):
                    r.host.remove_tree(path)
            except Exception as exc:
                first = first or exc
        self.running.clear()
        if first is not None:
            raise first

    def _wait(self, abort: bool) -> dict[str, int | None]:
        """Each pgbench's exit status once it ended (they run side by side, so one deadline
        serves them all); one still running at the deadline is stopped."""
        deadline = time.monotonic() + (0 if abort else self.workload.seconds + 60)
        status: dict[str, int | None] = {}
        for name, r in self.running.items():
            assert r.pid is not None  # begin started them all, or put them away
            code = r.host.wait(r.pid, max(0.0, deadline - time.monotonic()))
            status[name] = code if code is not None else r.host.stop(r.pid, 1.0 if abort else 5.0)
        return status

    def _collect(self, record: TrialRecord, abort: bool) -> list[str]:
        tps = retried = aborted = failed = 0.0
        broken = []
        for name, code in self._wait(abort).items():
            r = self.running[name]
            try:  # pgbench runs as the server user, and a script's \shell can print
                stdout, stderr = r.host.output(r.out), r.host.output(r.err)
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
                if code == 0 and _NONE.search(text):
                    continue  # ran, and no read completed (conflicts cancelled them all): 0
                last = (errors.strip().splitlines() or ["no output"])[-1]
                broken.append(f"{name} (exit {code}) on {r.host.name}: {last}")
                continue
            tps, failed = tps + summary.tps, failed + summary.failed
        record.metrics.update({"standby.tps": tps, "standby.retried": retried,
                               "standby.failed": failed,
                               "standby.clients_aborted": aborted})  # fmt: skip
        return broken
