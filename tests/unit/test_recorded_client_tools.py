"""sysbench and pgreplay on the client's host ([roles] client), on recording hosts
(milliseconds, nothing touched): the primary admits a replay's roles by name from that
host's address alone, each quoted so a name from the log is taken literally, and a name
pg_hba.conf cannot hold is refused before anything is written; the replayed log is copied
into the trial's folder there, the server user's and read-only, and pgreplay is pointed at
the server's address; a log too large to copy, or a role name that cannot be admitted, is
exit 2 at validation naming workload.replay. The real runs are
tests/integration/test_hosts.py."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from pgsweep.engine.sides import Side
from pgsweep.errors import PgsweepError
from pgsweep.host.local import LOCAL
from pgsweep.host.proc import RunAs
from pgsweep.host.recording import RecordingHost
from pgsweep.layers.base import Source
from pgsweep.layers.context import TrialFailure
from pgsweep.layers.workload import WorkloadSettings
from pgsweep.layers.workload_tools import MAX_REMOTE_LOG, check_remote_client
from pgsweep.postgres.access import ClientAccess, ServerError
from pgsweep.postgres.binaries import Binaries
from pgsweep.postgres.cluster import Cluster
from pgsweep.postgres.pgreplay import Replay

USER = RunAs("pgsweep")
BIN = Binaries(Path("/usr/lib/postgresql/15/bin"), "15.18", {})
HERE, CLIENT = "10.0.0.1", "10.0.0.11"
FILE = """[experiment]
name = "x"
[workload]
tool = "pgreplay"
replay = "/tmp/capture.csv"
[hosts.loadgen]
ssh = "root@192.0.2.7"
[roles]
client = "loadgen"
"""


def _host(name: str) -> RecordingHost:
    return RecordingHost(name, users={None: (0, 0), "pgsweep": (999, 999)})


def _cluster(local: RecordingHost, roles: tuple[str, ...]) -> Cluster:
    c = Cluster(BIN, USER, Path("/w/c1"), Path("/s/c1"), host=local, port=40000)
    c.peers = [ClientAccess(HERE, CLIENT, "all", roles)]
    return c


def test_a_replays_roles_are_admitted_by_name_quoted_from_the_client_alone() -> None:
    local = _host("local")
    _cluster(local, ("app", "all", "+staff", "@file", "a b")).write_access_files()
    lines = [ln for ln in local.files["/w/c1/conf/pg_hba.conf"].splitlines()
             if ln.startswith("host")]  # fmt: skip
    # quoted, "all", "+staff" and "@file" are role names, not the keyword, a group or a file
    assert lines == [f'host all pgsweep,"app","all","+staff","@file","a b" {CLIENT}/32 '
                     "scram-sha-256"]  # fmt: skip


@pytest.mark.parametrize("role", ['x" trust', "a\nhost all all 0.0.0.0/0 trust", ""])
def test_a_role_name_hba_cannot_hold_is_refused_before_anything_is_written(role: str) -> None:
    local = _host("local")
    with pytest.raises(ServerError, match=r"cannot be written in pg_hba\.conf"):
        _cluster(local, ("app", role)).write_access_files()
    assert "/w/c1/conf/pg_hba.conf" not in local.files


def test_the_log_is_copied_to_the_clients_trial_folder_and_pgreplay_reaches_the_address(
    tmp_path: Path,
) -> None:
    log = tmp_path / "replay.csv"
    log.write_text("2026-11-26 10:53:07.636 UTC,app,postgres,...\n")
    client = _host("loadgen")
    folder = Path("/var/tmp/pgsweep-work-x/trials/r1-c01")
    side = Side(client, folder, ["-h", HERE, "-p", "40000", "-U", "pgsweep"],
                {"PGPASSFILE": "/var/tmp/pgsweep-work-x/passfile"}, (999, 999), True,
                os.geteuid(), LOCAL)  # fmt: skip
    replay = side.replayed(Replay(str(log), 2.0, 2))
    assert replay == Replay(str(folder / "replay.csv"), 2.0, 2)
    (write,) = client.kinds("write_file")
    assert write.what == str(folder / "replay.csv")
    assert write.detail["mode"] == "0o400" and write.detail["owner"] == (999, 999)
    assert client.files[str(folder / "replay.csv")] == log.read_text()
    assert side.address(None) == (HERE, 40000)  # type: ignore[arg-type]
    assert replay.argv("/usr/bin/pgreplay", HERE, 40000)[:6] == [
        "/usr/bin/pgreplay", "-c", "-h", HERE, "-p", "40000"]


def test_a_link_in_place_of_the_frozen_log_is_not_followed(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("root's\n")
    (tmp_path / "replay.csv").symlink_to(secret)
    client = _host("loadgen")
    side = Side(client, Path("/var/tmp/t"), ["-h", HERE, "-p", "1", "-U", "pgsweep"], None,
                (999, 999), True, os.geteuid(), LOCAL)  # fmt: skip
    with pytest.raises(TrialFailure, match=r"is a symbolic link; pgsweep does not follow it"):
        side.replayed(Replay(str(tmp_path / "replay.csv"), 1.0, 1))
    assert not client.kinds("write_file")


def _settings(**kw: object) -> WorkloadSettings:
    base = WorkloadSettings(script="tpcb-like", clients=1, jobs=1, duration_s=2, warmup_s=0,
                            rate=None, latency_limit_ms=None, protocol="simple",
                            prewarm=False, latency_log="off", max_tries=1, writes=True,
                            tool="pgreplay", replay="/tmp/capture.csv", replay_roles=("app",),
                            replay_bytes=1000)  # fmt: skip
    return dataclasses.replace(base, **kw)


@pytest.mark.parametrize(("change", "said"), [
    ({"replay_bytes": MAX_REMOTE_LOG + 1}, f"at most {MAX_REMOTE_LOG:,}"),
    ({"replay_roles": ("app", 'x"y')}, "a role name pg_hba.conf cannot hold"),
])  # fmt: skip
def test_a_replay_the_client_host_cannot_take_is_refused_naming_the_key(
    change: dict[str, object], said: str
) -> None:
    source = Source(Path("/tmp/exp.toml"), FILE)
    with pytest.raises(PgsweepError) as caught:
        check_remote_client(source, [{"workload": _settings(**change)}], remote=True)
    assert said in caught.value.what
    assert caught.value.where == "/tmp/exp.toml:5: workload.replay"
    # beside the server the same log is replayed as it is: nothing to copy or admit
    check_remote_client(source, [{"workload": _settings(**change)}], remote=False)
    check_remote_client(source, [{"workload": _settings()}], remote=True)


def test_plan_says_when_a_replays_server_side_statement_time_is_missing() -> None:
    """pg_stat_statements changes the server, so pgsweep loads it only when the file does:
    plan names the replayed configurations that will have pgreplay's own times only."""
    from pgsweep.layers.workload_tools import replay_notes

    replay = _settings()
    bare = {"workload": replay, "server": {}}
    loaded = {"workload": replay,
              "server": {"shared_preload_libraries": "pg_wait_sampling,pg_stat_statements"}}
    pgbench = {"workload": _settings(tool="pgbench", replay=None), "server": {}}
    (note,) = replay_notes([bare, loaded, pgbench])
    assert note.startswith("1 replayed configuration(s) without pg_stat_statements")
    assert replay_notes([loaded, pgbench]) == []
