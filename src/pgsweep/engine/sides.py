"""Where a trial's pgbench runs: beside the server (its private socket, the trial's folder
in the work area) or on the client host [roles] names (TCP with the run's password, a
trial folder in that host's work area, outputs and transaction logs read back through the
host, bounded as here). Also the client's and standbys' hosts' own counters, and the round
trip to the server measured from the client's."""

from __future__ import annotations

import dataclasses
import io
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from ..collect import counters, metrics
from ..host import bounded, safefs
from ..host.api import Host
from ..host.local import LOCAL
from ..host.proc import Result
from ..layers.context import TrialContext, TrialFailure
from ..layers.workload_tools import MAX_REMOTE_LOG
from ..postgres.pgbench import Workload
from ..postgres.pgreplay import Replay

_PGBENCH_LOG = re.compile(r"tx\.\d+(\.\d+)?")  # the names pgbench gives its per-thread logs


@dataclass(frozen=True)
class Side:
    host: Host
    folder: Path  # the trial's folder on that host (root's, 0711)
    conn: list[str]  # pgbench's connection arguments
    env: dict[str, str] | None
    ids: tuple[int, int]  # the server user's uid and gid there: pgbench runs as it
    remote: bool  # not this machine's: its files are read through `host`
    local_uid: int  # the server user's uid on the server's host (owner of its frozen scripts)
    server: Host  # the server's host: the run's frozen scripts and logs are there
    calls: int = 0  # the agent's messages before this trial's window (RemoteHost.calls)

    @property
    def uid(self) -> int:
        return self.ids[0]

    def run(self, trial: TrialContext, argv: list[str], stem: Path, seconds: int) -> Result:
        return self.host.run(argv, out=stem.with_suffix(".out"), err=stem.with_suffix(".err"),
                             timeout=seconds * 1.5 + 60, user=trial.run.user,
                             env=self.env)  # fmt: skip

    def read(self, path: Path, budget: bounded.Budget) -> bytes:
        """An output file, counted against the trial's budget."""
        if not self.remote:
            return budget.read(path)
        data = self.host.output(path, budget.left)
        budget.left -= len(data)
        return data

    def workload(self, w: Workload) -> Workload:
        """The workload as pgbench runs it there: a custom script copied into the trial's
        folder on the client host (read from the run's frozen copy on the server's host, by
        descriptor)."""
        if not self.remote or w.builtin:
            return w
        text = self.server.read_owned(Path(w.script), self.local_uid, 1 << 20)
        copy = self.folder / Path(w.script).name
        self.host.write_file(copy, text, 0o400, self.ids)
        return dataclasses.replace(w, script=str(copy))


    def replayed(self, r: Replay) -> Replay:
        """The replay as pgreplay runs it there: the run's frozen log copied into the
        trial's folder on the client host (read on the server's host by descriptor, as the
        server user's file, at most what one message to the agent carries)."""
        if not self.remote:
            return r
        try:
            text = self.server.read_owned(Path(r.log), self.local_uid, MAX_REMOTE_LOG)
        except safefs.UnsafePath as exc:
            raise TrialFailure(f"the replayed log was not copied to {self.host.name}: "
                               f"{exc}") from exc  # fmt: skip
        copy = self.folder / "replay.csv"
        self.host.write_file(copy, text, 0o400, self.ids)
        return dataclasses.replace(r, log=str(copy))

    def address(self, trial: TrialContext) -> tuple[str, int]:
        """Where the tool reaches the server: its socket folder here, or its address."""
        if not self.remote:
            return str(trial.cluster.socket_dir), trial.cluster.port
        return self.conn[1], int(self.conn[3])


@contextmanager
def opened(trial: TrialContext, trial_dir: Path) -> Iterator[Side]:
    """Where the workload tool of `trial` runs (beside the server, or on the client's
    host), for the length of its measured window: a client host's trial folder is removed
    after it, on every path."""
    cs, uid = trial.run.client_side, trial.cluster.uid
    if cs is None:  # beside the server: on another host, its files are read through it
        yield Side(trial.run.host, trial_dir, trial.cluster.pgbench_conn_args(), None,
                   (uid, trial.cluster.gid), trial.run.host is not LOCAL, uid,
                   trial.run.host)  # fmt: skip
        return
    calls = int(getattr(cs.host, "calls", 0))
    folder = cs.host.private_dir(cs.workdir / "trials" / trial.id, 0o711)
    try:
        yield Side(cs.host, folder, cs.conn_args(), cs.env(), cs.host.ids(trial.run.user),
                   True, uid, trial.run.host, calls)  # fmt: skip
    finally:
        cs.host.remove_tree(folder)


def remote_logs(s: Side, log_dir: Path, jobs: int, most: int) -> list[BinaryIO]:
    """pgbench's transaction logs on the client host, as in-memory files: listed and read
    through the host without following links, each a regular file of the server user's,
    no more files than pgbench has threads and at most `most` bytes in all, checked on
    their sizes before a byte is read."""
    names = s.host.list_owned(log_dir)
    if len(names) > jobs + 64:
        raise TrialFailure(f"the transaction log was not read: {log_dir} holds {len(names)} "
                           "names")  # fmt: skip
    names = [n for n in names if _PGBENCH_LOG.fullmatch(n)]
    if not names:
        raise TrialFailure(f"pgbench wrote no transaction log in {log_dir} on {s.host.name}")
    if len(names) > jobs:
        raise TrialFailure(f"the transaction log was not read: {log_dir} holds {len(names)} "
                           f"log files, and pgbench's {jobs} thread(s) write one each")  # fmt: skip
    sizes = {n: s.host.owned_size(log_dir / n, s.uid) for n in names}
    if sum(sizes.values()) > most:
        raise TrialFailure(f"the transaction log was not read: its {len(names)} file(s) hold "
                           f"{sum(sizes.values()):,} bytes, more than the transactions "
                           f"pgbench counted can fill ({most:,})")  # fmt: skip
    files: list[BinaryIO] = []
    for n in names:
        f = io.BytesIO(s.host.read_owned(log_dir / n, s.uid, sizes[n]))
        f.name = f"{s.host.name}:{log_dir / n}"  # the parser names the file it refuses
        files.append(f)
    return files


def client_counters(trial: TrialContext) -> dict[str, float]:
    """The other hosts' CPU, pressure and network counters: the client host's (client.*)
    and each standby host's (standby.NAME.*, NAME the [hosts] one) that is not the
    client's, beside the server's own."""
    cs, snap = trial.run.client_side, {}
    named = {} if cs is None else {"client": cs.host}
    for side in trial.run.standby_sides:
        if side is not None and (cs is None or side.host is not cs.host):
            named.setdefault(f"standby.{side.host.name}", side.host)
    for prefix, host in named.items():
        snap.update({f"{prefix}.host.{k}": v for k, v in counters.system(host).items()})
        snap.update({f"{prefix}.net.{k}": v for k, v in counters.network(host).items()})
    return snap


def client_figures(trial: TrialContext, s: Side) -> dict[str, float]:
    """The client host's memory at the window's end, its round trip to the server, and the
    agent's messages this trial took so far (the agent's cost)."""
    cs = trial.run.client_side
    if cs is None:
        return {}
    meminfo = cs.host.read_text(Path("/proc/meminfo"))
    out = {f"client.{k}": v for k, v in metrics.memory(meminfo, "").items()}
    out["client.rtt_ms"] = cs.host.tcp_rtt(cs.address, cs.port)
    if hasattr(cs.host, "calls"):  # not this machine (the client of a server elsewhere)
        out["client.agent_calls"] = float(cs.host.calls - s.calls)
    return out
