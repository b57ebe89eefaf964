"""Standbys on other hosts, on recording hosts (milliseconds, nothing touched): the
primary admits each other host for what its role needs alone, a standby placed on a host
is made there over TCP with the run's passfile (one here from the private socket), and a
set of standbys made over a connection that was lost is dropped, not reused; the
standbys' network namespaces (replication.network) are journaled, made and taken down
through the host. The real runs are tests/integration/test_hosts.py and
test_replication.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pgsweep.host import netns
from pgsweep.host.journal import UndoJournal
from pgsweep.host.proc import RunAs
from pgsweep.host.recording import RecordingHost, Reply, argv_starts
from pgsweep.layers.context import HostSide, RunContext, Server, TrialContext
from pgsweep.layers.replication import ReplicationLayer, ReplicationRun, ReplicationSettings
from pgsweep.postgres.access import ClientAccess
from pgsweep.postgres.binaries import Binaries
from pgsweep.postgres.cluster import Cluster
from pgsweep.postgres.standby import ReplicaSet

USER = RunAs("pgsweep")
BIN = Binaries(Path("/usr/lib/postgresql/15/bin"), "15.18", {})
HERE, CLIENT, REPLICA = "10.0.0.1", "10.0.0.11", "10.0.0.12"


def _host(name: str) -> RecordingHost:
    return RecordingHost(name, users={None: (0, 0), "pgsweep": (999, 999)},
                         commands=[(argv_starts("pg_basebackup"), Reply(0, "")),
                                   (argv_starts("pg_ctl"), Reply(0, ""))])  # fmt: skip


class _Droppable(RecordingHost):
    lost = False

    def alive(self) -> bool:
        return not self.lost


def _side(host: RecordingHost, epoch: int = 0) -> HostSide:
    work = Path("/var/tmp/pgsweep-work-x")
    return HostSide(host, work, HERE, REPLICA, 40000, work / "passfile", "SCRAM-SHA-256$v",
                    "secret", Path("/tmp/pgsweep-r"), epoch)  # fmt: skip


def _settings(standbys: int) -> ReplicationSettings:
    return ReplicationSettings(standbys, "async", "FIRST", 1, False, None, 10.0)


def _trial(local: RecordingHost, sides: tuple[HostSide | None, ...]) -> TrialContext:
    run = RunContext(BIN, USER, Path("/w"), Path("/w/private"), Path("/s"), {}, host=local,
                     standby_sides=sides, run_id="run", registry=Path("/registry"))  # fmt: skip
    run.state["replication"] = ReplicationRun(UndoJournal(Path("/registry/run.undo"), None,
                                                          local), Path("/w/standbys"))  # fmt: skip
    primary = Cluster(BIN, USER, Path("/w/cluster-1"), Path("/s/c1"), host=local, port=40000)
    return TrialContext("r1-c01", {}, {}, run, Server("cluster-1", primary, BIN))


def test_the_primary_admits_the_client_to_databases_and_a_standby_host_to_replication() -> None:
    local = _host("local")
    c = Cluster(BIN, USER, Path("/w/c1"), Path("/s/c1"), host=local, port=40000)
    c.peers = [ClientAccess(HERE, CLIENT, "all"), ClientAccess(HERE, REPLICA, "replication")]
    c.write_access_files()
    c.write_settings({})
    host_lines = [ln for ln in local.files["/w/c1/conf/pg_hba.conf"].splitlines()
                  if ln.startswith("host")]  # fmt: skip
    assert host_lines == [f"host all pgsweep {CLIENT}/32 scram-sha-256",
                          f"host replication pgsweep {REPLICA}/32 scram-sha-256"]  # fmt: skip
    # one address for both (the hosts reach this machine by the same one), given once
    assert f"listen_addresses = '{HERE}'" in local.files["/w/c1/conf/postgresql.conf"]


def test_a_standby_placed_on_a_host_is_cloned_there_over_tcp_and_s2_here() -> None:
    local, replica = _host("local"), _host("replica")
    trial = _trial(local, (_side(replica), None))
    replicas = ReplicaSet("shape", [], 0)
    ReplicationLayer()._make(_settings(2), trial, trial.server, replicas)
    (there,) = [e for e in replica.kinds("run")]
    argv = list(there.detail["argv"])
    assert argv[:7] == [str(BIN.bindir / "pg_basebackup"), "-h", HERE, "-p", "40000",
                        "-U", "pgsweep"]  # fmt: skip
    assert there.detail["user"] == "pgsweep"
    assert there.detail["env"] == {"PGPASSFILE": "/var/tmp/pgsweep-work-x/passfile",
                                   "PGSSLMODE": "disable"}  # fmt: skip
    assert argv[argv.index("-D") + 1].startswith("/var/tmp/pgsweep-work-x/standbys/")
    (here,) = [e for e in local.kinds("run")]
    assert list(here.detail["argv"])[1:3] == ["-h", "/s/c1"] and here.detail["env"] == {}
    s1, s2 = replicas.standbys
    assert s1.host is replica and s2.host is local
    conninfo = s1.managed()["primary_conninfo"]
    assert f"host={HERE} port=40000" in conninfo
    assert "passfile=/var/tmp/pgsweep-work-x/passfile" in conninfo
    assert "passfile=/dev/null" in s2.managed()["primary_conninfo"]  # trust, socket


def test_standbys_made_over_a_lost_connection_are_dropped_and_made_again() -> None:
    local = _host("local")
    replica = _Droppable("replica", users={None: (0, 0), "pgsweep": (999, 999)},
                         commands=[(argv_starts("pg_basebackup"), Reply(0, ""))])  # fmt: skip
    side = _side(replica)
    trial = _trial(local, (side,))
    layer = ReplicationLayer()
    layer.active = True
    old = ReplicaSet(_settings(1).shape(), [], 0, epochs=(0,))
    layer._make(_settings(1), trial, trial.server, old)
    trial.server.replicas = old
    layer.prepare(_settings(1), trial)
    assert trial.server.replicas is old  # the same connection: kept
    replica.lost = True  # its connection broke; the engine reached the host again
    side.host, side.epoch = _host("replica"), 1
    mark = len(replica.effects)
    layer.prepare(_settings(1), trial)
    fresh = trial.server.replicas
    assert fresh is not old and fresh.epochs == (1,) and fresh.standbys == []
    # the old standbys' agent took them down as it ended: nothing is asked of that host
    assert replica.effects[mark:] == []


def test_the_standbys_network_is_journaled_then_made_and_taken_down_through_its_host() -> None:
    host = RecordingHost("local", commands=[(argv_starts("ip"), Reply(0, "")),
                                            (argv_starts("tc"), Reply(0, ""))])  # fmt: skip
    journal = UndoJournal(Path("/registry/run.undo"), None, host)
    link = netns.create(journal, "4242-99", 1, 10_000_000, Path("/w/private/netns"), host)
    p, s = "pgsweep-4242-99-1-p", "pgsweep-4242-99-1-s"
    assert (link.primary_ns, link.standby_ns) == (p, s)
    order = [e.kind if e.kind == "journal" else e.what for e in host.effects
             if e.kind in ("journal", "run")]  # fmt: skip
    assert order[:4] == ["journal", f"ip netns add {p}", "journal", f"ip netns add {s}"]
    assert [json.loads(e.detail["entry"]) for e in host.kinds("journal")] == [
        {"netns": p}, {"netns": s}]  # fmt: skip
    assert f"tc -n {p} qdisc add dev pgsweep0 root tbf rate 10000000bit" in host.effects[-1].what
    for name in (p, s):  # both exist now: taken down in reverse
        host.files[f"/run/netns/{name}"] = ""
    mark = len(host.effects)
    link.destroy()
    assert [e.what for e in host.effects[mark:] if e.kind == "run"] == [
        f"ip netns delete {s}", f"ip netns delete {p}"]  # fmt: skip


def test_a_journal_entry_naming_another_namespace_or_link_is_refused() -> None:
    host = RecordingHost("local")
    for name in ("eth0", "pgsweep-1-2-3-p; reboot", "../../run/netns/x"):
        with pytest.raises(OSError, match="not a namespace pgsweep makes"):
            netns.undo_entry({"netns": name}, Path("/w/private"), host)
    assert host.effects == []


def test_the_standby_read_load_runs_on_each_standbys_own_host_and_is_stopped_there() -> None:
    """workload.standby_script: each standby's pgbench starts on its host (here for s1, the
    replica's host for s2), as the server user, over that standby's socket; its output is
    read back from that host, the two summaries add up, and each is stopped and its files
    removed there. One that printed no summary fails the trial naming its host."""
    from conftest import DATA
    from pgsweep.layers.standby_load import StandbyLoad
    from pgsweep.postgres.pgbench import Workload
    from pgsweep.store import TrialRecord

    outs = [(DATA / "pgbench" / f"pg15-{n}.out").read_text()
            for n in ("select-sampled0.1", "tpcb-summary")]  # fmt: skip
    local, replica = _host("here"), _host("replica")
    local.commands.append((argv_starts("pgbench"), Reply(0, outs[0])))
    replica.commands.append((argv_starts("pgbench"),
                             Reply(0, outs[1])))  # fmt: skip
    trial = _trial(local, ())
    s1 = Cluster(BIN, USER, Path("/w/standbys/s1"), Path("/s/c1s1"), host=local)
    s2 = Cluster(BIN, USER, Path("/var/tmp/pgsweep-work-x/standbys/s2"), Path("/tmp/r/c1s2"),
                 host=replica)  # fmt: skip
    load = StandbyLoad({"s1": s1, "s2": s2}, Workload("select-only", 1, 1, 2))
    load.begin(trial)
    record = TrialRecord("r1-c01", 1, 1, "c01", "ok", "", "")
    load.end(trial, record)
    for host, standby in ((local, s1), (replica, s2)):
        (started,) = host.kinds("start")
        argv = list(started.detail["argv"])
        assert started.detail["user"] == "pgsweep"
        assert argv[argv.index("-h") + 1] == str(standby.socket_dir)  # its socket there
        assert argv[argv.index("-b") + 1] == "select-only" and argv[argv.index("-T") + 1] == "2"
        assert [e.kind for e in host.effects[-4:]] == ["stop", "remove_tree", "remove_tree",
                                                        "remove_tree"]  # fmt: skip
        assert all(e.what.startswith(str(standby.root)) for e in host.effects[-3:])
    tps = [float(line.split()[2]) for out in outs for line in out.splitlines()
           if line.startswith("tps = ")]  # fmt: skip
    assert record.metrics["standby.tps"] == pytest.approx(sum(tps))
    assert record.artifacts["standby-s2.out"].decode() == outs[1]

    replica.commands.insert(0, (argv_starts("pgbench"),
                                Reply(2, "", "connection to server failed")))  # fmt: skip
    load = StandbyLoad({"s2": s2}, Workload("select-only", 1, 1, 2))
    load.begin(trial)
    with pytest.raises(Exception, match=r"s2 \(exit 2\) on replica: connection to server failed"):
        load.end(trial, TrialRecord("r1-c01", 1, 1, "c01", "ok", "", ""))


def test_a_read_load_that_cannot_start_everywhere_stops_what_it_started() -> None:
    """s2's host cannot start pgbench (its script answers nothing): s1's pgbench, already
    started here, is stopped and its files removed before the error goes on; and when one
    host is lost while the loads are put away, the others are still put away."""
    from pgsweep.host.recording import Unscripted
    from pgsweep.layers.standby_load import StandbyLoad
    from pgsweep.postgres.pgbench import Workload

    local, replica = _host("here"), _host("replica")
    local.commands.append((argv_starts("pgbench"), Reply(0, "")))
    trial = _trial(local, ())
    s1 = Cluster(BIN, USER, Path("/w/standbys/s1"), Path("/s/c1s1"), host=local)
    s2 = Cluster(BIN, USER, Path("/var/tmp/w/standbys/s2"), Path("/tmp/r/c1s2"), host=replica)
    load = StandbyLoad({"s1": s1, "s2": s2}, Workload("select-only", 1, 1, 2))
    with pytest.raises(Unscripted):
        load.begin(trial)
    assert [e.kind for e in local.effects] == ["start", "stop", "remove_tree", "remove_tree",
                                               "remove_tree"]  # fmt: skip
    assert load.running == {}

    class _Lost(RecordingHost):
        def stop(self, pid: int, grace: float = 5.0) -> int | None:
            raise OSError("host replica was lost")

    lost = _Lost("replica", users={None: (0, 0), "pgsweep": (999, 999)},
                 commands=[(argv_starts("pgbench"), Reply(0, ""))])  # fmt: skip
    s2 = Cluster(BIN, USER, Path("/var/tmp/w/standbys/s2"), Path("/tmp/r/c1s2"), host=lost)
    load = StandbyLoad({"s2": s2, "s1": s1}, Workload("select-only", 1, 1, 2))
    load.begin(trial)
    with pytest.raises(OSError, match="was lost"):
        load._put_away()
    assert [e.kind for e in local.effects[-4:]] == ["stop", "remove_tree", "remove_tree",
                                                    "remove_tree"]  # s1's, after s2's loss
