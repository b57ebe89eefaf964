"""The server, client and standby roles on other hosts, for real: three "hosts" on this machine
(sshd in network namespaces of the test's own, joined by a bridge; tests/sshhosts.py),
reached over SSH with keys made for the test and a strict known_hosts file. pgbench runs
on h1 over TCP with the run's password; h2, a third host, is refused by the server's hba
even with the password; a standby on h2 streams over the bridge, admitted for replication
alone; sysbench and pgreplay run on h1 too, a replayed session's own role admitted by
name with the run's password; the controller killed with kill -9 mid-trial leaves
nothing on any host; a connection cut mid-trial fails that trial and the run goes on; the
server on h3, measured from here (its listener on h3's address alone, h2 refused), and
nothing left on h3 when the controller is killed."""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from conftest import pgsweep, pgsweep_start, postmasters, requires_pg, trials, write_experiment

pytestmark = [requires_pg, pytest.mark.postgres]
ROOT = Path(__file__).resolve().parents[2]
PGSWEEP = str(ROOT / ".venv" / "bin" / "pgsweep")

if os.geteuid() != 0 or not Path("/usr/sbin/sshd").exists():
    pytest.skip("needs root and sshd (scripts/setup.sh --dev)", allow_module_level=True)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from sshhosts import SimHost, ssh_hosts  # noqa: E402


@pytest.fixture(scope="module")
def hosts() -> Iterator[list[SimHost]]:
    with ssh_hosts(3) as made:
        yield made


def _host_table(name: str, h: SimHost) -> str:
    """The [hosts.NAME] entry of `h`: its key, known_hosts and this pgsweep."""
    return (f'[hosts.{name}]\nssh = "root@{h.address}"\nidentity_file = "{h.identity}"\n'
            f'known_hosts = "{h.known_hosts}"\npgsweep = "{PGSWEEP}"')


def _body(h: SimHost, duration: str = "2s", rounds: int = 2, extra: str = "",
          standby: SimHost | None = None) -> str:  # fmt: skip
    """pgbench on `h` (host loadgen); with `standby`, a synchronous standby s1 on it (host
    replica)."""
    replica = "" if standby is None else f"""
        {_host_table("replica", standby)}
        [replication]
        standbys = 1
        mode = "sync"
    """
    return f"""
        [experiment]
        name = "remote"
        seed = 3
        {_host_table("loadgen", h)}
        [roles]
        client = "loadgen"
        {'standbys = ["replica"]' if standby else ""}
        [cluster]
        scale = 1
        [workload]
        script = "{'tpcb-like' if standby else 'select-only'}"
        duration = "{duration}"
        rate = 200  # conftest.MECHANICS
        warmup = "0s"
        {extra}
        {replica}
        [factors]
        server.synchronous_commit = ["on", "off"]
        [repeat]
        rounds = {rounds}
    """


def _on(h: SimHost, *command: str) -> str:
    return subprocess.run(h.ssh_argv(*command), capture_output=True, text=True,
                          timeout=30).stdout  # fmt: skip


def _pgbench_on(h: SimHost) -> bool:
    """pgbench runs in the host's own network namespace (ps would see every namespace's:
    the hosts share this machine's processes)."""
    for pid in h.pids():
        try:
            if b"pgbench" in Path(f"/proc/{pid}/cmdline").read_bytes():
                return True
        except OSError:
            continue
    return False


def _postgres_on(h: SimHost) -> bool:
    """A postmaster runs in the host's own network namespace (a server on a data folder,
    not `postgres --version`, which plan's checks run on a standby's or server's host)."""
    return any(_program_on(pid, b"postgres", b"-D") for pid in h.pids())


def _program_on(pid: int, name: bytes, *args: bytes) -> bool:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return argv[0].endswith(name) and all(a in argv for a in args)


def _wait_for_pgbench(h: SimHost, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not _pgbench_on(h):
        assert time.monotonic() < deadline, "pgbench never ran on the client host"
        time.sleep(0.1)


def _stop(run: Any) -> None:
    """A run still going after a failed assertion: killed, and what it left put back."""
    if run.poll() is None:
        run.kill()
        run.wait()
        pgsweep("restore", timeout=300)


def _nothing_left(h: SimHost) -> None:
    """Only sshd runs in the host's namespace; no work area, journal or run entry there."""
    assert len(h.settled_pids()) == 1, _on(h, "ps", "-eo", "pid,args")
    assert "pgsweep-work" not in _on(h, "ls", "/var/tmp")
    assert _on(h, "ls", "-A", "/var/lib/pgsweep/runs").split() == []


def _psql(h: SimHost, address: str, port: int, password: str) -> subprocess.CompletedProcess[str]:
    conninfo = (f"host={address} port={port} user=pgsweep dbname=postgres sslmode=disable "
                f"password={password} connect_timeout=5")  # fmt: skip
    return subprocess.run(["ip", "netns", "exec", h.name, "/usr/lib/postgresql/15/bin/psql",
                           conninfo, "-Atc", "select 1"], capture_output=True, text=True,
                          timeout=30)  # fmt: skip


def _start(path: Path, results: Path) -> Any:
    return pgsweep_start("run", str(path), "--results", str(results))


NOT_ANSWERED = ("server closed the connection", "Connection refused", "the database system is")


def _answered(ask: Callable[[], subprocess.CompletedProcess[str]],
              deadline: float) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """`ask` again while the server is restarting (no answer of its own), until `deadline`."""
    while True:
        res = ask()
        if not any(n in res.stderr for n in NOT_ANSWERED) or time.monotonic() > deadline:
            return res
        time.sleep(0.2)


def _listening(address: str, timeout: float = 60) -> int:
    """The port a server listens on at `address` (this machine's end of the bridge)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = subprocess.run(["ss", "-Hltn"], capture_output=True, text=True).stdout
        m = re.search(rf"{re.escape(address)}:(\d+)", out)
        if m:
            return int(m.group(1))
        time.sleep(0.1)
    raise AssertionError(f"no server came to listen on {address}")


def test_pgbench_runs_on_the_client_host_a_standby_on_another_and_only_they_are_admitted(
    hosts: list[SimHost], tmp_path: Path, state_dir: Path
) -> None:
    h1, h2, h3 = hosts
    # a read load on the standby: pgbench beside it on h2, over its socket there
    load = 'standby_script = "select-only"\nstandby_clients = 1'
    path = write_experiment(tmp_path, _body(h1, rounds=1, standby=h2, extra=load))
    plan = pgsweep("plan", str(path), "--commands")
    assert plan.returncode == 0, plan.stderr
    assert "client: host loadgen (h1) reached and checked" in plan.stdout
    assert "standby: host replica (h2) reached and checked" in plan.stdout
    assert "pg_basebackup, pg_ctl, postgres, pgbench" in plan.stdout
    here = h1.address.rsplit(".", 1)[0] + ".1"  # this machine's end of the bridge
    # the dry run shows the server listening on that address, and pgbench on h1 over TCP
    dry = re.search(rf"host loadgen \(the client.*over TCP to {re.escape(here)}:(\d+) ",
                    plan.stdout)  # fmt: skip
    assert dry, plan.stdout
    assert f"-c listen_addresses={here} " in plan.stdout and f"-c port={dry[1]} " in plan.stdout
    assert re.search(rf"on host loadgen, with PGPASSFILE=\S+/passfile PGSSLMODE=disable, "
                     rf"run as pgsweep: \S+/"
                     rf"pgbench -h {re.escape(here)} -p {dry[1]} -U pgsweep ", plan.stdout)
    assert "SQL: ALTER ROLE \"pgsweep\" PASSWORD '(the SCRAM-SHA-256 verifier" in plan.stdout
    run = _start(path, tmp_path / "res")
    try:
        port = _listening(here)
        passfile = _on(h1, "sh", "-c", "'cat /var/tmp/pgsweep-work-*/passfile'").strip()
        password = passfile.rsplit(":", 1)[1]
        assert passfile.startswith(f"{here}:{port}:*:*:") and len(password) == 32
        # one password and port for the run: the standby host holds the same passfile
        assert _on(h2, "sh", "-c", "'cat /var/tmp/pgsweep-work-*/passfile'").strip() == passfile
        # the client host gets in with the run's password; a third host does not, even
        # with it (pg_hba admits the client's address alone); neither does a wrong one
        deadline = time.monotonic() + 120  # the server restarts while the cluster is built
        while (ok := _psql(h1, here, port, password)).returncode and time.monotonic() < deadline:
            time.sleep(0.2)
        assert ok.stdout.strip() == "1", ok.stderr
        # the server restarts between trials: a connection it closed or refused is asked
        # again, until the server answers (on a loaded machine, once, it was restarting)
        refused = _answered(lambda: _psql(h3, here, port, password), deadline)
        assert refused.returncode != 0 and "no pg_hba.conf entry" in refused.stderr
        wrong = _answered(lambda: _psql(h1, here, port, "0" * 32), deadline)
        assert "password authentication failed" in wrong.stderr, wrong.stderr
        # the standby's host is admitted for replication alone: a session from there is not
        while not _postgres_on(h2):  # the standby's postmaster, in h2's own namespace
            assert time.monotonic() < deadline, "no standby ran on h2"
            time.sleep(0.1)
        plain = _answered(lambda: _psql(h2, here, port, password), deadline)
        assert plain.returncode != 0 and "no pg_hba.conf entry" in plain.stderr, plain.stderr
        while not _pgbench_on(h2):  # the standby's read load, in h2's own namespace
            assert time.monotonic() < deadline and run.poll() is None, "no read load on h2"
            time.sleep(0.05)
        out, err = run.communicate(timeout=300)
    finally:
        _stop(run)
    assert run.returncode == 0, out + err
    rows = trials(tmp_path / "res")
    assert len(rows) == 2 and all(r["status"] == "ok" for r in rows), [r["reason"] for r in rows]
    argv = json.loads(rows[0]["pgbench_argv"])
    assert argv[argv.index("-h") + 1] == here and argv[argv.index("-p") + 1] == str(port)
    db = sqlite3.connect(tmp_path / "res" / "results.db")
    rtt = [v for (v,) in db.execute("SELECT value FROM metric WHERE name = 'client.rtt_ms'")]
    (cpu,) = db.execute("SELECT count(*) FROM counter WHERE name LIKE 'client.host.cpu.%'")
    (net,) = db.execute("SELECT count(*) FROM counter WHERE name LIKE 'client.net.eth0.%'")
    (standby_cpu,) = db.execute("SELECT count(*) FROM counter "
                                "WHERE name LIKE 'standby.replica.host.cpu.%'")  # fmt: skip
    seconds = dict(db.execute("SELECT trial_id, count(*) FROM standby_second "
                              "WHERE state = 'streaming' AND standby = 's1' GROUP BY 1"))
    roles = dict(db.execute("SELECT name, value FROM environment WHERE scope = 'roles'"))
    standby_tps = [v for (v,) in db.execute("SELECT value FROM metric "
                                            "WHERE name = 'standby.tps'")]  # fmt: skip
    db.close()
    assert len(rtt) == 2 and all(0 < v < 50 for v in rtt)
    assert len(standby_tps) == 2 and all(v > 0 for v in standby_tps)  # reads on the standby
    assert cpu[0] >= 2 * 8 and net[0] == 2 * 4  # each trial's client CPU and network
    assert standby_cpu[0] >= 2 * 8  # and the standby host's
    for t in rows:  # the standby streamed from h2, in sync, lag sampled each second
        effective = json.loads(t["effective_json"])
        assert effective["replication.state"] == "s1: streaming sync"
        assert 0 < float(effective["replication.rtt_ms"]) < 50  # from h2 to this machine
        assert seconds.get(t["id"], 0) >= 1
    assert roles["client"].startswith("loadgen (h1, root@") and roles["server"].startswith("local")
    assert roles["client.address"] == h1.address
    assert roles["standbys"].startswith("s1: replica (h2, root@")
    _nothing_left(h1)
    _nothing_left(h2)


def test_the_controller_killed_mid_trial_leaves_nothing_on_any_host(
    hosts: list[SimHost], tmp_path: Path, state_dir: Path
) -> None:
    h1, h2, _ = hosts
    path = write_experiment(tmp_path, _body(h1, duration="20s", rounds=1, standby=h2))
    run = _start(path, tmp_path / "res")
    try:
        _wait_for_pgbench(h1)
        assert _postgres_on(h2)  # the standby streams from its own host
        _killed_leaves_nothing(run, [h1, h2])
    finally:
        restore = _restore_after(run)
    assert restore.returncode == 0, restore.stdout + restore.stderr
    assert not [d for d in postmasters().values() if str(tmp_path) in d]
    assert not list(state_dir.glob("*.undo"))


def _killed_leaves_nothing(run: Any, touched: list[SimHost]) -> None:
    """kill -9 the controller: each agent notices its stdin end and puts its host back."""
    run.send_signal(signal.SIGKILL)
    run.wait(timeout=30)
    deadline = time.monotonic() + 30
    while any(len(h.pids()) > 1 for h in touched) and time.monotonic() < deadline:
        time.sleep(0.2)
    for h in touched:
        _nothing_left(h)


def _restore_after(run: Any) -> subprocess.CompletedProcess[str]:
    """`pgsweep restore` once the run is gone (killed here if an assertion failed first)."""
    if run.poll() is None:
        run.kill()
        run.wait()
    return pgsweep("restore", timeout=300)


def test_a_cut_connection_fails_that_trial_and_the_run_goes_on(
    hosts: list[SimHost], tmp_path: Path, state_dir: Path
) -> None:
    h1 = hosts[0]
    path = write_experiment(tmp_path, _body(h1, duration="4s", rounds=1))
    run = _start(path, tmp_path / "res")
    try:
        _wait_for_pgbench(h1)
        _cut_ssh_to(run, h1)
        out, _ = run.communicate(timeout=300)
    finally:
        _stop(run)
    rows, failed = _one_trial_lost(run, tmp_path / "res", "loadgen", out)
    assert failed["ord"] < max(r["ord"] for r in rows if r["status"] == "ok")
    _nothing_left(h1)


def _cut_ssh_to(run: Any, h: SimHost) -> None:
    """Cut the run's connection to `h`: SIGKILL to the ssh client the controller started
    for it (by PID, found among the run's own children)."""
    found = subprocess.run(["pgrep", "-P", str(run.pid), "-x", "ssh"], capture_output=True,
                           text=True).stdout.split()  # fmt: skip
    to_h = [int(p) for p in found
            if f"root@{h.address}".encode() in Path(f"/proc/{p}/cmdline").read_bytes()]
    assert len(to_h) == 1
    os.kill(to_h[0], signal.SIGKILL)


def _one_trial_lost(run: Any, results: Path, host: str,
                    out: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:  # fmt: skip
    """The run's two trials, one failed naming `host` as lost, and that one; the run went
    on (exit 3: the other trial ran on a new connection)."""
    rows = trials(results)
    failed = [r for r in rows if r["status"] == "failed"]
    assert len(rows) == 2 and len(failed) == 1, out
    assert f"host {host}" in failed[0]["reason"] and "was lost" in failed[0]["reason"]
    assert run.returncode == 3
    return rows, failed[0]


def test_a_standby_host_lost_mid_trial_fails_that_trial_and_the_next_makes_new_standbys(
    hosts: list[SimHost], tmp_path: Path, state_dir: Path
) -> None:
    """The connection to the standby's host (h2) cut while its standby runs: that trial
    fails naming the host, the run goes on (the client's host h1 untouched), the next
    trials reach h2 again and stream from new standbys there, and nothing is left on h2."""
    h1, h2 = hosts[0], hosts[1]
    path = write_experiment(tmp_path, _body(h1, duration="3s", rounds=1, standby=h2))
    run = _start(path, tmp_path / "res")
    try:
        deadline = time.monotonic() + 120
        while not _postgres_on(h2):  # the first trial's standby runs there
            assert time.monotonic() < deadline and run.poll() is None, "no standby on h2"
            time.sleep(0.05)
        _cut_ssh_to(run, h2)
        out, _ = run.communicate(timeout=300)
    finally:
        _stop(run)
    rows, failed = _one_trial_lost(run, tmp_path / "res", "replica", out)
    later = [r for r in rows if r["ord"] > failed["ord"]]
    assert later and all(r["status"] == "ok" for r in later), [r["reason"] for r in later]
    for r in later:  # streaming again, from a standby made afresh on h2
        assert json.loads(r["effective_json"])["replication.state"] == "s1: streaming sync"
    assert "new-standbys" in json.loads(later[0]["events_json"])
    _nothing_left(h1)
    _nothing_left(h2)


REPLAYED = Path(__file__).resolve().parents[1] / "data" / "pgreplay" / "capture.csv"
SESSION = "6b080f94.495b"  # one of its two pgbench sessions: 231 statements over 3 s


def _tool_body(h: SimHost, workload: str, cluster: str = "") -> str:
    """One configuration, one round, its workload tool on `h` (host loadgen)."""
    return f"""
        [experiment]
        name = "remote-tool"
        seed = 3
        {_host_table("loadgen", h)}
        [roles]
        client = "loadgen"
        {cluster}
        [workload]
        {workload}
        [repeat]
        rounds = 1
    """


def _one_session_log(folder: Path) -> Path:
    """The recorded capture's one session, its role renamed "app": a role of its own that
    must log in over TCP with the run's password (the server user may read the copy)."""
    rows = [r for r in csv.reader(REPLAYED.open(newline="")) if r[5] == SESSION]
    for r in rows:
        r[1] = "app"
    folder.chmod(0o755)
    log = folder / "replay.csv"
    with log.open("w", newline="") as f:
        csv.writer(f, lineterminator="\n").writerows(rows)
    log.chmod(0o644)
    return log


def _run_watching(path: Path, results: Path, h: SimHost, program: bytes) -> bool:
    """Run the experiment to its end; whether `program` was seen in `h`'s namespace."""
    run, seen = _start(path, results), False
    try:
        while run.poll() is None:
            seen = seen or any(_program_on(pid, program) for pid in h.pids())
            time.sleep(0.05)
        out, err = run.communicate(timeout=60)
    finally:
        _stop(run)
    assert run.returncode == 0, out + err
    return seen


def test_sysbench_and_pgreplay_run_on_the_client_host_a_replays_role_with_the_password(
    hosts: list[SimHost], tmp_path: Path, state_dir: Path
) -> None:
    h1 = hosts[0]
    here = h1.address.rsplit(".", 1)[0] + ".1"  # this machine's end of the bridge
    body = _tool_body(h1, 'tool = "sysbench"\ntest = "oltp_point_select"\ntable_size = 1000'
                      '\nclients = 2\nduration = "2s"\nwarmup = "0s"\nrate = 200')
    path = write_experiment(tmp_path, body)
    plan = pgsweep("plan", str(path))
    assert plan.returncode == 0, plan.stderr
    assert "reached and checked: root, the same pgsweep, pgbench, sysbench, the user" in plan.stdout
    assert _run_watching(path, tmp_path / "sb", h1, b"sysbench"), "sysbench never ran on h1"
    (row,) = trials(tmp_path / "sb")
    assert row["status"] == "ok", row["reason"]
    assert f"--pgsql-host={here}" in json.loads(row["pgbench_argv"])
    assert row["tps"] > 0
    _nothing_left(h1)

    log = _one_session_log(Path(tempfile.mkdtemp(prefix="pgsweep-test-replay-", dir="/tmp")))
    try:
        path = write_experiment(tmp_path, _tool_body(
            h1, f'tool = "pgreplay"\nreplay = "{log}"', "[cluster]\nscale = 1"))
        assert _run_watching(path, tmp_path / "rp", h1, b"pgreplay"), "pgreplay never ran on h1"
    finally:
        shutil.rmtree(log.parent)
    (row,) = trials(tmp_path / "rp")
    assert row["status"] == "ok", row["reason"]
    argv = json.loads(row["pgbench_argv"])
    assert argv[argv.index("-h") + 1] == here and argv[-1].endswith("/replay.csv")
    db = sqlite3.connect(tmp_path / "rp" / "results.db")
    m = dict(db.execute("SELECT name, value FROM metric WHERE name LIKE 'pgreplay.%' "
                        "OR name = 'client.rtt_ms'"))  # fmt: skip
    db.close()
    # every statement of the session replayed from h1, none failing: role "app" got in
    assert m["pgreplay.statements"] == 231 and m["pgreplay.errors"] == 0, m
    assert 0 < m["client.rtt_ms"] < 50
    _nothing_left(h1)


def _server_body(h: SimHost, duration: str = "2s", rounds: int = 2,
                 client: SimHost | None = None, beside: bool = False,
                 extra: str = "") -> str:  # fmt: skip
    """The server on `h` (host db); pgbench here, on `client` (host loadgen), or beside it."""
    place = "" if client is None else f'{_host_table("loadgen", client)}'
    role = 'client = "loadgen"' if client else 'client = "db"' if beside else ""
    return f"""
        [experiment]
        name = "remote-server"
        seed = 3
        {_host_table("db", h)}
        {place}
        [roles]
        server = "db"
        {role}
        [cluster]
        scale = 1
        [workload]
        script = "select-only"
        duration = "{duration}"
        rate = 200  # conftest.MECHANICS
        warmup = "0s"
        {extra}
        [factors]
        server.synchronous_commit = ["on", "off"]
        [repeat]
        rounds = {rounds}
    """


def _pgbench_here(address: str) -> Path | None:
    """The passfile of a pgbench in this machine's own network namespace that reaches
    `address`, or None."""
    ours = os.readlink("/proc/self/ns/net")
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            if argv[0].endswith(b"pgbench") and address.encode() in argv and \
                    os.readlink(entry / "ns" / "net") == ours:
                env = dict(v.split(b"=", 1) for v in (entry / "environ").read_bytes()
                           .split(b"\0") if b"=" in v)  # fmt: skip
                return Path(env[b"PGPASSFILE"].decode())
        except (OSError, ValueError, KeyError):
            continue
    return None


def _listeners(h: SimHost) -> list[str]:
    out = subprocess.run(["ip", "netns", "exec", h.name, "ss", "-Hltn"], capture_output=True,
                         text=True, timeout=30).stdout  # fmt: skip
    return [line.split()[3] for line in out.splitlines() if line.split()]


def test_the_server_on_another_host_is_measured_from_here_and_admits_this_machine_alone(
    hosts: list[SimHost], tmp_path: Path, state_dir: Path
) -> None:
    _, h2, h3 = hosts
    here = h3.address.rsplit(".", 1)[0] + ".1"  # this machine's end of the bridge
    path = write_experiment(tmp_path, _server_body(h3, rounds=1))
    plan = pgsweep("plan", str(path), "--commands")
    assert plan.returncode == 0, plan.stderr
    assert "server: host db (h3) reached and checked" in plan.stdout
    assert "initdb, pg_ctl, postgres, pgbench" in plan.stdout
    assert "host db (the server, through `pgsweep agent` over ssh" in plan.stdout
    assert f"as the server admits from {here} alone" in plan.stdout
    assert f"-c listen_addresses={h3.address} " in plan.stdout
    assert re.search(rf"on host local \(this machine\), with PGPASSFILE=\S+/passfile "
                     rf"PGSSLMODE=disable, run as pgsweep: \S+/pgbench -h "
                     rf"{re.escape(h3.address)} ", plan.stdout), plan.stdout
    run = _start(path, tmp_path / "res")
    try:
        deadline = time.monotonic() + 120
        while (passfile := _pgbench_here(h3.address)) is None:  # pgbench runs here
            assert time.monotonic() < deadline and run.poll() is None, "no pgbench here"
            time.sleep(0.05)
        # in its window: a postmaster in h3's own namespace, on h3's address alone
        assert _postgres_on(h3)
        listening = [a for a in _listeners(h3) if not a.endswith(":22")]  # not its sshd
        assert len(listening) == 1 and listening[0].startswith(f"{h3.address}:"), listening
        port = int(listening[0].rsplit(":", 1)[1])
        assert passfile.stat().st_mode & 0o777 == 0o600
        line = passfile.read_text().strip()
        password = line.rsplit(":", 1)[1]
        assert line.startswith(f"{h3.address}:{port}:*:*:") and len(password) == 32
        # another host is refused, even with the run's password: hba admits this machine
        refused = _answered(lambda: _psql(h2, h3.address, port, password), deadline)
        assert refused.returncode != 0 and "no pg_hba.conf entry" in refused.stderr, refused
        assert not _pgbench_on(h3)
        out, err = run.communicate(timeout=300)
    finally:
        _stop(run)
    assert run.returncode == 0, out + err
    rows = trials(tmp_path / "res")
    assert len(rows) == 2 and all(r["status"] == "ok" for r in rows), [r["reason"] for r in rows]
    argv = json.loads(rows[0]["pgbench_argv"])
    assert argv[argv.index("-h") + 1] == h3.address and argv[argv.index("-p") + 1] == str(port)
    db = sqlite3.connect(tmp_path / "res" / "results.db")
    rtt = [v for (v,) in db.execute("SELECT value FROM metric WHERE name = 'client.rtt_ms'")]
    roles = dict(db.execute("SELECT name, value FROM environment WHERE scope = 'roles'"))
    calls = dict(db.execute("SELECT name, count(*) FROM metric WHERE value > 0 "
                            "AND name LIKE '%.agent_calls' GROUP BY 1"))  # fmt: skip
    db.close()
    assert len(rtt) == 2 and all(0 < v < 50 for v in rtt)  # from here to h3
    assert calls == {"server.agent_calls": 2}  # the server's agent's messages, each trial
    assert roles["server"].startswith("db (h3, root@") and roles["server.address"] == h3.address
    assert roles["client"].startswith("local")
    _nothing_left(h3)
    assert not [d for d in postmasters().values() if str(tmp_path) in d]  # none ran here
    assert not passfile.parent.exists()  # this run's work area here


def test_a_server_elsewhere_streams_to_a_standby_beside_it_and_one_on_another_host(
    hosts: list[SimHost], tmp_path: Path, state_dir: Path
) -> None:
    """The server on h3 with pgbench beside it; s1 beside it too, s2 on h2 (host replica),
    cloned and streaming over the bridge to h3's address, which h3's server alone listens
    on and admits h2 for replication only."""
    _, h2, h3 = hosts
    standby = (f'{_host_table("replica", h2)}\n[replication]\nstandbys = 2\nmode = "sync"\n'
               'sync_standbys = "FIRST 1"')
    body = _server_body(h3, rounds=1, beside=True, extra=standby).replace(
        'client = "db"', 'client = "db"\nstandbys = ["db", "replica"]')
    path = write_experiment(tmp_path, body)
    plan = pgsweep("plan", str(path), "--commands")
    assert plan.returncode == 0, plan.stderr
    assert "standby: host replica (h2) reached and checked" in plan.stdout
    assert re.search(rf"host replica \(standby s2, .*over TCP to {re.escape(h3.address)}:",
                     plan.stdout), plan.stdout  # fmt: skip
    run = _start(path, tmp_path / "res")
    try:
        deadline = time.monotonic() + 120
        while not _postgres_on(h2):  # s2's postmaster, in h2's own namespace
            assert time.monotonic() < deadline and run.poll() is None, "no standby on h2"
            time.sleep(0.1)
        listening = [a for a in _listeners(h3) if not a.endswith(":22")]  # not its sshd
        assert len(listening) == 1 and listening[0].startswith(f"{h3.address}:"), listening
        port = int(listening[0].rsplit(":", 1)[1])
        passfile = _on(h2, "sh", "-c", "'cat /var/tmp/pgsweep-work-*/passfile'").strip()
        assert passfile.startswith(f"{h3.address}:{port}:*:*:"), passfile
        # h2 is admitted for replication alone: a session from there is not
        plain = _answered(lambda: _psql(h2, h3.address, port, passfile.rsplit(":", 1)[1]),
                          deadline)  # fmt: skip
        assert plain.returncode != 0 and "no pg_hba.conf entry" in plain.stderr, plain.stderr
        out, err = run.communicate(timeout=300)
    finally:
        _stop(run)
    assert run.returncode == 0, out + err
    rows = trials(tmp_path / "res")
    assert len(rows) == 2 and all(r["status"] == "ok" for r in rows), [r["reason"] for r in rows]
    argv = json.loads(rows[0]["pgbench_argv"])
    assert argv[argv.index("-h") + 1].startswith("/tmp/pgsweep-")  # the socket there
    db = sqlite3.connect(tmp_path / "res" / "results.db")
    lines = [v for (v,) in db.execute("SELECT value FROM metric WHERE name = 'log.lines'")]
    (standby_cpu,) = db.execute("SELECT count(*) FROM counter "
                                "WHERE name LIKE 'standby.replica.host.cpu.%'")  # fmt: skip
    roles = dict(db.execute("SELECT name, value FROM environment WHERE scope = 'roles'"))
    db.close()
    assert len(lines) == 2 and all(v >= 100 for v in lines)  # its log, read through h3
    assert standby_cpu[0] >= 2 * 8  # h2's own counters, each trial
    for t in rows:  # both made and streaming: s1 the synchronous one
        effective = json.loads(t["effective_json"])
        assert effective["replication.state"] == "s1: streaming sync, s2: streaming potential"
        assert 0 < float(effective["replication.rtt_ms"]) < 50  # from h2 to h3
    assert roles["standbys"].startswith("s1: db (h3, root@") and ", s2: replica (h2, " in \
        roles["standbys"]
    assert roles["client"].startswith("db (h3, root@")
    _nothing_left(h3)
    _nothing_left(h2)


@contextmanager
def _second_link(a: SimHost, b: SimHost) -> Iterator[str]:
    """A link of their own between a and b (a second interface each), and a's route to b's
    bridge address through it: a reaches b from its address on that link, not from the
    one this machine reaches it at. Yields that address; the link goes afterwards."""
    net = f"10.254.{os.getpid() % 250}"
    subprocess.run(["ip", "link", "add", "x2", "netns", a.name, "type", "veth", "peer", "name",
                    "x2", "netns", b.name], check=True)  # fmt: skip
    try:
        for h, end in ((a, 1), (b, 2)):
            subprocess.run(["ip", "-n", h.name, "addr", "add", f"{net}.{end}/30", "dev", "x2"],
                           check=True)  # fmt: skip
            subprocess.run(["ip", "-n", h.name, "link", "set", "x2", "up"], check=True)
        subprocess.run(["ip", "-n", a.name, "route", "add", f"{b.address}/32", "via",
                        f"{net}.2"], check=True)  # fmt: skip
        yield f"{net}.1"
    finally:
        subprocess.run(["ip", "-n", a.name, "link", "delete", "x2"], check=False)


def test_the_controller_killed_leaves_nothing_on_the_servers_or_the_clients_host(
    hosts: list[SimHost], tmp_path: Path, state_dir: Path
) -> None:
    """The client on a third host, h1, which reaches the server's host h3 over a link of
    their own: the server admits h1's address on that link alone (where its connections
    come from), not the one this machine reaches h1 at."""
    h1, h2, h3 = hosts
    with _second_link(h1, h3) as second:
        _killed_third_host(h1, h2, h3, second, tmp_path, state_dir)


def _killed_third_host(h1: SimHost, h2: SimHost, h3: SimHost, second: str, tmp_path: Path,
                       state_dir: Path) -> None:  # fmt: skip
    path = write_experiment(tmp_path, _server_body(h3, duration="20s", rounds=1, client=h1))
    plan = pgsweep("plan", str(path), "--commands")
    assert plan.returncode == 0, plan.stderr
    assert f"as the server admits from {second} alone" in plan.stdout
    assert "host loadgen (the client, through `pgsweep agent`" in plan.stdout
    run = _start(path, tmp_path / "res")
    try:
        _wait_for_pgbench(h1)  # the third host, over its own link to h3
        assert _postgres_on(h3)
        listening = [a for a in _listeners(h3) if not a.endswith(":22")]  # not its sshd
        assert len(listening) == 1 and listening[0].startswith(f"{h3.address}:"), listening
        port = int(listening[0].rsplit(":", 1)[1])
        passfile = _on(h1, "sh", "-c", "'cat /var/tmp/pgsweep-work-*/passfile'").strip()
        assert passfile.startswith(f"{h3.address}:{port}:*:*:")
        password = passfile.rsplit(":", 1)[1]
        deadline = time.monotonic() + 60
        admitted = _answered(lambda: _psql(h1, h3.address, port, password), deadline)
        assert admitted.stdout.strip() == "1", admitted.stderr
        refused = _answered(lambda: _psql(h2, h3.address, port, password), deadline)
        assert refused.returncode != 0 and "no pg_hba.conf entry" in refused.stderr, refused
        _killed_leaves_nothing(run, [h1, h3])
    finally:
        restore = _restore_after(run)
    assert restore.returncode == 0, restore.stdout + restore.stderr
    assert not list(state_dir.glob("*.undo"))


def test_a_lost_server_host_fails_that_trial_and_stops_the_run_resumably(
    hosts: list[SimHost], tmp_path: Path, state_dir: Path
) -> None:
    """The connection to the server's host cut mid-trial: that trial fails, the run stops
    there (exit 3, resumable: its clusters went with the agent), the agent puts its host
    back, and the run's journal keeps the host for `pgsweep restore`."""
    h3 = hosts[2]
    path = write_experiment(tmp_path, _server_body(h3, duration="4s", rounds=1))
    run = _start(path, tmp_path / "res")
    try:
        deadline = time.monotonic() + 120
        while _pgbench_here(h3.address) is None:
            assert time.monotonic() < deadline and run.poll() is None, "no pgbench here"
            time.sleep(0.05)
        _cut_ssh_to(run, h3)
        out, err = run.communicate(timeout=300)
    finally:
        _stop(run)
    assert run.returncode == 3, out + err
    assert "Traceback" not in err and "internal error" not in err.lower(), err
    assert re.search(r"stopped: host db \(root@\S+\), the server's, was lost", out), out
    assert "resume with: pgsweep run" in out
    rows = trials(tmp_path / "res")
    assert [r["status"] for r in rows] == ["failed"], rows  # the second never started
    deadline = time.monotonic() + 30  # the agent saw its connection end: it cleans up
    while len(h3.pids()) > 1 and time.monotonic() < deadline:
        time.sleep(0.2)
    _nothing_left(h3)
    assert list(state_dir.glob("*.hosts.undo"))  # kept: restore asks h3 again
    restore = pgsweep("restore", timeout=300)
    assert restore.returncode == 0, restore.stdout + restore.stderr
    assert not list(state_dir.glob("*.undo"))


def test_a_host_whose_key_is_unknown_is_refused_at_plan(
    hosts: list[SimHost], tmp_path: Path
) -> None:
    h1 = hosts[0]
    other = tmp_path / "known_hosts"
    other.write_text("")  # an empty known_hosts: h1's key is unknown
    body = _body(h1).replace(f'known_hosts = "{h1.known_hosts}"', f'known_hosts = "{other}"')
    res = pgsweep("plan", str(write_experiment(tmp_path, body)))
    assert res.returncode == 2, res.stdout + res.stderr
    assert "host loadgen" in res.stderr and "could not be reached" in res.stderr
    assert "Host key verification failed" in res.stderr
    assert len(h1.pids()) == 1  # nothing was started there


def test_doctor_asks_the_host_itself(hosts: list[SimHost], tmp_path: Path) -> None:
    h1 = hosts[0]
    res = pgsweep("doctor", "--host", "loadgen", str(write_experiment(tmp_path, _body(h1))))
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith(f"host loadgen (h1, root@{h1.address}):")
    assert "os.huge_pages levels" in res.stdout and "/usr/lib/postgresql" in res.stdout
    _nothing_left(h1)
