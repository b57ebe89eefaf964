"""Block-I/O latency in the profile window (issue 26, opt in: [experiment] io_latency):
`perf record -a` of the kernel's block request tracepoints, filtered in the kernel to the
server's data and WAL devices (the ones its device counters count first), for as long as the
window's pgbench runs. Every request on those devices is counted, whoever issued it: a
device's latency is the device's, not the server's alone.

Root never reads the server user's files by path: `perf record -a` notes every process's
mappings (a library a backend was made to LOAD from the server user's folder included), and
`perf script` opens the files they name even when it prints only the tracepoints' fields
(strace showed it). So, as for the CPU profile, the data file (root's, in root's private
scratch folder) is handed to the server user as a new file in the trial's root-owned
folder, and `perf script` runs as the server user."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path

from ..collect import blockio
from ..host import proc
from ..host.api import Host
from ..layers.context import TrialContext
from ..store import TrialRecord

EVENTS = ("block:block_rq_issue", "block:block_rq_complete")
MAX_DATA = 512 << 20  # perf's data file: a busy device's 10 minutes of requests fit
ERRORS = "io_latency.err"


@dataclass
class Recorder:
    host: Host
    data: Path
    devices: dict[tuple[int, int], str]
    thread: threading.Thread | None = None
    ended: list[proc.Result] = field(default_factory=list)


def device_numbers(host: Host, names: list[str]) -> dict[tuple[int, int], str]:
    """(major, minor) -> name of each block device, from /sys/class/block/NAME/dev."""
    out = {}
    for name in names:
        if "/" in name or name in ("", ".", ".."):
            continue
        number = host.read_text(Path("/sys/class/block") / name / "dev").strip()
        major, _, minor = number.partition(":")
        if major.isdigit() and minor.isdigit():
            out[(int(major), int(minor))] = name
    return out


def start(trial: TrialContext, seconds: int, record: TrialRecord) -> Recorder | None:
    """Start recording the server's devices' requests for `seconds` (None, with the reason
    kept as io_latency.err, when the server sits on no block device: tmpfs)."""
    host, scratch = trial.run.host, trial.run.private
    devices = device_numbers(host, list(trial.server.primary_devices))
    if not devices:
        record.artifacts[ERRORS] = (b"no block device holds the server's data or WAL "
                                    b"(tmpfs?): no request to time")  # fmt: skip
        return None
    rec = Recorder(host, scratch / f"blockio-{trial.id}.data", devices)
    only = " || ".join(f"dev == {(major << 20) | minor}" for major, minor in devices)
    argv = ["perf", "record", "-a", "-B", "-N", "-o", str(rec.data)]
    for event in EVENTS:
        argv += ["-e", event, "--filter", only]
    argv += ["--", "sleep", str(seconds + 1)]
    rec.thread = threading.Thread(target=lambda: rec.ended.append(host.run(
        argv, out=scratch / f"blockio-{trial.id}.out", timeout=seconds + 60)), daemon=True)
    rec.thread.start()
    return rec


def started(rec: Recorder | None) -> bool:
    """perf has written its data file's header (it records from then on), or has ended."""
    if rec is None or rec.ended:
        return True
    st = rec.host.lstat(rec.data)
    return st is not None and st.size > 0


def finish(rec: Recorder | None, trial: TrialContext, seconds: int,
           record: TrialRecord) -> None:  # fmt: skip
    """Wait for perf, pair its requests into the artifact io_latency.tsv; what goes wrong is
    kept as io_latency.err, never a failed trial (the trial was measured already)."""
    if rec is None or rec.thread is None:
        return
    problems = []
    user = trial.run.user
    out = trial.run.private / f"{rec.data.name}.script"
    theirs = trial.run.workdir / "trials" / trial.id / "blockio.data"  # root's folder, 0711
    try:
        rec.thread.join(timeout=seconds + 90)
        if not rec.ended or not rec.ended[0].ok:
            why = rec.ended[0].describe_failure() if rec.ended else "did not end"
            problems.append(f"perf record (block requests): {why}")
            return
        rec.host.write_file(theirs, rec.host.output(rec.data, MAX_DATA), 0o600,
                            rec.host.ids(user))  # fmt: skip
        res = rec.host.run(["perf", "script", "-i", str(theirs), "--ns", "-F", "time,event,trace"],
                           out=out, timeout=600, user=user)  # fmt: skip
        if not res.ok:
            problems.append(f"perf script (block requests): {res.describe_failure()}")
            return
        hist = blockio.histogram(rec.host.output(out, MAX_DATA).decode(errors="replace"),
                                 rec.devices)  # fmt: skip
        if not hist:
            problems.append("no request completed on " + ", ".join(sorted(rec.devices.values()))
                            + " in the window")  # fmt: skip
        record.artifacts[blockio.ARTIFACT] = blockio.to_text(hist).encode()
    finally:
        rec.host.remove_tree(out)
        rec.host.remove_tree(theirs)
        rec.host.remove_tree(rec.data)
        if problems:
            record.artifacts[ERRORS] = "\n".join(problems).encode()
