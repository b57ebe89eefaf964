"""Who keeps a filesystem busy: a pool that cannot be destroyed names them (zfsfuse's
error), found by their working directory, open files or mappings under its mount point."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from pgsweep.host import areaprocs, zfsfuse


def test_a_process_whose_directory_or_file_is_under_the_point_is_named(tmp_path: Path) -> None:
    point, beside = tmp_path / "mnt", tmp_path / "mnt-other"
    point.mkdir()
    beside.mkdir()
    (point / "held").write_text("x")
    in_dir = subprocess.Popen(["sleep", "60"], cwd=point)
    with_file = subprocess.Popen(["sh", "-c", "exec 3<held; cd /; exec sleep 60"], cwd=point)
    elsewhere = subprocess.Popen(["sleep", "60"], cwd=beside)  # a name that only starts alike
    try:
        for _ in range(100):  # the shell has opened the file and left the folder
            if Path(f"/proc/{with_file.pid}/cmdline").read_bytes().startswith(b"sleep"):
                break
            time.sleep(0.02)
        found = areaprocs.users_of(point, None)
        assert in_dir.pid in found and with_file.pid in found
        assert elsewhere.pid not in found
        said = zfsfuse._holders(point)
        assert f"in use under {point} by" in said
        assert f"{in_dir.pid} (sleep, uid 0)" in said and str(elsewhere.pid) not in said
        assert zfsfuse._holders(beside / "nothing-here") == ""
        assert zfsfuse._holders(None) == ""
    finally:
        for p in (in_dir, with_file, elsewhere):
            p.kill()
            p.wait()


def test_what_ansible_runner_left_in_its_project_is_stopped(tmp_path: Path) -> None:
    """A playbook in a session of its own, working in the project's folder, outlives a
    killed ansible-runner: stopped by PID after the run, with its children; a process
    working elsewhere is not touched."""
    from pgsweep.engine.fleet_ansible import stop_leftovers

    project, elsewhere = tmp_path / "run" / "project", tmp_path / "other"
    project.mkdir(parents=True)
    elsewhere.mkdir()
    left = subprocess.Popen(["sh", "-c", "trap '' TERM; sleep 60 & wait"], cwd=project,
                            start_new_session=True)  # fmt: skip
    other = subprocess.Popen(["sleep", "60"], cwd=elsewhere)
    try:
        deadline = time.monotonic() + 10
        while len(areaprocs.users_of(tmp_path / "run", 0)) < 2:  # the shell and its sleep
            assert time.monotonic() < deadline
            time.sleep(0.02)
        said = stop_leftovers(tmp_path / "run")
        assert len(said) == 2 and all("left by ansible-runner" in s for s in said), said
        left.wait(timeout=10)  # gone (it ignored SIGTERM: SIGKILL)
        assert areaprocs.users_of(tmp_path / "run", 0) == []
        assert other.poll() is None
    finally:
        for p in (left, other):
            p.kill()
            p.wait()
