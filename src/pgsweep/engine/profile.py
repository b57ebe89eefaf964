"""The profile window (issue 26, opt in: [experiment] cpu_profile and io_latency): after the
measured window of a configuration's round-1 trial, pgbench runs the same workload again for
the window's length while the server's devices' requests are timed (engine/iolatency.py)
and `perf record -g` samples this trial's server at 99 Hz: its
postmaster and the children it has (`-p`), and every process the postmaster forks while
perf runs (perf's inherit: pgbench's backends); no other process of the machine, another
PostgreSQL included. The stacks are folded (collect.perf) and kept as the trial's
artifact. Nothing of it enters the trial's figures: the window they come from is over.

Root never reads the server's files by path: `perf record` (root, it must attach) takes
no build-ids (-B, -N: at its end it would read, and cache, every binary the processes
mapped, a library a backend was made to LOAD from the server user's folder included). Its
data file, in root's private scratch folder, is handed to the server user as a new file
in the trial's root-owned folder, and `perf script`, which resolves symbols by reading the
mapped binaries by path, runs as the server user."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from ..collect import perf, processes
from ..host.api import Host
from ..layers.context import TrialContext
from ..postgres.pgbench import Workload
from ..store import TrialRecord
from . import iolatency
from .sides import Side

HZ = 99  # not a multiple of the kernel's tick: samples do not lock step with timers
START_S = 0.5  # perf is given this long to start sampling before pgbench starts,
READY_S = 30.0  # once it has written its data file's header (or this long at most)
MAX_DATA = 256 << 20  # perf's data file, read back by root: a 10-minute profile fits


def window(trial: TrialContext, where: Side, w: Workload, pgbench: str,
           record: TrialRecord) -> None:  # fmt: skip
    """pgbench for the longer of [experiment] cpu_profile and io_latency, with perf sampling
    the server's stacks (cpu_profile) and timing its devices' requests (io_latency); what
    goes wrong is kept as profile.err or io_latency.err, never a failed trial (the trial was
    measured already). Both perfs are started through the host and stopped with the window,
    Ctrl-C included."""
    cpu_s, io_s = trial.run.cpu_profile_s, trial.run.io_latency_s
    seconds = max(cpu_s, io_s)
    host, scratch = trial.run.host, trial.run.private
    data = scratch / f"perf-{trial.id}.data"
    problems: list[str] = []
    sampler: int | None = None
    blocks = None
    completed = False
    try:
        sampler = _sampler(trial, data, seconds, problems) if cpu_s else None
        blocks = iolatency.start(trial, seconds, record) if io_s else None
        if sampler is not None:
            _started(lambda: host.poll(sampler) is not None or _has_header(host, data))
        _started(lambda: iolatency.started(blocks))
        time.sleep(START_S)
        load = w.argv(pgbench, where.conn, seconds=seconds, vacuum=False)
        res = where.run(trial, load, where.folder / "profile-pgbench", seconds)
        if not res.ok:
            problems.append(f"pgbench in the profile window: {res.describe_failure()}")
        if sampler is not None:
            status = host.wait(sampler, seconds + 90)
            if status != 0:
                problems.append(f"perf record: {'did not end' if status is None else status}")
            else:
                record.artifacts[perf.ARTIFACT] = _folded(trial, data, problems)
        completed = True
    finally:
        if sampler is not None:
            host.stop(sampler, grace=2.0)  # ended, or stopped now
        iolatency.finish(blocks, trial, seconds, record, abandon=not completed)
        host.remove_tree(data)
    if problems:
        record.artifacts["profile.err"] = "\n".join(problems).encode()


def _sampler(trial: TrialContext, data: Path, seconds: int, problems: list[str]) -> int | None:
    """perf record -g of the server's processes, started (None: no server to sample)."""
    host, scratch = trial.run.host, trial.run.private
    postmaster = trial.cluster.postmaster_pid()
    if postmaster is None:
        problems.append("no server to profile: its postmaster is gone")
        return None
    # the postmaster and its auxiliary processes; client backends left over from the
    # measured window may be gone by the time perf attaches (it then refuses them all),
    # and the profile window's own are forked after it, so inherited
    children = processes.snapshot(host, postmaster, None).processes
    pids = [postmaster, *(p for p, u in children.items() if u.kind != "client backend")]
    argv = ["perf", "record", "-F", str(HZ), "-g", "-B", "-N", "-p", ",".join(map(str, pids)),
            "-o", str(data), "--", "sleep", str(seconds + 1)]  # fmt: skip
    out = scratch / f"perf-{trial.id}.out"
    return host.start(argv, out=out, err=out.with_suffix(".err"))


def _has_header(host: Host, data: Path) -> bool:
    st = host.lstat(data)
    return st is not None and st.size > 0


def _started(ready: Callable[[], bool]) -> None:
    """Until a perf has written its data file's header (it attaches right after), or ended,
    or READY_S passed: on a loaded machine perf once took longer to start than START_S
    and the profile window's pgbench, and sampled nothing (ci42)."""
    deadline = time.monotonic() + READY_S
    while not ready() and time.monotonic() < deadline:
        time.sleep(0.05)


def _folded(trial: TrialContext, data: Path, problems: list[str]) -> bytes:
    host, scratch, user = trial.run.host, trial.run.private, trial.run.user
    out = scratch / f"perf-{trial.id}.script"
    theirs = trial.run.workdir / "trials" / trial.id / "perf.data"  # root's folder, 0711
    try:
        host.write_file(theirs, host.output(data, MAX_DATA), 0o600, host.ids(user))
        res = host.run(["perf", "script", "-i", str(theirs), "-F", "comm,pid,ip,sym"],
                       out=out, timeout=600, user=user)  # fmt: skip
        if not res.ok:
            problems.append(f"perf script: {res.describe_failure()}")
            return b""
        stacks = perf.fold(host.output(out, 512 << 20).decode(errors="replace"))
    finally:
        host.remove_tree(out)
        host.remove_tree(theirs)
    if not stacks:
        problems.append("perf sampled no server process in the profile window")
    return perf.to_text(stacks).encode()
