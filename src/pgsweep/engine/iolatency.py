"""Block-I/O latency in the profile window (issue 26, opt in: [experiment] io_latency):
`perf record -a` of the kernel's block request tracepoints, filtered in the kernel to the
server's data and WAL devices (the ones its device counters count first), for as long as the
window's pgbench runs. Every request on those devices is counted, whoever issued it: a
device's latency is the device's, not the server's alone.

Root never reads the server user's files by path: `perf record -a` notes every process's
mappings (a library a backend was made to LOAD from the server user's folder included), and
`perf script` opens the files they name even when it prints only the tracepoints' fields
(strace showed it), and the capture names every process of the machine. So perf records
no snapshot of the processes already running (`--synth=no`), its data file (root's, in
root's private scratch folder) is handed to `nobody` as a new file in the trial's
root-owned folder, and `perf script` runs as `nobody`: neither root nor the server user.
perf is started through the host (`Host.start`) and stopped with the window: Ctrl-C or a
failed window does not leave it running."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..collect import blockio
from ..host.api import Host
from ..host.proc import RunAs
from ..layers.context import TrialContext
from ..store import TrialRecord

EVENTS = ("block:block_rq_issue", "block:block_rq_complete")
MAX_DATA = 512 << 20  # perf's data file, at most (--max-size): 10 busy minutes fit
ERRORS = "io_latency.err"
# who reads the capture back: perf script opens the files the recorded processes mapped,
# and the capture names every process of the machine: not root, and not the server user
READER = RunAs("nobody")


@dataclass
class Recorder:
    host: Host
    data: Path
    devices: dict[tuple[int, int], str]
    pid: int | None = None


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
    # no build-ids read at its end (-B -N), no snapshot of every process's mappings
    argv = ["perf", "record", "-a", "-B", "-N", "--synth=no", f"--max-size={MAX_DATA >> 20}M",
            "-o", str(rec.data)]  # fmt: skip
    for event in EVENTS:
        argv += ["-e", event, "--filter", only]
    argv += ["--", "sleep", str(seconds + 1)]
    out = scratch / f"blockio-{trial.id}.out"
    rec.pid = host.start(argv, out=out, err=out.with_suffix(".err"))
    return rec


def started(rec: Recorder | None) -> bool:
    """perf has written its data file's header (it records from then on), or has ended."""
    if rec is None or rec.pid is None or rec.host.poll(rec.pid) is not None:
        return True
    st = rec.host.lstat(rec.data)
    return st is not None and st.size > 0


def finish(rec: Recorder | None, trial: TrialContext, seconds: int, record: TrialRecord,
           abandon: bool = False) -> None:  # fmt: skip
    """Wait for perf (stop it at once with `abandon`: the window failed, or Ctrl-C), pair
    its requests into the artifact io_latency.tsv; what goes wrong is kept as
    io_latency.err, never a failed trial (the trial was measured already)."""
    if rec is None or rec.pid is None:
        return
    problems: list[str] = []
    out = trial.run.private / f"{rec.data.name}.script"
    theirs = trial.run.workdir / "trials" / trial.id / "blockio.data"  # root's folder, 0711
    try:
        status = rec.host.wait(rec.pid, 0 if abandon else seconds + 60)
        if status is None:  # stopped in `finally`
            problems.append("perf record (block requests) did not end: stopped")
        elif status != 0:
            problems.append(f"perf record (block requests) exited with {status}")
        if not abandon and not problems:
            _script(rec, trial, out, theirs, record, problems)
    except Exception as exc:  # a host lost, a capture too large: the trial stands
        problems.append(f"block requests: {exc}")
    finally:
        rec.host.stop(rec.pid, grace=2.0)  # ended already, or stopped now: forgotten
        for path in (out, theirs, rec.data):
            rec.host.remove_tree(path)
        if problems:
            record.artifacts[ERRORS] = "\n".join(problems).encode()


def _script(rec: Recorder, trial: TrialContext, out: Path, theirs: Path, record: TrialRecord,
            problems: list[str]) -> None:  # fmt: skip
    """perf script of a copy handed to READER; its requests paired into the artifact."""
    rec.host.write_file(theirs, rec.host.output(rec.data, MAX_DATA + (1 << 20)), 0o600,
                        rec.host.ids(READER))  # fmt: skip
    res = rec.host.run(["perf", "script", "-i", str(theirs), "--ns", "-F", "time,event,trace"],
                       out=out, timeout=600, user=READER)  # fmt: skip
    if not res.ok:
        problems.append(f"perf script (block requests): {res.describe_failure()}")
        return
    hist = blockio.histogram(rec.host.output(out, 1 << 30).decode(errors="replace"), rec.devices)
    if not hist:
        problems.append("no request completed on " + ", ".join(sorted(rec.devices.values()))
                        + " in the window")  # fmt: skip
    record.artifacts[blockio.ARTIFACT] = blockio.to_text(hist).encode()
