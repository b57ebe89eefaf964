"""Layer logic on a recording host (host/recording.py): milliseconds each, nothing on this
machine touched. What only real runs reached before: huge page sizing and its retry when
the kernel gives fewer pages, kernel values journaled before they are written and put
back in reverse, a cgroup handed to the server user, restart versus reload, the first
start, and a trial's snapshot restore. Each has a real run elsewhere in the suite."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest

from pgsweep.host.journal import UndoJournal
from pgsweep.host.kernelfiles import COMPACT_MEMORY, DROP_CACHES, THP_FILES, hugepage_pool
from pgsweep.host.proc import RunAs
from pgsweep.host.recording import RecordingHost, Reply, Unscripted, argv_starts
from pgsweep.layers import hugepages
from pgsweep.layers.context import RunContext, Server, TrialContext, TrialFailure
from pgsweep.layers.oslayer import OsLayer, OsSettings
from pgsweep.layers.server import ServerLayer
from pgsweep.postgres.binaries import Binaries, Setting
from pgsweep.postgres.cluster import Cluster

GB_POOL = hugepage_pool(1024 * 1024) / "nr_hugepages"
MEMINFO = "MemTotal: 25000000 kB\nMemAvailable: 20000000 kB\n"
USER = RunAs("pgsweep")


def _kernel_giving(most: int, after_compaction: int) -> Any:
    """A kernel whose 1 GB pool grows to `most` pages, or to `after_compaction` once memory
    was compacted."""
    compacted = []

    def kernel(path: Path, value: str, old: str | None) -> str:
        if path == COMPACT_MEMORY:
            compacted.append(True)
        if path == GB_POOL:
            return str(min(int(value), after_compaction if compacted else most))
        return value

    return kernel


def _journal(host: RecordingHost) -> UndoJournal:
    return UndoJournal(Path("/registry/run.undo"), None, host)


def test_a_short_reservation_is_retried_after_making_room_and_succeeds() -> None:
    host = RecordingHost(files={str(GB_POOL): "0", "/proc/meminfo": MEMINFO},
                         kernel=_kernel_giving(2, 3))  # fmt: skip
    events: list[str] = []
    got = hugepages.HugePages().reserve("1GB", 3, _journal(host), events, may_drop_cache=True)
    assert got == 3 and events == ["drop-caches", "compact-memory"]
    writes = [(e.what, e.detail["new"]) for e in host.kinds("write_kernel")]
    assert writes == [(str(GB_POOL), "3"), (str(DROP_CACHES), "3"), (str(COMPACT_MEMORY), "1"),
                      (str(GB_POOL), "3")]  # fmt: skip
    # the original was journaled before the first write, once
    journal = [json.loads(e.detail["entry"]) for e in host.kinds("journal")]
    assert journal == [{"file": str(GB_POOL), "original": "0"}]
    assert host.effects.index(host.kinds("journal")[0]) < host.effects.index(
        host.kinds("write_kernel")[0])
    assert host.kinds("sync")  # dirty pages written back before the cache is dropped


def test_a_reservation_that_stays_short_fails_the_trial_and_gives_the_pages_back() -> None:
    host = RecordingHost(files={str(GB_POOL): "0", "/proc/meminfo": MEMINFO},
                         kernel=_kernel_giving(2, 2))  # fmt: skip
    events: list[str] = []
    with pytest.raises(TrialFailure) as failed:
        hugepages.HugePages().reserve("1GB", 3, _journal(host), events, may_drop_cache=False)
    assert "the kernel reserved 2, then 2 after compacting memory" in failed.value.reason
    assert events == ["compact-memory"]  # no cache dropped: the trial does not warm up
    assert host.files[str(GB_POOL)] == "0"  # the partial reservation was given back


def test_no_reservation_beyond_available_memory_is_tried() -> None:
    host = RecordingHost(files={str(GB_POOL): "0", "/proc/meminfo": "MemAvailable: 3000000 kB\n"})
    with pytest.raises(TrialFailure, match="only 2929 MiB of memory is available"):
        hugepages.HugePages().reserve("1GB", 3, _journal(host), [], may_drop_cache=True)
    assert not host.kinds("write_kernel")


def _binaries() -> Binaries:
    catalog = {"shared_buffers": Setting("shared_buffers", "postmaster", "INTEGER", "16",
                                         "1073741823", ""),
               "synchronous_commit": Setting("synchronous_commit", "user", "ENUM", "", "",
                                             "")}  # fmt: skip
    return Binaries(Path("/usr/lib/postgresql/15/bin"), "15.18", catalog)


def _trial(host: RecordingHost, settings: dict[str, Any], workdir: Path = Path("/w"),
           canonical: dict[str, dict[str, str]] | None = None) -> TrialContext:  # fmt: skip
    binaries = _binaries()
    run = RunContext(binaries, USER, workdir, workdir / "private", Path("/s"), canonical or {},
                     host=host, run_id="run", registry=Path("/registry"))  # fmt: skip
    cluster = Cluster(binaries, USER, workdir / "c1", Path("/s/c1"), host=host)
    return TrialContext("r1-c01", settings, {}, run, Server("c1", cluster, binaries))


class _Server:
    """The SQL a started server answers: its start time, its settings as written, and a
    configuration load time that moves on each reload."""

    def __init__(self, host: RecordingHost) -> None:
        self.host, self.loads = host, 0

    def __call__(self, query: str, params: Any) -> list[tuple[Any, ...]]:
        if "pg_postmaster_start_time" in query:
            return [(dt.datetime(2026, 11, 25),)]
        if "pg_conf_load_time" in query:
            self.loads += len([e for e in self.host.commands_run() if "reload" in e])
            return [(self.loads,)]
        if "FROM pg_settings" in query:
            conf = self.host.files["/w/c1/conf/postgresql.conf"]
            line = next(ln for ln in conf.splitlines() if ln.startswith(f"{params[0]} = "))
            value = line.split("'")[1]
            return [(value, False, "configuration file", value)]
        raise Unscripted(query)


def _server_host() -> RecordingHost:
    host = RecordingHost(commands=[(argv_starts("pg_ctl"), Reply(0, "server started\n"))],
                         users={None: (0, 0), "pgsweep": (999, 999)})  # fmt: skip
    host.sql = _Server(host)
    return host


def test_server_levels_start_then_reload_then_restart() -> None:
    host = _server_host()
    layer = ServerLayer()  # restart or reload: the catalog of the binaries the server runs
    trial = _trial(host, {"server": {}})
    layer.prepare({"shared_buffers": "128MB", "synchronous_commit": "on"}, trial)
    assert trial.events == ["start"]
    conf = host.files["/w/c1/conf/postgresql.conf"]
    assert "synchronous_commit = 'on'" in conf and "listen_addresses = ''" in conf
    assert [c[-1] for c in host.commands_run()] == ["start"]
    # a user-context change: the file rewritten, a reload, no stop
    trial2 = TrialContext("r1-c02", {}, {}, trial.run, trial.server)
    host.processes = {}  # the server is running: postmaster.pid names a live postmaster
    host.files["/w/c1/data/postmaster.pid"] = "4242\n"
    host.processes[4242] = (["postgres", "-D", "/w/c1/conf"], 999)
    layer.prepare({"shared_buffers": "128MB", "synchronous_commit": "off"}, trial2)
    assert trial2.events == ["reload"]
    assert [c[-1] for c in host.commands_run()] == ["start", "reload"]
    # a postmaster-context change: stop, then start
    trial3 = TrialContext("r1-c03", {}, {}, trial.run, trial.server)
    layer.prepare({"shared_buffers": "256MB", "synchronous_commit": "off"}, trial3)
    assert trial3.events == ["restart"]
    assert [c[-1] for c in host.commands_run()] == ["start", "reload", "stop", "start"]
    assert trial3.effective["shared_buffers"] == "256MB"


def test_a_level_the_server_does_not_run_with_fails_the_trial() -> None:
    host = _server_host()
    layer = ServerLayer()
    # what `plan`'s start check saw the level show: not what this server will show
    trial = _trial(host, {"server": {}}, canonical={"synchronous_commit": {"on": "off"}})
    with pytest.raises(TrialFailure, match="the level 'on' means 'off' but the server runs"):
        layer.prepare({"synchronous_commit": "on"}, trial)


def test_kernel_values_are_journaled_then_written_and_put_back_in_reverse(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    thp = THP_FILES["thp"]
    host = RecordingHost(files={str(thp): "always [madvise] never",
                                "/proc/sys/vm/swappiness": "60"},
                         users={None: (0, 0), "pgsweep": (999, 999)})  # fmt: skip
    layer = OsLayer()
    settings = OsSettings(True, None, {"thp": "never"}, None, None, False, None,
                          {"vm.swappiness": "10"})  # fmt: skip
    trial = _trial(host, {"os": settings, "workload": None})
    # the sysctl floors are read from this machine's /proc: not what this test is about
    monkeypatch.setattr("pgsweep.layers.sysctls.recheck", lambda values: None)
    layer.prepare(settings, trial)
    assert trial.effective["os.thp"] == "never"
    assert trial.effective["os.sysctl.vm.swappiness"] == "10"
    kinds = [(e.kind, e.what) for e in host.effects if e.kind in ("journal", "write_kernel")]
    assert kinds == [("journal", "/registry/run.undo"), ("write_kernel", str(thp)),
                     ("journal", "/registry/run.undo"),
                     ("write_kernel", "/proc/sys/vm/swappiness")]  # fmt: skip
    layer.finish_run(trial.run)
    assert host.files[str(thp)] == "always [madvise] never"
    assert host.files["/proc/sys/vm/swappiness"] == "60"
    undone = [e.what for e in host.kinds("write_kernel")][2:]
    assert undone == ["/proc/sys/vm/swappiness", str(thp)]  # newest first
