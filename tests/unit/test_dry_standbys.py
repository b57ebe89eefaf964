"""`plan --commands` shows the standbys (engine/dryrun.py, engine/drysides.py): the base
backup from the running primary with its slot, the standby's server started, a new set
after the primary's data is put back, and their removal at the end; a standby on another
host is walked on a dry host of its own, its commands printed under that host, over TCP to
the address `plan` found, with the run's passfile. The primary's pretend
pg_stat_replication shows each standby made streaming in the sync state asked for, so
the walk goes on as a run would. Nothing is made (the run's own checks in
tests/integration/test_plan_commands.py compare the machine before and after)."""

from __future__ import annotations

import re
from pathlib import Path

from conftest import requires_pg, write_experiment
from pgsweep import spec
from pgsweep.engine import dryrun, plans

pytestmark = requires_pg
BODY = """
[experiment]
name = "dry-standbys"
seed = 1
[cluster]
scale = 1
[workload]
script = "tpcb-like"
duration = "2s"
warmup = "0s"
[replication]
standbys = 2
mode = "sync"
sync_standbys = "FIRST 1"
[factors]
server.shared_buffers = ["128MB", "256MB"]
[repeat]
rounds = 1
"""
FAR = """
[hosts.far]
ssh = "root@10.9.9.9"
[roles]
standbys = ["local", "far"]
"""


def _commands(tmp: Path, body: str, reached: dict[str, str]) -> str:
    exp = spec.load(write_experiment(tmp, body))
    results = tmp / "r"
    plan = plans.plan_for(exp, plans.preflight(exp, results))
    out = "\n".join(dryrun.commands(exp, plan, results, None, reached))
    assert not results.exists()
    return out


def _section(out: str, title: str) -> str:
    start = out.index(title)
    end = out.find("\n\n", start)
    return out[start:] if end < 0 else out[start:end]


def test_standbys_beside_the_primary_are_made_started_and_taken_down(tmp_path: Path) -> None:
    out = _commands(tmp_path, BODY, {})
    first = _section(out, "the first with new cluster")
    assert "new-standbys" in first.splitlines()[0]
    made = re.findall(r"pg_basebackup -h (\S+) .* -D \S+/standbys/(cluster-1-1-s[12])/data "
                      r"-X stream -R -c fast -C -S pgsweep_(s[12])", first)  # fmt: skip
    assert [(m[1], m[2]) for m in made] == [("cluster-1-1-s1", "s1"), ("cluster-1-1-s2", "s2")]
    primary_socket = re.search(r"pgbench -h (\S+) .* -i ", first)
    assert primary_socket and {m[0] for m in made} == {primary_socket[1]}
    # each standby's server is started after its base backup, before the measured window
    for name in ("s1", "s2"):
        backup = first.index(f"-S pgsweep_{name}")
        start = re.compile(rf"pg_ctl -D \S+/standbys/cluster-1-1-{name}/conf .* start$", re.M)
        started = start.search(first, backup)
        assert started and started.start() < first.index("-T 2 -P 1"), first
    # the next trial restores the primary's data: the old standbys go, new ones are made
    restore = _section(out, "the first with restore")
    assert "remove" in restore and "standbys/cluster-1-1-s1" in restore
    assert "standbys/cluster-1-2-s1/data" in restore
    end = _section(out, "after the last trial")
    assert re.search(r"remove \S+/standbys/cluster-1-\d+-s2", end), end
    assert "the standbys (pg_basebackup" not in out  # shown, not named


def test_a_standby_on_another_host_is_walked_there_over_tcp(tmp_path: Path) -> None:
    out = _commands(tmp_path, BODY + FAR, {"far": "127.0.0.1 41000 127.0.0.2 22"})
    port = re.search(r"host far \(standby s2, through `pgsweep agent` over ssh\): over TCP "
                     r"to 127\.0\.0\.1:(\d+) ", out)  # fmt: skip
    assert port, out
    first = _section(out, "the first with new cluster")
    here, there = first.split("\n    on host far:\n")
    # s1 beside the primary, s2 on far: cloned there over TCP with the run's passfile
    assert "-S pgsweep_s1" in here and "-S pgsweep_s2" not in here
    work = "/var/tmp/pgsweep-work-r-DRYRUN"
    assert re.search(rf"pg_basebackup -h 127\.0\.0\.1 -p {port[1]} -U pgsweep -D {work}/"
                     r"standbys/cluster-1-1-s2/data .*-S pgsweep_s2", there), there
    assert re.search(rf"pg_ctl -D {work}/standbys/cluster-1-1-s2/conf .* start$", there, re.M)
    # the primary listens on the address far reaches, and admits far's address alone
    assert "-c listen_addresses=127.0.0.1 " in here and f"-c port={port[1]} " in here
    end = _section(out, "after the last trial")
    assert re.search(rf"on host far:\n\s+.*{work}/standbys/cluster-1-\d+-s2", end), end
    assert "standby s2 on host far" not in _section(out, "not shown")


def test_quorum_standbys_are_walked_too(tmp_path: Path) -> None:
    """ANY 1: the dry primary shows both standbys in quorum, which is what the walk waits
    for (a state it did not know would leave the trial unshown after a minute's wait)."""
    out = _commands(tmp_path, BODY.replace('"FIRST 1"', '"ANY 1"'), {})
    first = _section(out, "the first with new cluster")
    assert "new-standbys" in first.splitlines()[0]
    assert "-S pgsweep_s1" in first and "-S pgsweep_s2" in first
    assert "not shown" in out and "and those like it" not in out  # no trial refused


def test_a_standby_host_plan_found_no_address_of_is_named_not_walked_here(
    tmp_path: Path,
) -> None:
    """Without that host's address the standbys are not walked at all (walked, the far one
    would look as if it ran beside the primary)."""
    out = _commands(tmp_path, BODY + FAR, {})
    assert "-S pgsweep_s" not in out  # no base backup shown
    shown = _section(out, "not shown")
    assert "the standbys, all of them" in shown and "standby s2 on host far" in shown


ELSEWHERE = """
[hosts.db]
ssh = "root@10.9.9.2"
[hosts.far]
ssh = "root@10.9.9.3"
[roles]
server = "db"
standbys = ["db", "far"]
"""


def test_a_server_elsewhere_has_one_standby_beside_it_and_one_on_a_host_of_its_own(
    tmp_path: Path,
) -> None:
    """[roles] server on db, s1 beside it (its name) and s2 on far: s2 is cloned on far over
    TCP to db's address as this machine reached it, which db alone listens on and admits
    far's address (and this machine's, the client's) from."""
    reached = {"db": "10.9.9.1 50000 10.9.9.2 22", "far": "10.9.9.1 41000 10.9.9.3 22"}
    out = _commands(tmp_path, BODY + ELSEWHERE, reached)
    assert re.search(r"host far \(standby s2, through `pgsweep agent` over ssh\): over TCP to "
                     r"10\.9\.9\.2:5432 \(a port free on db when the run starts\), as the "
                     r"server admits from 10\.9\.9\.3 alone", out), out  # fmt: skip
    assert "this machine (the client): the tool over TCP to 10.9.9.2:5432" in out
    first = _section(out, "the first with new cluster")
    here, there = first.split("\n    on host far:\n")
    assert "-S pgsweep_s1" in here and "-S pgsweep_s2" not in here  # s1 beside it on db
    work = "/var/tmp/pgsweep-work-r-DRYRUN"  # far's agent's work area
    assert re.search(rf"pg_basebackup -h 10\.9\.9\.2 -p 5432 -U pgsweep -D {work}/"
                     r"standbys/cluster-1-1-s2/data .*-S pgsweep_s2", there), there
    assert "-c listen_addresses=10.9.9.2 " in here
    assert "standby s2 on host far" not in _section(out, "not shown")  # walked, not named
    # far not reached by plan: its standby is named, and none is walked as if beside db
    unreached = _commands(tmp_path, BODY + ELSEWHERE, {"db": reached["db"]})
    assert "-S pgsweep_s" not in unreached
    assert "standby s2 on host far" in _section(unreached, "not shown")
