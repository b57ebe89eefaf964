"""A fleet dispatched through Ansible (ansible-runner, from the package registry) to two
SSH hosts on this machine (tests/sshhosts.py), and a third group whose host no one
answers: alpha's host ran its shard, which came back merged, every planned trial of it
once with its group; beta's host lost its network mid-shard and the unreachable group is
named, their rounds reported missing; then `--resume`, once they answer, clears what the
lost shard left and runs only their rounds.
One fleet shows all of it (each dispatch costs Ansible's start-up). A fleet stopped by
Ctrl-C mid-trial stops every host's shard, and nothing is left running there."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import pgsweep, pgsweep_start, requires_pg, trials, write_experiment

pytestmark = [requires_pg, pytest.mark.postgres]
ROOT = Path(__file__).resolve().parents[2]
PGSWEEP = str(ROOT / ".venv" / "bin" / "pgsweep")

if os.geteuid() != 0 or not Path("/usr/sbin/sshd").exists():
    pytest.skip("needs root and sshd (scripts/setup.sh --dev)", allow_module_level=True)
if not (ROOT / ".venv" / "bin" / "ansible-runner").exists():
    pytest.skip("needs the fleet extra (scripts/setup.sh --dev)", allow_module_level=True)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from sshhosts import SimHost, ssh_hosts  # noqa: E402

BODY = """
[experiment]
name = "fleet"
seed = 9
[cluster]
scale = 1
[workload]
script = "select-only"
clients = 2
jobs = 2
duration = "1s"
rate = 200  # conftest.MECHANICS
warmup = "0s"
[factors]
server.synchronous_commit = ["on", "off"]
[repeat]
rounds = 3  # a round per group: the rounds and groups are what is checked here
"""


@pytest.fixture(scope="module")
def hosts() -> Iterator[list[SimHost]]:
    """Two hosts alike, and a third that may use one CPU only (its sshd is pinned)."""
    with ssh_hosts(3, pinned=(3,)) as made:
        yield made


def _inventory(folder: Path, hosts: list[SimHost], beta: int = 1, gamma_up: bool = False,
               host_timeout: int = 120) -> Path:  # fmt: skip
    """alpha on the first host, beta on hosts[beta]; gamma at an address no host has (the
    same key and known_hosts: only the connection fails), or at alpha's once it answers
    (alpha's shard is kept then: its host is idle)."""
    lines = []
    gone = hosts[0].address if gamma_up else hosts[beta].address.rsplit(".", 1)[0] + ".99"
    for group, h, address in (("alpha", hosts[0], hosts[0].address),
                              ("beta", hosts[beta], hosts[beta].address),
                              ("gamma", hosts[0], gone)):  # fmt: skip
        args = (f"-F /dev/null -o UserKnownHostsFile={h.known_hosts} "
                "-o StrictHostKeyChecking=yes -o IdentitiesOnly=yes")  # fmt: skip
        lines.append(f"[{group}]\n{group}-{h.name} ansible_host={address} ansible_user=root "
                     f"ansible_ssh_private_key_file={h.identity} "
                     f"ansible_ssh_common_args='{args}' pgsweep_bin={PGSWEEP} "
                     "ansible_python_interpreter=/usr/bin/python3"
                     # each host answers how far its shard is every 30 s (the default;
                     # half the host's timeout at most) and at once when it ends
                     + f" pgsweep_host_timeout={host_timeout}"
                     # no one answers there: give up after 2 s, not Ansible's 10
                     + (" ansible_ssh_timeout=2" if group == "gamma" else "") + "\n")  # fmt: skip
    path = folder / "inventory.ini"
    path.write_text("\n".join(lines))
    return path


def test_each_reachable_group_runs_its_shard_the_unreachable_and_the_lost_are_named(
    hosts: list[SimHost], tmp_path: Path
) -> None:
    """alpha's shard comes back; beta's host loses its network mid-shard and, after
    pgsweep_host_timeout (20 s here) without an answer, its group fails naming why (the
    ledger remembers its work folder: the shard may run on there); gamma never answers.
    Then --resume, once beta and gamma answer, dispatches their rounds only, first
    stopping and removing what beta's lost shard left."""
    path = write_experiment(tmp_path, BODY)
    inv = _inventory(tmp_path, hosts, host_timeout=20)  # its questions wait 10 s at most
    out = tmp_path / "fleet"
    beta = hosts[1]
    run = pgsweep_start("run", str(path), "--inventory", str(inv), "--results", str(out))
    try:
        deadline = time.monotonic() + 240
        while not _server_on(beta):  # beta's shard has its server up
            assert run.poll() is None and time.monotonic() < deadline, run.communicate()
            time.sleep(0.2)
        subprocess.run(["ip", "-n", beta.name, "link", "set", "eth0", "down"], check=True)
        stdout, stderr = run.communicate(timeout=300)
    finally:
        subprocess.run(["ip", "-n", beta.name, "link", "set", "eth0", "up"], check=True)
        if run.poll() is None:
            run.kill()
            run.wait()
    assert run.returncode == 3, stderr + stdout  # some rounds are missing
    assert "alpha: ok" in stdout, stdout
    # lost: ssh's keepalives end its connection (Ansible: "Failed to connect", or "Data
    # could not be sent" when it broke mid-task), or the answer's timeout (20 s) comes first
    assert re.search(r"beta: progress: .*(Failed to connect|Data could not be sent|"
                     r"expected time frame \(20\))",
                     stdout), stdout  # fmt: skip
    assert re.search(r"gamma: .*(unreachable|ssh)", stdout, re.I | re.S), stdout
    assert "rounds missing (their group failed): 2-3" in stdout
    # each host was asked how far its shard was while it ran (pgsweep progress, a line
    # whenever a count moved): alpha's trials were all done at the end
    moves = [line for line in stdout.splitlines() if line.startswith("progress: ")]
    assert moves and moves[-1].startswith("progress: alpha 2/2"), stdout
    plan = pgsweep("plan", str(path), "--shards", "3")
    order = re.search(r"run order: (.*)", plan.stdout).group(1).split()  # type: ignore[union-attr]
    rows = trials(out)
    # every planned trial of alpha's round, once, and none of beta's or gamma's
    assert sorted(r["id"] for r in rows) == sorted(t for t in order if t.startswith("r1-"))
    assert {r["host_group"] for r in rows} == {"alpha"}
    rep = pgsweep("show", str(out), "--env")
    assert "host@alpha" in rep.stdout and "host@beta" not in rep.stdout
    # the facts every answering group's host gave before dispatch, kept, and the same
    for fact in ("usable_cpus", "kernel", "postgres"):
        assert f"{fact}@alpha" in rep.stdout and f"{fact}@beta" in rep.stdout, rep.stdout
    assert "facts_differ" not in rep.stdout
    left = json.loads((out / "fleet.json").read_text())["left"]
    assert list(left) == ["beta"] and Path(left["beta"]).is_dir()  # the hosts share /tmp
    assert [p for p in Path("/tmp").glob("pgsweep-fleet-*") if str(p) != left["beta"]] == []

    # beta and gamma answer: --resume stops and removes what beta's lost shard left, then
    # dispatches their rounds only; alpha's trials are kept as they ran
    up = _inventory(tmp_path, hosts, gamma_up=True)
    again = pgsweep("run", str(path), "--inventory", str(up), "--results", str(out), "--resume")
    assert again.returncode == 0, again.stderr + again.stdout
    assert "alpha: ok (kept" in again.stdout and "beta: ok\n" in again.stdout, again.stdout
    assert "gamma: ok\n" in again.stdout and "progress: alpha" not in again.stdout
    assert "progress: beta 2/2, gamma 2/2\n" in again.stdout, again.stdout
    assert not Path(left["beta"]).exists()
    assert json.loads((out / "fleet.json").read_text())["left"] == {}
    after = trials(out)
    assert sorted(r["id"] for r in after) == sorted(order)
    assert {r["round"]: r["host_group"] for r in after} == {1: "alpha", 2: "beta", 3: "gamma"}
    kept = {r["id"]: r["started_at"] for r in rows}
    assert {r["id"]: r["started_at"] for r in after if r["id"] in kept} == kept
    rep = pgsweep("show", str(out), "--env")
    assert "host@gamma" in rep.stdout and "usable_cpus@gamma" in rep.stdout, rep.stdout
    assert not _others(beta)
    # a third --resume has nothing to dispatch, and another file is refused
    same = pgsweep("run", str(path), "--inventory", str(inv), "--results", str(out), "--resume")
    assert same.returncode == 0 and "gamma: ok (kept" in same.stdout, same.stderr + same.stdout
    other = write_experiment(tmp_path, BODY.replace("seed = 9", "seed = 10"), "other.toml")
    bad = pgsweep("run", str(other), "--inventory", str(inv), "--results", str(out), "--resume")
    assert bad.returncode == 2 and "changed since this fleet started" in bad.stderr, bad.stderr
    assert not list(Path("/tmp").glob("pgsweep-fleet-*"))


def _server_on(h: SimHost) -> bool:
    """A shard's postmaster runs in the host's namespace (`postgres -D DIR`; `pgsweep
    facts` runs `postgres --version` there too, which is none)."""
    for pid in h.pids():
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv[0].endswith(b"postgres") and b"-D" in argv:
            return True
    return False


def _masters() -> list[str]:
    """This machine's SSH master connections kept open for a fleet (ControlPersist: `ssh:
    /tmp/pgsweep-fleet-.../cp/... [mux]`)."""
    out = []
    for p in Path("/proc").iterdir():
        try:
            argv = (p / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if argv.startswith("ssh: /tmp/pgsweep-fleet-"):
            out.append(argv)
    return out


def _others(h: SimHost) -> list[bytes]:
    """The command lines of the processes in the host's namespace other than sshd's."""
    out = []
    for pid in h.pids():
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if not argv.startswith(b"sshd"):
            out.append(argv)
    return out


def test_each_group_is_a_copy_of_the_topology_with_a_client_host_of_its_own(
    hosts: list[SimHost], tmp_path: Path
) -> None:
    """[roles] client = "loadgen" over two groups, each with its own copy of loadgen (the
    other group's server host: h1 and h2 each serve one group and load the other's): each
    shard's pgbench ran on its group's loadgen over TCP to its own server, none reached the
    destination the file gives (no host answers there), and nothing is left on either."""
    h1, h2 = hosts[0], hosts[1]
    body = BODY.replace("rounds = 3", "rounds = 2") + f"""
[hosts.loadgen]
ssh = "root@192.0.2.1"  # TEST-NET-1: nothing answers; each group's shard is told its own
identity_file = "{h1.identity}"
known_hosts = "{h1.known_hosts}"
pgsweep = "{PGSWEEP}"
[roles]
client = "loadgen"
"""
    path = write_experiment(tmp_path, body)
    inv = _inventory(tmp_path, hosts)
    text = inv.read_text().split("[gamma]")[0]  # alpha on h1, beta on h2
    for group, other in (("alpha", h2), ("beta", h1)):  # Ansible asks each copy its facts
        line = next(ln for ln in text.splitlines() if ln.startswith(f"{group}-"))
        connect = line.split(" ", 2)[2]  # ansible_user=root ... (the same key and files)
        text = text.replace(f"[{group}]\n", f"[{group}]\n{group}-loadgen ansible_host="
                            f"{other.address} {connect} pgsweep_host=loadgen\n")  # fmt: skip
    inv.write_text(text)
    out = tmp_path / "fleet"
    res = pgsweep("run", str(path), "--inventory", str(inv), "--results", str(out))
    assert res.returncode == 0, res.stderr + res.stdout
    assert "alpha: ok" in res.stdout and "beta: ok" in res.stdout, res.stdout
    rows = trials(out)
    assert len(rows) == 4 and all(r["status"] == "ok" for r in rows), [r["reason"] for r in rows]
    server = {"alpha": h1.address, "beta": h2.address}
    for r in rows:  # pgbench reached its group's server at that host's own address
        argv = json.loads(r["pgbench_argv"])
        assert argv[argv.index("-h") + 1] == server[r["host_group"]], (r["host_group"], argv)
    db = sqlite3.connect(out / "results.db")
    rtt = [v for (v,) in db.execute("SELECT value FROM metric WHERE name = 'client.rtt_ms'")]
    (cpu,) = db.execute("SELECT count(*) FROM counter WHERE name LIKE 'client.host.cpu.%'")
    db.close()
    assert len(rtt) == 4 and all(0 < v < 50 for v in rtt)  # measured from the client host
    assert cpu[0] >= 4 * 8  # each trial's client host's CPU
    env = pgsweep("show", str(out), "--env").stdout
    roles = {part.split("roles@")[1].split("]")[0]: part for part in env.split("\n[")
             if "roles@" in part.split("\n")[0]}  # fmt: skip
    assert f"client = loadgen (h2, root@{h2.address};" in roles["alpha"], env
    assert "server = local (h1)" in roles["alpha"]
    assert f"client = loadgen (h1, root@{h1.address};" in roles["beta"], env
    assert "server = local (h2)" in roles["beta"]
    # each group's copy of loadgen gave its facts before dispatch, compared and kept
    for group in ("alpha", "beta"):
        for fact in ("kernel", "usable_cpus", "postgres"):
            assert f"loadgen:{fact}@{group}" in env, env
    for h in (h1, h2):
        settle = time.monotonic() + 30
        while _others(h) and time.monotonic() < settle:  # agents exit after their shard
            time.sleep(0.2)
        assert not _others(h)
    assert not list(Path("/tmp").glob("pgsweep-fleet-*"))


def test_ctrl_c_stops_every_shard_and_each_host_is_put_back(
    hosts: list[SimHost], tmp_path: Path
) -> None:
    """The controller stopped while both shards' servers run: each host's shard gets
    Ctrl-C by PID (pgsweep stop, through Ansible), stops its server and removes its work
    folder; nothing runs on either host after, and the groups are named stopped, for
    --resume."""
    body = BODY.replace('duration = "1s"', 'duration = "30s"').replace("rounds = 3", "rounds = 2")
    path = write_experiment(tmp_path, body)
    out = tmp_path / "fleet"
    run = pgsweep_start("run", str(path), "--inventory", str(_inventory(tmp_path, hosts)),
                        "--groups", "alpha,beta", "--results", str(out))
    try:
        deadline = time.monotonic() + 240
        while not all(_server_on(h) for h in hosts[:2]):  # both shards' servers up
            assert run.poll() is None and time.monotonic() < deadline, run.communicate()
            time.sleep(0.2)
        run.send_signal(signal.SIGINT)
        stdout, stderr = run.communicate(timeout=300)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert run.returncode == 130, stdout + stderr
    assert _masters() == []  # the fleet's kept-open SSH connections ended with it
    for group in ("alpha", "beta"):
        assert f"{group}: stopped: its shard was stopped and its host put back" in stdout, stdout
    assert "--resume" in stdout
    for h in hosts[:2]:  # only sshd is left in each host's namespace (its own, and the
        # sessions Ansible's ControlPersist keeps a minute): no shard, server or job wrapper
        settle = time.monotonic() + 30
        while _others(h) and time.monotonic() < settle:
            time.sleep(0.2)
        assert not _others(h)
    assert not list(Path("/tmp").glob("pgsweep-fleet-*"))  # the hosts' work folders, ours


def test_a_host_whose_key_is_unknown_is_refused_and_its_key_not_learned(
    hosts: list[SimHost], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Host keys are checked even though ansible-runner turns Ansible's checking off unless
    told: with an empty known_hosts file, no group's host is reached (each is named with
    ssh's reason), nothing is dispatched, and the file stays empty (a key accepted blindly
    would have been written to it). Ansible's control sockets go to a folder of the
    test's: a master connection the other tests left (ControlPersist) would be reused
    without any key being asked for."""
    monkeypatch.setenv("ANSIBLE_SSH_CONTROL_PATH_DIR", str(tmp_path / "cp"))
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    inv = _inventory(tmp_path, hosts)
    inv.write_text(inv.read_text().replace(str(hosts[0].known_hosts), str(empty)))
    res = pgsweep("run", str(write_experiment(tmp_path, BODY)), "--inventory", str(inv),
                  "--groups", "alpha,beta", "--results", str(tmp_path / "fleet"))  # fmt: skip
    assert res.returncode == 3, res.stderr + res.stdout
    # each group fails at its first task; ssh's own words reach Ansible's message unless
    # Ansible was still writing to the ssh that had refused (then a broken pipe: under
    # load in stop 39's CI), so at least one group names the host key
    for group in ("alpha", "beta"):
        assert re.search(rf"{group}: pgsweep version: .*(Host key verification failed|"
                         r"Broken pipe)", res.stdout, re.S), res.stdout  # fmt: skip
    assert "Host key verification failed" in res.stdout, res.stdout
    assert "no group's shard came back" in res.stdout
    assert empty.read_text() == ""
    assert not _others(hosts[0]) and not _others(hosts[1])
    assert not list(Path("/tmp").glob("pgsweep-fleet-*"))


def test_an_unknown_group_is_refused(hosts: list[SimHost], tmp_path: Path) -> None:
    path = write_experiment(tmp_path, BODY)
    res = pgsweep("run", str(path), "--inventory", str(_inventory(tmp_path, hosts)),
                  "--groups", "alpha,delta", "--results", str(tmp_path / "r"))  # fmt: skip
    assert res.returncode == 2 and "no group 'delta'" in res.stderr, res.stderr
    assert not (tmp_path / "r").exists()


def test_groups_on_different_machines_are_refused_before_dispatch(
    hosts: list[SimHost], tmp_path: Path
) -> None:
    """beta on the host that may use one CPU: its facts differ from alpha's, so nothing is
    dispatched (exit 2, no folder), and the error names the fact, each group's value and
    the key that would allow it."""
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one usable CPU here: a host pinned to one is no different")
    path = write_experiment(tmp_path, BODY)
    out = tmp_path / "fleet"
    res = pgsweep("run", str(path), "--inventory", str(_inventory(tmp_path, hosts, beta=2)),
                  "--groups", "alpha,beta", "--results", str(out))  # fmt: skip
    assert res.returncode == 2, res.stderr + res.stdout
    assert "the host groups are not the same machine" in res.stderr, res.stderr
    assert f"usable_cpus: alpha {len(os.sched_getaffinity(0))}; beta 1" in res.stderr
    assert 'hosts_may_differ = ["usable_cpus"]' in res.stderr
    assert "kernel:" not in res.stderr  # only what differs
    assert not out.exists()
    assert not list(Path("/tmp").glob("pgsweep-fleet-*"))
