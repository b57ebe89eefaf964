"""Block-I/O latency's window (issue 26, [experiment] io_latency) on a recording host:
perf records the server's own devices only, by their numbers read from sysfs, started
through the host and stopped with the window; `perf script` runs as nobody on a copy
handed to it (never as root: it opens the files the recorded processes mapped; never as
the server user: the capture names every process of the machine), its output (a real
capture) becomes the trial's histogram, and every copy is removed; a failed window stops
perf at once and reads nothing; a server on no block device keeps the reason instead. The
real window is in tests/integration/test_storage.py."""

from __future__ import annotations

from pathlib import Path

from conftest import DATA
from pgsweep.collect import blockio
from pgsweep.engine import iolatency
from pgsweep.host.proc import RunAs
from pgsweep.host.recording import RecordingHost, Reply, argv_starts
from pgsweep.layers.context import RunContext, Server, TrialContext
from pgsweep.postgres.binaries import Binaries
from pgsweep.postgres.cluster import Cluster
from pgsweep.store import TrialRecord

USER = RunAs("pgsweep")
USERS: dict[str | None, tuple[int, int]] = {None: (0, 0), "pgsweep": (999, 999),
                                            "nobody": (65534, 65534)}  # fmt: skip
BIN = Binaries(Path("/usr/lib/postgresql/15/bin"), "15.18", {})
SCRIPT = (DATA / "proc" / "perf-block.script").read_text()


def _trial(host: RecordingHost, devices: list[str]) -> TrialContext:
    run = RunContext(BIN, USER, Path("/w"), Path("/w/private"), Path("/s"), {}, host=host,
                     run_id="run", registry=Path("/registry"))  # fmt: skip
    server = Server("cluster-1", Cluster(BIN, USER, Path("/w/c1"), Path("/s/c1"), host=host), BIN)
    server.primary_devices = devices
    return TrialContext("r1-c01", {}, {}, run, server)


def test_perf_records_the_servers_devices_and_its_script_runs_as_the_server_user() -> None:
    host = RecordingHost("here", users=USERS,
                         files={"/sys/class/block/loop2/dev": "7:2\n",
                                "/sys/class/block/vdb/dev": "254:16\n",
                                "/w/private/blockio-r1-c01.data": "PERFILE2..."},
                         commands=[(argv_starts("perf", "record"), Reply(0, "")),
                                   (argv_starts("perf", "script"), Reply(0, SCRIPT))])  # fmt: skip
    trial = _trial(host, ["loop2", "vdb"])
    record = TrialRecord("r1-c01", 1, 1, "c01", "ok", "", "")
    rec = iolatency.start(trial, 3, record)
    assert rec is not None and iolatency.started(rec)
    iolatency.finish(rec, trial, 3, record)
    (started,) = host.kinds("start")
    (ran,) = host.kinds("run")
    perf_record, perf_script = list(started.detail["argv"]), list(ran.detail["argv"])
    # the kernel filters by device number: 7:2 is 7 << 20 | 2, 254:16 is 254 << 20 | 16
    only = f"dev == {7 << 20 | 2} || dev == {254 << 20 | 16}"
    assert perf_record[:3] == ["perf", "record", "-a"] and perf_record.count(only) == 2
    assert "-B" in perf_record and "-N" in perf_record  # no build-ids read at its end
    assert "--synth=no" in perf_record and "--max-size=512M" in perf_record  # perf takes units
    assert started.detail["user"] == "root" and ran.detail["user"] == "nobody"
    assert host.kinds("stop")  # forgotten by the host once ended
    copy = "/w/trials/r1-c01/blockio.data"  # in the trial's root-owned folder
    assert perf_script[perf_script.index("-i") + 1] == copy
    (handed,) = [e for e in host.kinds("write_file") if e.what == copy]
    assert handed.detail["owner"] == (65534, 65534) and handed.detail["mode"] == "0o600"
    removed = {e.what for e in host.kinds("remove_tree")}
    assert {copy, "/w/private/blockio-r1-c01.data"} <= removed
    hist = blockio.parse(record.artifacts[blockio.ARTIFACT].decode())
    assert hist == blockio.histogram(SCRIPT, {(7, 2): "loop2", (254, 16): "vdb"}) and hist
    assert "io_latency.err" not in record.artifacts


def test_a_failed_window_stops_perf_and_reads_nothing() -> None:
    host = RecordingHost("here", users=USERS, files={"/sys/class/block/loop2/dev": "7:2\n"},
                         commands=[(argv_starts("perf", "record"), Reply(0, ""))])  # fmt: skip
    trial = _trial(host, ["loop2"])
    record = TrialRecord("r1-c01", 1, 1, "c01", "ok", "", "")
    rec = iolatency.start(trial, 600, record)
    host.started[rec.pid] = None  # type: ignore[union-attr,index]  # still recording
    iolatency.finish(rec, trial, 600, record, abandon=True)
    assert [e.kind for e in host.effects if e.kind in ("start", "run", "stop")] == [
        "start", "stop"]  # stopped at once; no perf script
    assert b"did not end" in record.artifacts["io_latency.err"]
    assert blockio.ARTIFACT not in record.artifacts


def test_a_server_on_no_block_device_records_why_and_runs_nothing() -> None:
    host = RecordingHost("here", users=USERS)
    record = TrialRecord("r1-c01", 1, 1, "c01", "ok", "", "")
    trial = _trial(host, [])
    assert iolatency.start(trial, 3, record) is None
    iolatency.finish(None, trial, 3, record)
    assert host.kinds("run") == []
    assert b"no block device" in record.artifacts["io_latency.err"]
