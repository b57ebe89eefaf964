"""The os layer on this machine's real kernel files: each factor applied in a real trial and
read back where the kernel shows it; every value as it was after the run, after a refused
start, and after kill -9 followed by `pgsweep restore`."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from conftest import (
    SERVER_USER,
    pgsweep,
    pgsweep_start,
    postmasters,
    requires_pg,
    stop_and_restore,
    trials,
    write_experiment,
)
from pgsweep.collect import devices
from pgsweep.host.journal import read_setting
from pgsweep.host.local import LOCAL

WORK_ON_DISK = "var-tmp"  # see conftest: the disk's I/O scheduler and the work area on it

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="the os layer changes kernel files")
THP_SHMEM = Path("/sys/kernel/mm/transparent_hugepage/shmem_enabled")
SWAPPINESS = Path("/proc/sys/vm/swappiness")
NR_HUGEPAGES = Path("/proc/sys/vm/nr_hugepages")
CGROUPS = Path("/sys/fs/cgroup/memory")


def _disk() -> str:
    return next(d for d in devices.devices_for(LOCAL, Path("/var/tmp")) if
                (devices.SYS_BLOCK / d / "queue" / "scheduler").exists())  # fmt: skip


def _watched() -> dict[str, str]:
    queue = devices.SYS_BLOCK / _disk() / "queue"
    files = [THP_SHMEM, SWAPPINESS, NR_HUGEPAGES, queue / "scheduler", queue / "read_ahead_kb"]
    return {str(p): read_setting(p) for p in files}


def _others(path: Path) -> tuple[str, str]:
    """Two levels the kernel offers that are not the current value, so the run's last trial
    always leaves a value that only the undo journal can put back. THP's "deny" and
    "force" are emergency/testing modes and never chosen."""
    current = read_setting(path)
    options = [o for o in path.read_text().replace("[", "").replace("]", "").split()
               if o not in (current, "deny", "force")]  # fmt: skip
    if len(options) < 2:
        pytest.skip(f"{path} offers fewer than two other levels")
    return options[0], options[1]


def _experiment(duration: str = "1s", rounds: int = 1) -> str:
    before = _watched()
    queue = devices.SYS_BLOCK / _disk() / "queue"
    shmem, sched = _others(THP_SHMEM), _others(queue / "scheduler")
    swappiness = int(before[str(SWAPPINESS)])
    return f"""
    [experiment]
    name = "os"
    seed = 4
    [cluster]
    scale = 1
    [workload]
    script = "select-only"
    clients = 1
    duration = "{duration}"
    rate = 200  # conftest.MECHANICS
    warmup = "0s"
    [os]
    read_ahead_kb = {int(read_setting(queue / "read_ahead_kb")) // 2 + 4}
    drop_caches = "before_trial"
    memory_limit = "512MiB"
    huge_pages = "2MB"
    [repeat]
    rounds = {rounds}
    [factors]
    os.thp_shmem = ["{shmem[0]}", "{shmem[1]}"]
    os.sysctl."vm.swappiness" = [{(swappiness + 7) % 100}, {(swappiness + 13) % 100}]
    os.io_scheduler = ["{sched[0]}", "{sched[1]}"]
    """


@requires_pg
@root_only
def test_factors_applied_read_back_and_restored(tmp_path: Path, state_dir: Path) -> None:
    before = _watched()
    folder = Path(tempfile.mkdtemp(dir="/var/tmp"))  # on the disk _disk() names
    try:
        path = write_experiment(tmp_path, _experiment())
        res = pgsweep("run", str(path), "--results", str(folder / "res"))
        assert res.returncode == 0, res.stderr + res.stdout
        rows = trials(folder / "res")
        db = sqlite3.connect(folder / "res" / "results.db")
        db_levels = {
            c: json.loads(lv) for c, lv in db.execute("SELECT id, levels_json FROM configuration")
        }
        db.close()
        assert len(rows) == 8
        disk = _disk()
        for t in rows:
            levels, seen = db_levels[t["config_id"]], json.loads(t["effective_json"])
            assert seen["os.thp_shmem"] == levels["os.thp_shmem"]
            assert seen["os.sysctl.vm.swappiness"] == str(levels["os.sysctl.vm.swappiness"])
            assert seen[f"os.io_scheduler.{disk}"] == levels["os.io_scheduler"]
            assert f"os.read_ahead_kb.{disk}" in seen
            assert "drop-caches" in json.loads(t["events_json"])
            assert seen["os.memory_limit"] == str(512 * 1024**2)
            assert seen["os.huge_pages"].startswith("2MB: ") and seen["huge_pages"] == "on"
        db = sqlite3.connect(folder / "res" / "results.db")
        cg = db.execute(
            "SELECT trial_id, name, value FROM metric WHERE name LIKE 'cgroup.%'"
        ).fetchall()
        db.close()
        per_trial: dict[str, dict[str, float]] = {}
        for tid, name, value in cg:
            per_trial.setdefault(tid, {})[name] = value
        assert len(per_trial) == 8
        for m in per_trial.values():
            # the server ran inside the limit: its peak is real and below the limit
            assert m["cgroup.limit_bytes"] == 512 * 1024**2
            assert 0 < m["cgroup.peak_bytes"] <= m["cgroup.limit_bytes"]
        assert _watched() == before
        assert not list(CGROUPS.glob("pgsweep-*"))
        assert not list(state_dir.glob("*.undo"))
    finally:
        subprocess.run(["rm", "-rf", str(folder)], check=False)


PLAIN = """
[experiment]
name = "plain"
[cluster]
scale = 1
[workload]
clients = 1
duration = "1s"
rate = 200  # conftest.MECHANICS
warmup = "0s"
[repeat]
rounds = 1
"""


def _pgbench_running() -> bool:
    """A pgbench measuring (not loading: -i) on the machine (this lane runs one test at a
    time)."""
    for d in Path("/proc").iterdir():
        try:
            argv = (d / "cmdline").read_bytes().split(b"\0") if d.name.isdigit() else [b""]
        except OSError:
            continue
        if argv[0].endswith(b"/pgbench") and not {b"-i", b"--initialize"} & set(argv):
            return True
    return False


@requires_pg
@root_only
def test_kill_9_then_restore_puts_everything_back(tmp_path: Path, state_dir: Path) -> None:
    before = _watched()
    others = set(postmasters())
    folder = Path(tempfile.mkdtemp(dir="/var/tmp"))
    # a trial long enough that the kill lands in it, not between two (the server restarts
    # there for the next THP level)
    path = write_experiment(tmp_path, _experiment(duration="60s", rounds=2))
    env = dict(os.environ, NO_COLOR="1")
    proc = pgsweep_start("run", str(path), "--results", str(folder / "res"), env=env)
    try:
        deadline = time.monotonic() + 120

        def ours() -> list[str]:
            return [d for pid, d in postmasters().items() if pid not in others]

        # inside the 60-second trial: its pgbench runs (a server seen before that could be the
        # load's or the checks' scratch one, stopped a moment later: seen once under load)
        while time.monotonic() < deadline and not (
            list(state_dir.glob("*.undo"))
            and NR_HUGEPAGES.read_text().strip() != before[str(NR_HUGEPAGES)]
            and _pgbench_running()
            and ours()
        ):
            time.sleep(0.2)
        assert _watched() != before, "the run changed nothing within 2 minutes"
        assert NR_HUGEPAGES.read_text().strip() != before[str(NR_HUGEPAGES)], "none reserved"
        assert ours(), "no server of the run within 2 minutes"
        # while it lives, a second run that would change kernel values is refused before it
        # changes or makes anything (each would put back the other's values); a run
        # without [os] runs beside it
        journals = list(state_dir.glob("*.undo"))
        second = pgsweep("run", str(path), "--results", str(folder / "second"))
        assert second.returncode == 2, second.stderr + second.stdout
        assert f"another pgsweep run (PID {proc.pid}, {folder / 'res'})" in second.stderr
        assert "is changing kernel settings" in second.stderr
        assert not (folder / "second").exists() and list(state_dir.glob("*.undo")) == journals
        plain = write_experiment(tmp_path, PLAIN, "plain.toml")
        beside = pgsweep("run", str(plain), "--results", str(folder / "beside"))
        assert beside.returncode == 0, beside.stderr + beside.stdout
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        assert list(state_dir.glob("*.undo")), "the journal is what restore will read"
        res = pgsweep("restore")
        assert res.returncode == 0, res.stderr
        assert "restored" in res.stdout and "stopped postmaster" in res.stdout
        assert _watched() == before
        assert not list(state_dir.glob("*.undo"))
        assert not ours()
        assert not list(CGROUPS.glob("pgsweep-*")), "restore removes the memory cgroup"
        assert NR_HUGEPAGES.read_text().strip() == before[str(NR_HUGEPAGES)], "pages given back"
        again = pgsweep("restore")  # twice is harmless
        assert again.returncode == 0 and "nothing left" in again.stdout
    finally:
        stop_and_restore(proc)
        subprocess.run(["rm", "-rf", str(folder)], check=False)


@requires_pg
@root_only
def test_against_a_file_without_os_runs_its_side_at_the_machines_values(
    tmp_path: Path, state_dir: Path
) -> None:
    """`run FILE --against DIR` where DIR's file sets kernel values and FILE sets none:
    FILE's trials run with the machine's own values (read back after the "before" trial
    that changed them), never with what the last "before" trial left, and the run puts
    every value back."""
    was = _watched()
    shmem = _others(THP_SHMEM)[0]
    swap = (int(was[str(SWAPPINESS)]) + 7) % 100
    plain = PLAIN.replace("rounds = 1", "rounds = 2")
    plain = plain.replace('name = "plain"', 'name = "plain"\nseed = 5')  # before, after, ...
    os_file = plain + f'[os]\nthp_shmem = "{shmem}"\nsysctl = {{ "vm.swappiness" = {swap} }}\n'
    os_file = os_file.replace("rounds = 2", "rounds = 1")  # only its file is measured again
    folder = Path(tempfile.mkdtemp(dir="/var/tmp"))
    try:
        first = pgsweep("run", str(write_experiment(tmp_path, os_file, "os.toml")),
                        "--results", str(folder / "before"))  # fmt: skip
        assert first.returncode == 0, first.stderr + first.stdout
        assert _watched() == was
        res = pgsweep("run", str(write_experiment(tmp_path, plain)), "--results",
                      str(folder / "res"), "--against", str(folder / "before"))  # fmt: skip
        assert res.returncode == 0, res.stderr + res.stdout
        assert _watched() == was
        db = sqlite3.connect(folder / "res" / "results.db")
        side = {c: json.loads(lv)["run.against"]
                for c, lv in db.execute("SELECT id, levels_json FROM configuration")}
        db.close()
        seen = [(side[t["config_id"]], json.loads(t["effective_json"]))
                for t in trials(folder / "res")]  # fmt: skip
        assert [s for s, _ in seen] == ["before", "after", "before", "after"], seen
        for s, e in seen:
            if s == "before":
                assert e["os.sysctl.vm.swappiness"] == str(swap), e
                assert e["os.thp_shmem"] == shmem, e
            else:  # put back after the "before" trial before it
                assert e["os.sysctl.vm.swappiness"] == was[str(SWAPPINESS)], e
                assert e["os.thp_shmem"] == was[str(THP_SHMEM)], e
    finally:
        subprocess.run(["rm", "-rf", str(folder)], check=False)


@requires_pg
@root_only
def test_scheduler_the_device_lacks_is_refused_before_anything_changes(
    tmp_path: Path, state_dir: Path
) -> None:
    before = _watched()
    body = _experiment().replace('os.io_scheduler = ["', 'os.io_scheduler = ["cfq", "')
    res = pgsweep("run", str(write_experiment(tmp_path, body)), "--results", str(tmp_path / "r"))
    assert res.returncode == 2, res.stderr + res.stdout
    assert "'cfq' is not offered by" in res.stderr and "expected: one of" in res.stderr
    assert _watched() == before
    assert not (tmp_path / "r").exists(), "a refused run leaves no results folder"


@requires_pg
@root_only
def test_non_root_is_refused_naming_the_factors(tmp_path: Path) -> None:
    folder = Path(tempfile.mkdtemp(dir="/var/tmp"))
    folder.chmod(0o755)
    try:
        path = write_experiment(folder, _experiment())
        path.chmod(0o644)
        # the venv's interpreter may live where the user cannot reach (pyenv under /root):
        # run the system python3 on the venv's packages instead
        python = Path("/usr/bin/python3")
        site = Path(__import__("pydantic").__file__).parents[1]
        repo_src = Path(__file__).resolve().parents[2] / "src"
        if not python.exists() or sys.version_info[:2] != _system_version(python):
            pytest.skip("needs /usr/bin/python3 of the venv's Python version")
        cmd = ["runuser", "-u", SERVER_USER, "--", str(python), "-m", "pgsweep.cli", "plan",
               str(path)]  # fmt: skip
        env = dict(os.environ, PYTHONPATH=f"{repo_src}:{site}")
        res = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=folder, timeout=120)
        if "Permission denied" in res.stderr:
            pytest.skip(f"the postgres user cannot read the checkout: {res.stderr.strip()}")
        assert res.returncode == 2, res.stderr + res.stdout
        assert "need root" in res.stderr
        for name in ("os.thp_shmem", "os.sysctl.vm.swappiness", "os.io_scheduler"):
            assert name in res.stderr
    finally:
        subprocess.run(["rm", "-rf", str(folder)], check=False)


def _system_version(python: Path) -> tuple[int, int]:
    out = subprocess.run([str(python), "-c", "import sys; print(sys.version_info[:2])"],
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    major, minor = out.strip("()\n ").split(", ")
    return int(major), int(minor)
