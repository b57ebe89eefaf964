"""[os] beside a server on another host ([roles] server): the kernel values and the kernel
lock are that host's, changed and put back by its agent, with this machine's controller
measuring (os.memory_limit's cgroup through an agent is covered on the recording host:
here a process under a simulated host's sshd cannot move itself into a memory cgroup, the
kernel answers EIO). One simulated host (sshd in a network namespace, see
tests/sshhosts.py) changes real kernel values here, and holds the machine's kernel lock:
no other module of its phase runs [os] beside it (scripts/test.sh: the network lane, after
test_storage)."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import pgsweep, pgsweep_start, requires_pg, trials, write_experiment

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from sshhosts import SimHost, ssh_hosts

pytestmark = requires_pg
PGSWEEP = str(Path(__file__).resolve().parents[2] / ".venv" / "bin" / "pgsweep")
EXPIRE = Path("/proc/sys/vm/dirty_expire_centisecs")  # no other test touches it
WRITEBACK = Path("/proc/sys/vm/dirty_writeback_centisecs")  # nor this one
LOCK = Path("/run/pgsweep-kernel.lock")


@pytest.fixture(scope="module")
def db() -> Iterator[SimHost]:
    with ssh_hosts(1) as made:
        yield made[0]


OS = """
[os]
sysctl."vm.dirty_writeback_centisecs" = 493
"""
OS_FACTOR = 'os.sysctl."vm.dirty_expire_centisecs" = [2907, 2909]'
STORAGE = """
[storage]
device = "loop:1GiB"
"""


def _body(h: SimHost, duration: str, tables: str = OS, factor: str = OS_FACTOR) -> str:
    return f"""
        [experiment]
        name = "remote-os"
        seed = 5
        [hosts.db]
        ssh = "root@{h.address}"
        identity_file = "{h.identity}"
        known_hosts = "{h.known_hosts}"
        pgsweep = "{PGSWEEP}"
        [roles]
        server = "db"
        [cluster]
        scale = 1
        [workload]
        script = "select-only"
        duration = "{duration}"
        rate = 200  # conftest.MECHANICS
        warmup = "0s"
        {tables}
        [factors]
        {factor}
        [repeat]
        rounds = 1
    """


def _start(path: Path, results: Path) -> Any:
    return pgsweep_start("run", str(path), "--results", str(results))


def _lock_held() -> bool:
    fd = os.open(LOCK, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def _wait_for(what: str, ready: object, run: Any, seconds: float = 120,
              every: float = 0.05) -> None:  # fmt: skip
    deadline = time.monotonic() + seconds
    while not ready():  # type: ignore[operator]
        if run.poll() is not None:
            raise AssertionError(f"the run ended before {what}: {run.communicate()}")
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(every)


def _mounts(h: SimHost) -> str:
    """The mount table of the host's own mount namespace (its sshd's, where its agent
    mounts), as a session there reads it."""
    return subprocess.run(h.ssh_argv("cat", "/proc/self/mounts"), capture_output=True,
                          text=True, timeout=30, check=True).stdout  # fmt: skip


def _loops() -> list[str]:
    """The machine's loop devices backed by a file (global: the hosts share the kernel)."""
    out = subprocess.run(["losetup", "-n", "-O", "NAME,BACK-FILE", "-l"], capture_output=True,
                         text=True, timeout=30, check=True).stdout  # fmt: skip
    return sorted(line for line in out.splitlines() if line.split()[1:])


def _mounted(h: SimHost) -> bool:
    return "/storage/mnt-1 " in _mounts(h)


def _stop(run: Any) -> None:
    """A run still going after a failed assertion: killed, and what it left put back."""
    if run.poll() is None:
        run.kill()
        run.wait()
        pgsweep("restore", timeout=300)


def _effective(run: Any, said: str, results: Path) -> list[dict[str, str]]:
    """The run's two trials, both ok: what each read back."""
    assert run.returncode == 0, said
    rows = trials(results)
    assert len(rows) == 2 and all(r["status"] == "ok" for r in rows), [r["reason"] for r in rows]
    return [json.loads(row["effective_json"]) for row in rows]


def _values() -> tuple[str, str]:
    return EXPIRE.read_text().strip(), WRITEBACK.read_text().strip()


def _nothing_left(h: SimHost) -> None:
    assert len(h.settled_pids()) == 1  # its sshd alone


def test_os_values_are_the_servers_hosts_changed_by_its_agent_and_put_back(
    db: SimHost, tmp_path: Path, state_dir: Path
) -> None:
    original = _values()
    assert original[0] not in ("2907", "2909") and original[1] != "493"
    path = write_experiment(tmp_path, _body(db, "2s"))
    plan = pgsweep("plan", str(path), "--commands")
    assert plan.returncode == 0, plan.stderr
    server_part = plan.stdout.split("host db (the server")[1]
    assert str(EXPIRE) in server_part and str(WRITEBACK) in server_part
    assert _values() == original  # plan: nothing
    run = _start(path, tmp_path / "res")
    try:
        _wait_for("the expiry set", lambda: EXPIRE.read_text().strip() in ("2907", "2909"), run)
        assert WRITEBACK.read_text().strip() == "493"
        # taken by the agent on db (this machine's kernel, here), while the run lasts
        assert _lock_held() and "through host db's agent" in LOCK.read_text()
        # a run here that changes kernel values is refused while db's agent holds the lock
        here = write_experiment(tmp_path, '[experiment]\nname = "here"\n[os]\nsysctl.'
                                '"vm.dirty_expire_centisecs" = 2911\n[workload]\n'
                                'duration = "1s"\n', "here.toml")  # fmt: skip
        refused = pgsweep("run", str(here), "--results", str(tmp_path / "here"))
        assert refused.returncode == 2 and "through host db's agent" in refused.stderr
        out, err = run.communicate(timeout=300)
    finally:
        _stop(run)
    effective = _effective(run, out + err, tmp_path / "res")  # read back on db
    assert sorted(e["os.sysctl.vm.dirty_expire_centisecs"] for e in effective) == ["2907",
                                                                                 "2909"]
    assert all(e["os.sysctl.vm.dirty_writeback_centisecs"] == "493" for e in effective)
    assert _values() == original
    assert not _lock_held()
    _nothing_left(db)


def test_the_controller_killed_leaves_the_servers_hosts_kernel_as_it_was(
    db: SimHost, tmp_path: Path, state_dir: Path
) -> None:
    """Mid-trial, with a filesystem on a loop device under the server too: the agent puts
    the kernel values back, unmounts and detaches, and exits."""
    original, loops = _values(), _loops()
    path = write_experiment(tmp_path, _body(db, "30s", OS + STORAGE))
    run = _start(path, tmp_path / "res")
    try:
        _wait_for("the expiry set", lambda: EXPIRE.read_text().strip() in ("2907", "2909"), run)
        _wait_for("db's storage mounted", lambda: _mounted(db), run, every=0.3)
        assert len(_loops()) == len(loops) + 1
        run.send_signal(signal.SIGKILL)
        run.wait(timeout=30)
        _nothing_left(db)  # the agent saw its stdin end, put db back and exited
        assert "pgsweep-work" not in _mounts(db) and _loops() == loops
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
        restore = pgsweep("restore", timeout=300)
    assert _values() == original
    assert not _lock_held()
    assert restore.returncode == 0, restore.stdout + restore.stderr


def test_filesystems_on_loop_devices_are_made_and_mounted_on_the_servers_host(
    db: SimHost, tmp_path: Path, state_dir: Path
) -> None:
    """[storage] beside a server elsewhere: its agent attaches a loop device over a sparse
    image in its work area, makes each filesystem and mounts it in that host's own mount
    table (not this machine's); each trial records what its data sits on; all of it goes
    at the end."""
    loops = _loops()
    body = _body(db, "2s", STORAGE, 'storage.filesystem = ["ext4", "xfs"]')
    path = write_experiment(tmp_path, body)
    run = _start(path, tmp_path / "res")
    try:
        _wait_for("db's storage mounted", lambda: _mounted(db), run, every=0.3)
        mounted = [line for line in _mounts(db).splitlines() if "/storage/mnt-" in line]
        assert len(mounted) == 1 and mounted[0].startswith("/dev/loop"), mounted
        assert "/storage/mnt-" not in Path("/proc/self/mounts").read_text()  # db's alone
        out, err = run.communicate(timeout=300)
    finally:
        _stop(run)
    effective = _effective(run, out + err, tmp_path / "res")
    assert sorted(e["storage.filesystem"] for e in effective) == ["ext4", "xfs"]
    assert all(e["storage.device"].startswith("/dev/loop") for e in effective)
    assert all(e["storage.root"] == "0711 uid 0" for e in effective)
    _nothing_left(db)
    assert "/storage/mnt-" not in _mounts(db) and _loops() == loops
