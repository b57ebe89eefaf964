"""Layer logic on a recording host (host/recording.py): milliseconds each, nothing on this
machine touched. What only real runs reached before: huge page sizing and its retry when
the kernel gives fewer pages, kernel values journaled before they are written and put
back in reverse, a cgroup handed to the server user, restart versus reload, the first
start, and a trial's snapshot restore. Each has a real run elsewhere in the suite."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from pgsweep.host.journal import UndoJournal
from pgsweep.host.kernelfiles import COMPACT_MEMORY, DROP_CACHES, THP_FILES, hugepage_pool
from pgsweep.host.proc import RunAs
from pgsweep.host.recording import RecordingHost, Reply, Unscripted, argv_starts
from pgsweep.layers import hugepages
from pgsweep.layers.cluster import ClusterSettings
from pgsweep.layers.context import RunContext, Server, TrialContext, TrialFailure
from pgsweep.layers.oslayer import OsLayer, OsSettings, _pages_key
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
           canonical: dict[str, dict[str, str]] | None = None,
           run_id: str = "run") -> TrialContext:  # fmt: skip
    binaries = _binaries()
    run = RunContext(binaries, USER, workdir, workdir / "private", Path("/s"), canonical or {},
                     host=host, run_id=run_id, registry=Path("/registry"))  # fmt: skip
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
    # pg_ctl is told the postgres beside it: it would run `postgres -V` twice to find it
    (start,) = host.commands_run()
    assert start[start.index("-p") + 1] == "/usr/lib/postgresql/15/bin/postgres", start
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


def test_kernel_values_are_journaled_then_written_and_put_back_in_reverse() -> None:
    thp = THP_FILES["thp"]
    host = RecordingHost(files={str(thp): "always [madvise] never",
                                "/proc/sys/vm/swappiness": "60"},
                         users={None: (0, 0), "pgsweep": (999, 999)})  # fmt: skip
    layer = OsLayer()
    settings = OsSettings(True, None, {"thp": "never"}, None, None, False, None,
                          {"vm.swappiness": "10"})  # fmt: skip
    trial = _trial(host, {"os": settings, "workload": None})
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


# ---- layer objects hold no run state: one layer, several hosts, several runs ------------

MB_POOL = hugepage_pool(2048) / "nr_hugepages"


def _os_host(name: str) -> RecordingHost:
    return RecordingHost(name, files={str(THP_FILES["thp"]): "always [madvise] never",
                                      str(MB_POOL): "0", "/proc/meminfo": MEMINFO},
                         users={None: (0, 0), "pgsweep": (999, 999)})  # fmt: skip


def _os_settings(thp: str | None = "never", huge: str | None = None) -> OsSettings:
    return OsSettings(True, huge, {"thp": thp} if thp else {}, None, None, False, None, {})


def _os_trial(host: RecordingHost, settings: OsSettings, run_id: str = "run") -> TrialContext:
    cluster = ClusterSettings(1, None, None, False, None)
    work = SimpleNamespace(warmup_s=0, prewarm=False)
    return _trial(host, {"os": settings, "server": {}, "cluster": cluster, "workload": work},
                  run_id=run_id)  # fmt: skip


def test_one_os_layer_prepares_two_hosts_each_with_its_own_journal() -> None:
    """A layer that kept its journal (bound to the first host) would journal and write
    the second host's value on the first: the second host's read-back fails."""
    layer, a, b = OsLayer(), _os_host("a"), _os_host("b")
    trial_a, trial_b = _os_trial(a, _os_settings()), _os_trial(b, _os_settings())
    layer.prepare(_os_settings(), trial_a)
    layer.prepare(_os_settings(), trial_b)
    for host, trial in ((a, trial_a), (b, trial_b)):
        assert trial.effective["os.thp"] == "never"
        writes = [(e.what, e.detail["new"]) for e in host.kinds("write_kernel")]
        assert writes == [(str(THP_FILES["thp"]), "never")], host.name
        assert len(host.kinds("journal")) == 1  # this host's original, in its journal
    layer.finish_run(trial_b.run)  # the end of b's run puts b back, and only b
    assert b.files[str(THP_FILES["thp"])] == "always [madvise] never"
    assert a.files[str(THP_FILES["thp"])] == "always madvise [never]"
    layer.finish_run(trial_a.run)
    assert a.files[str(THP_FILES["thp"])] == "always [madvise] never"


def test_huge_pages_reserved_on_one_host_are_reserved_again_on_the_next() -> None:
    """The pools' size is each host's: a layer that remembered what it sized (for the
    same level and settings) would start the second host's server without its pages."""
    layer, a, b = OsLayer(), _os_host("a"), _os_host("b")
    settings = _os_settings(thp=None, huge="2MB")
    key = _pages_key("2MB", {}, (), _binaries().bindir)
    layer.pages[key] = 70  # what `postgres -C` said when the file was validated
    for host in (a, b):
        trial = _os_trial(host, settings)
        demand = layer.prepare(settings, trial)
        assert host.files[str(MB_POOL)] == "70", host.name
        assert trial.events == ["huge-pages-2MB"]
        assert trial.effective["os.huge_pages.reserved"] == "70"
        assert demand is not None and demand.server_settings["huge_page_size"] == "2MB"
        layer.finish_run(trial.run)
        assert host.files[str(MB_POOL)] == "0", host.name  # given back at the run's end


def test_a_second_run_journals_again_and_puts_back_what_it_changed() -> None:
    """Two runs on one host (a test process, a fleet's shard): the second's journal is
    its own. A layer that kept the first run's journal would not record the original
    again (the first had), and the second run's end would leave the value changed."""
    layer, host = OsLayer(), _os_host("a")
    for run_id in ("run-1", "run-2"):
        trial = _os_trial(host, _os_settings(), run_id)
        layer.prepare(_os_settings(), trial)
        assert host.files[str(THP_FILES["thp"])] == "always madvise [never]"
        assert host.journals == {f"/registry/{run_id}.undo": [
            json.dumps({"file": str(THP_FILES["thp"]), "original": "madvise"})]}
        layer.finish_run(trial.run)
        assert host.files[str(THP_FILES["thp"])] == "always [madvise] never", run_id
        assert host.journals == {}


def test_each_run_numbers_its_clusters_from_one() -> None:
    first, second = _trial(_os_host("a"), {}).run, _trial(_os_host("a"), {}).run
    assert [first.next_number("cluster") for _ in range(2)] == [1, 2]
    assert second.next_number("cluster") == 1 and first.next_number("storage") == 1


def test_a_configuration_leaving_a_kernel_value_unset_runs_with_the_machines_own() -> None:
    """`run --against` with [os] in one file only: the other file's configurations set no
    kernel value; they must run with what the machine had, not what the last "before"
    trial left (THP and a sysctl back at their originals, the server restarted for THP,
    the huge pages given back), and a configuration setting the value again sets it."""
    layer, host = OsLayer(), _os_host("a")
    host.files["/proc/sys/vm/swappiness"] = "60"
    key = _pages_key("2MB", {}, (), _binaries().bindir)
    layer.pages[key] = 70
    before = OsSettings(True, "2MB", {"thp": "never"}, None, None, False, None,
                        {"vm.swappiness": "10"})  # fmt: skip
    after = OsSettings(False, None, {}, None, None, False, None, {})
    first = _os_trial(host, before)
    layer.prepare(before, first)
    assert host.files[str(MB_POOL)] == "70" and host.files["/proc/sys/vm/swappiness"] == "10"
    second = TrialContext("r1-c02", first.settings | {"os": after}, {}, first.run, first.server)
    demand = layer.prepare(after, second)
    assert host.files[str(THP_FILES["thp"])] == "always [madvise] never"
    assert host.files["/proc/sys/vm/swappiness"] == "60"
    assert host.files[str(MB_POOL)] == "0"  # no pages left for the server to use
    assert second.effective["os.thp"] == "madvise"
    assert demand is not None and demand.server_settings == {}
    third = TrialContext("r1-c03", first.settings, {}, first.run, first.server)
    layer.prepare(before, third)
    assert host.files["/proc/sys/vm/swappiness"] == "10" and host.files[str(MB_POOL)] == "70"
    layer.finish_run(first.run)  # the originals, recorded once, put back at the end
    assert host.files["/proc/sys/vm/swappiness"] == "60"
    assert host.files[str(THP_FILES["thp"])] == "always [madvise] never"


def test_the_dry_host_runs_a_server_through_start_reload_restart_and_touches_nothing(
    tmp_path: Path,
) -> None:
    """plan --commands' host (engine/dryhost.py): pg_ctl start leaves a pretend postmaster
    (a PID no Linux process can have), the server layer reads its levels back, a
    user-context change reloads and a postmaster one restarts, exactly as on a real
    server; every effect is recorded and nothing is made on the machine."""
    from pgsweep.engine.dryhost import DryHost

    host = DryHost({None: (0, 0), "pgsweep": (999, 999)}, {"shared_buffers": {"128MB": "16384",
                   "256MB": "32768"}})  # fmt: skip
    work = tmp_path / "work"  # not made: every path below it is only recorded
    trial = _trial(host, {"server": {}}, workdir=work)
    trial.cluster.create([])
    layer = ServerLayer()
    layer.prepare({"shared_buffers": "128MB", "synchronous_commit": "on"}, trial)
    pid = trial.cluster.postmaster_pid()
    assert pid is not None and pid > 2**22 and trial.events == ["start"]
    assert trial.effective["shared_buffers"] == "128MB"  # its setting (16384) was checked
    for wanted, event in (({"shared_buffers": "128MB", "synchronous_commit": "off"}, "reload"),
                          ({"shared_buffers": "256MB", "synchronous_commit": "off"}, "restart")):
        step = TrialContext("r1-c02", {}, {}, trial.run, trial.server)
        layer.prepare(wanted, step)
        assert step.events == [event]
    argvs = host.commands_run()
    assert Path(argvs[0][0]).name == "initdb" and argvs[-1][-1] == "start"
    assert [a[-1] for a in argvs if Path(a[0]).name == "pg_ctl"] == [
        "start", "reload", "stop", "start"]
    trial.server.stop()
    assert trial.cluster.postmaster_pid() is None
    assert not work.exists() and not list(tmp_path.iterdir())
