"""`pgsweep plan --commands` on this machine: for a file with os, server, cluster and
workload keys it names what a run would do (initdb, pg_ctl, pgbench, the kernel files
with the values it would write, journaled first, and put back at the end), the first
trial of each kind (new cluster, restore, restart, reload), and it changes nothing: no
server, no /tmp/pgsweep-* folder, no journal, no results folder, kernel values as they
were."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

import pytest

from conftest import open_base, pgsweep, postmasters, requires_pg, write_experiment
from pgsweep.host.journal import read_setting

THP = Path("/sys/kernel/mm/transparent_hugepage/enabled")
SWAPPINESS = Path("/proc/sys/vm/swappiness")

pytestmark = [requires_pg, pytest.mark.skipif(os.geteuid() != 0,
                                              reason="os keys need root")]  # fmt: skip


def _tmp() -> set[str]:
    return {n for n in os.listdir("/tmp") if n.startswith("pgsweep-")}


def test_plan_commands_names_every_effect_and_changes_nothing(
    tmp_path: Path, state_dir: Path
) -> None:
    thp_was, swap_was = read_setting(THP), read_setting(SWAPPINESS)
    thp = "never" if thp_was != "never" else "always"
    swap = "17" if swap_was != "17" else "23"
    path = write_experiment(tmp_path, f"""
        [experiment]
        name = "dry"
        seed = 4  # its order has two select-only trials in a row of each kind
        [cluster]
        scale = 1
        [os]
        thp = "{thp}"
        sysctl = {{ "vm.swappiness" = {swap} }}
        [factors]
        server.shared_buffers = ["128MB", "256MB"]
        server.synchronous_commit = ["on", "off"]
        workload.script = ["select-only", "tpcb-like"]
        [workload]
        clients = 2
        duration = "2s"
        warmup = "1s"
        [repeat]
        rounds = 1
    """)  # fmt: skip
    results = tmp_path / "results"
    servers, folders = set(postmasters()), _tmp()
    res = pgsweep("plan", str(path), "--results", str(results), "--commands")
    assert res.returncode == 0, res.stderr + res.stdout
    out = res.stdout
    # nothing changed on the machine
    assert set(postmasters()) <= servers, "a server was left running"
    assert _tmp() <= folders, _tmp() - folders
    assert (read_setting(THP), read_setting(SWAPPINESS)) == (thp_was, swap_was)
    assert not state_dir.exists() or not list(state_dir.iterdir())  # no journal, no lock
    assert not results.exists()
    # what it names: the first trial of each kind, with its commands
    titles = re.findall(r"the first with ([a-z ]+) \[", out)
    assert {"new cluster", "restore", "restart", "reload"} <= set(titles), titles
    assert re.search(r"run as pgsweep: \S+/initdb -D \S+/clusters/cluster-1/data ", out)
    assert re.search(r"run as pgsweep: \S+/pg_ctl -D \S+/cluster-1/conf .* start\n", out)
    assert re.search(r"run as pgsweep: \S+/pg_ctl .* reload\n", out)
    assert re.search(r"run as pgsweep: \S+/pgbench -h \S+ -p 5432 -U pgsweep -i -q -s 1 ", out)
    assert "cp -a --reflink=auto" in out  # the snapshot taken, then put back
    assert re.search(r"run as pgsweep: \S+/pgbench .* -b tpcb-like -c 2 -j 1 -T 2 ", out)
    # kernel values: journaled (with the original) before each write, put back at the end
    journal = f'"file": "{THP}", "original": "{thp_was}"'
    write = f"kernel: {THP} = {thp} (was "
    assert journal in out and write in out
    assert out.index(journal) < out.index(write)
    assert f"kernel: {SWAPPINESS} = {swap} (was {swap_was})" in out
    end = out[out.index("after the last trial"):]
    assert f"kernel: {SWAPPINESS} = {swap_was} (was {swap})" in end
    assert f"kernel: {THP} = {thp_was} " in end
    assert re.search(r"remove \S+/clusters/cluster-1\n", end)
    # what it cannot show, said
    assert "not shown:\n  - the work area" in out


def _loops_and_mounts() -> tuple[list[str], str]:
    """Every attached loop device's backing file, and every mount."""
    loops = sorted(f.read_text() for f in Path("/sys/block").glob("loop*/loop/backing_file"))
    return loops, Path("/proc/self/mounts").read_text()


def test_plan_commands_shows_the_storage_it_would_make_and_makes_none(
    tmp_path: Path, state_dir: Path
) -> None:
    """[storage] goes through the host: the dry run shows the loop image it would journal
    and attach, the mkfs and the mount, walks the trial on the mount point, shows them
    taken down at the end, and attaches, formats and mounts nothing."""
    path = write_experiment(tmp_path, """
        [experiment]
        name = "dry-storage"
        seed = 1
        [storage]
        device = "loop:1GiB"
        mount_options = "noatime"
        [factors]
        storage.filesystem = ["ext4", "xfs"]
        [cluster]
        scale = 1
        [workload]
        duration = "2s"
        warmup = "0s"
        [repeat]
        rounds = 1
    """)  # fmt: skip
    before, folders = _loops_and_mounts(), _tmp()
    res = pgsweep("plan", str(path), "--results", str(tmp_path / "r"), "--commands")
    assert res.returncode == 0, res.stderr + res.stdout
    assert _loops_and_mounts() == before and _tmp() <= folders
    assert not (tmp_path / "r").exists()
    out = res.stdout
    image = r"\S+/private/images/disk-1\.img"
    assert re.search(rf"journal \S+\.storage-1\.undo: {{\"loop_image\": \"{image}\"}}\n\s+"
                     rf"attach /dev/loopDRYRUN \(losetup, direct I/O on\) over a sparse file "
                     rf"{image} of 1 GiB\n", out), out
    assert re.search(r"mkfs\.(ext4 -F|xfs -f) -q /dev/loopDRYRUN\n", out), out
    assert re.search(r"mount -t (xfs -o nosuid,nodev|ext4 -o nosuid,nodev,noinit_itable),"
                     r"noatime /dev/loopDRYRUN "
                     r"\S+/storage/mnt-1; its root made root's, 0711\n", out), out
    assert re.search(r"run as pgsweep: \S+/initdb -D \S+/storage/mnt-1/cluster-1/data ", out)
    end = out[out.index("after the last trial"):]
    assert re.search(r"umount \S+/storage/mnt-2\n\s+losetup -d the loop device over "
                     r"\S+/disk-2\.img", end), end
    assert "[storage]" not in out[out.index("not shown:"):]


def test_a_client_hosts_side_is_shown_with_its_copy_of_a_custom_script(
    tmp_path: Path, state_dir: Path, request: pytest.FixtureRequest
) -> None:
    """With a client host (its addresses as `plan` found them on its connection), the dry
    run shows the server listening on this machine's address there, and the workload tool
    on that host over TCP, a custom script read from its copy in the trial's folder there
    (as `run` copies it), with the passfile and no SSL."""
    from pgsweep import spec
    from pgsweep.engine import dryrun, plans

    folder = Path(tempfile.mkdtemp(prefix="pgsweep-test-dry-", dir=open_base(__name__)))
    folder.chmod(0o755)  # the server user reads the script (plan checks it can)
    script = folder / "read.sql"
    script.write_text("SELECT 1;\n")
    script.chmod(0o644)
    request.addfinalizer(lambda: shutil.rmtree(folder))
    path = write_experiment(tmp_path, f"""
        [experiment]
        name = "dry-client"
        seed = 1
        [cluster]
        scale = 1
        [workload]
        script = "{script}"
        duration = "2s"
        warmup = "0s"
        [factors]
        server.synchronous_commit = ["on", "off"]
        [repeat]
        rounds = 1
    """)  # fmt: skip
    exp = spec.load(path)
    results = tmp_path / "r"
    plan = plans.plan_for(exp, plans.preflight(exp, results))
    out = "\n".join(dryrun.commands(exp, plan, results, "loadgen",
                                    {"loadgen": "127.0.0.1 22 127.0.0.2 22"}))  # fmt: skip
    port = re.search(r"over TCP to 127\.0\.0\.1:(\d+) ", out)
    assert port, out
    assert "-c listen_addresses=127.0.0.1 " in out and f"-c port={port[1]} " in out
    work = "/var/tmp/pgsweep-work-r-DRYRUN"
    assert re.search(rf"on host loadgen, with PGPASSFILE={work}/passfile PGSSLMODE=disable, "
                     rf"run as pgsweep: \S+/pgbench -h 127\.0\.0\.1 -p {port[1]} -U pgsweep .*-f "
                     rf"{work}/trials/r1-c0[12]/\S*read\.sql ", out), out
    # never a path on this machine (the file's, or the run's frozen copy in its work area)
    assert not re.search(rf"on host loadgen.* -f ({re.escape(str(script))}|\S+/scripts/)", out)
    assert not results.exists()
