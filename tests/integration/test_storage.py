"""The storage layer on real filesystems over real loop devices: each filesystem carries a
cluster through a trial and the trial records what the data directory sits on; sector
size, btrfs nocow and a data size relative to a memory limit take effect; real devices are
refused unless allowed and free; and nothing is left mounted or attached, after kill -9
and `pgsweep restore` too."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from conftest import pgsweep, pgsweep_start, requires_pg, stop_and_restore, trials, write_experiment
from pgsweep.collect import blockio
from pgsweep.host import mounts as pgsweep_mounts
from pgsweep.host import proc

WORK_ON_DISK = True  # see conftest: filesystems on loop devices backed by the disk's files

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="mkfs, mount and losetup need root")


def ours() -> list[str]:
    """pgsweep's mounts, loop devices and zfs-fuse daemons still on the machine. A zombie
    has exited: once its parent (a run killed by the test) is gone, only PID 1 can collect
    it, and this machine's PID 1 never does."""
    mounts = [m.point for m in pgsweep_mounts.mounts() if "/storage/mnt-" in m.point]
    loops = subprocess.run(["losetup", "--noheadings", "--output", "NAME,BACK-FILE"],
                           capture_output=True, text=True, check=True).stdout  # fmt: skip
    daemons = [f"zfs-fuse {p.parent.name}" for p in Path("/proc").glob("[0-9]*/comm")
               if _comm(p) == "zfs-fuse" and not proc.gone(int(p.parent.name))]  # fmt: skip
    return mounts + [line for line in loops.splitlines() if "/images/disk-" in line] + daemons


def _db(results: Path, sql: str) -> list[tuple]:  # type: ignore[type-arg]
    db = sqlite3.connect(results / "results.db")
    rows = db.execute(sql).fetchall()
    db.close()
    return rows


def _run_ok(tmp_path: Path, body: str) -> Path:
    res = pgsweep("run", str(write_experiment(tmp_path, body)), "--results", str(tmp_path / "r"))
    assert res.returncode == 0, res.stderr + res.stdout
    return tmp_path / "r"


def _levels(results: Path) -> dict[str, dict]:  # type: ignore[type-arg]
    rows = _db(results, "SELECT id, levels_json FROM configuration")
    return {c: json.loads(lv) for c, lv in rows}


HEAD = """
[experiment]
name = "storage"
seed = 3
[cluster]
scale = 1
[workload]
script = "tpcb-like"
clients = 1
duration = "1s"
rate = 200  # conftest.MECHANICS (on zfs-fuse every write is the daemon's CPU too)
warmup = "0s"
[repeat]
rounds = 1
"""


@requires_pg
@root_only
def test_each_filesystem_carries_a_cluster_and_is_recorded(tmp_path: Path, state_dir: Path) -> None:
    body = (
        HEAD
        + """
    [storage]
    device = "loop:1GiB"
    mount_options = "noatime"
    [factors]
    storage.filesystem = ["ext4", "xfs", "btrfs"]
    """
    )
    _run_ok(tmp_path, body)
    levels = _levels(tmp_path / "r")
    written = dict(_db(tmp_path / "r", "SELECT trial_id, value FROM metric "
                                       "WHERE name = 'io.device_bytes_written'"))  # fmt: skip
    rows = trials(tmp_path / "r")
    assert len(rows) == 3
    for t in rows:
        fs, seen = levels[t["config_id"]]["storage.filesystem"], json.loads(t["effective_json"])
        assert t["status"] == "ok", t["reason"]
        assert seen["storage.filesystem"] == fs
        assert seen["storage.device"].startswith("/dev/loop")
        options = seen["storage.mount_options"].split(",")
        assert "rw" in options and "noatime" in options  # the level's, read back from the kernel
        # ext4 does not zero its inode tables in the background during trials
        assert ("noinit_itable" in options) == (fs == "ext4"), options
        assert len(options) == len(set(options))
        assert seen["storage.root"] == "0711 uid 0"  # the new filesystem's root, as made
        loop = seen["storage.device"].removeprefix("/dev/")
        assert seen[f"storage.sector_size.{loop}"] == "512"
        assert seen[f"storage.loop_direct_io.{loop}"] == "1"  # no host page cache under it
        assert written[t["id"]] > 0  # device bytes written by the trial, on the loop device
        assert "new-storage" in json.loads(t["events_json"])
    assert not ours()
    assert not list(state_dir.glob("*.undo"))


@requires_pg
@root_only
def test_io_latency_times_the_loop_devices_requests_in_round_one(
    tmp_path: Path, state_dir: Path
) -> None:
    """[experiment] io_latency on an ext4 loop device: each round-1 trial keeps the loop
    device's request latencies (only its), a commit that waits for its WAL flush makes many
    more cache flushes than one that does not, and explain and export show them. (Round 1
    only: tests/unit/test_recorded_iolatency.py and the CPU profile's test_explain.)"""
    body = HEAD.replace('seed = 3', 'seed = 3\nio_latency = "2s"') + """
    [storage]
    device = "loop:1GiB"
    filesystem = "ext4"
    [factors]
    server.synchronous_commit = ["on", "off"]
    """
    results = _run_ok(tmp_path, body)
    levels = _levels(results)
    got = {tid: (cfg, rnd, gz) for tid, cfg, rnd, gz in _db(
        results, "SELECT t.id, t.config_id, t.round, a.gz FROM trial t LEFT JOIN artifact a "
        "ON a.trial_id = t.id AND a.name = 'io_latency.tsv'")}  # fmt: skip
    assert not _db(results, "SELECT trial_id FROM artifact WHERE name = 'io_latency.err'")
    loops = {json.loads(e)["storage.device"].removeprefix("/dev/")
             for (e,) in _db(results, "SELECT effective_json FROM trial")}  # fmt: skip
    flushes = {}
    for tid, (cfg, rnd, gz) in got.items():
        assert (gz is not None) == (rnd == 1), tid  # round 1 only
        if gz is None:
            continue
        hist = blockio.parse(gzip.decompress(gz).decode())
        assert {dev for dev, _, _ in hist} <= loops and hist  # the loop device, not vda
        kinds = {k: sum(n for (_, kk, _), n in hist.items() if kk == k) for k in blockio.KINDS}
        assert kinds["write"] > 0
        flushes[levels[cfg]["server.synchronous_commit"]] = kinds["flush"]
    # every commit on waits for its WAL's fdatasync (a cache flush on ext4); off, the WAL
    # writer flushes a few times a second
    assert flushes["on"] > 3 * max(flushes["off"], 1), flushes
    on = next(c for c, lv in levels.items() if lv["server.synchronous_commit"] == "on")
    off = next(c for c in levels if c != on)
    res = pgsweep("explain", str(results), "--config", off, "--against", on)
    assert res.returncode == 0, res.stderr
    (loop,) = loops
    assert f"{loop} flush" in res.stdout and "io_latency" in res.stdout
    out = tmp_path / "io.json"
    res = pgsweep("export", str(results), "--what", "io_latency", "--format", "json",
                  "-o", str(out))  # fmt: skip
    assert res.returncode == 0, res.stderr
    rows = json.loads(out.read_text())
    assert {r["trial_id"] for r in rows} == {t for t, (_, rnd, _) in got.items() if rnd == 1}
    per = {lv: sum(r["requests"] for r in rows if r["kind"] == "flush"
                   and r["server.synchronous_commit"] == lv) for lv in ("on", "off")}  # fmt: skip
    assert per == flushes
    assert all(r["device"] == loop and r["low_us"] < r["high_us"] for r in rows)
    assert not ours()


@requires_pg
@root_only
def test_against_a_file_without_storage_gives_each_side_its_own(
    tmp_path: Path, state_dir: Path
) -> None:
    """`run FILE --against DIR` where DIR's file puts the clusters on an ext4 loop device
    and FILE on the work area: each side's trials run on their own, as recorded from the
    mount under the data directory; nothing stays mounted or attached."""
    before = write_experiment(tmp_path, HEAD + '[storage]\ndevice = "loop:1GiB"\n'
                              'filesystem = "ext4"\n', "before.toml")  # fmt: skip
    first = pgsweep("run", str(before), "--results", str(tmp_path / "before"))
    assert first.returncode == 0, first.stderr + first.stdout
    res = pgsweep("run", str(write_experiment(tmp_path, HEAD)), "--results",
                  str(tmp_path / "r"), "--against", str(tmp_path / "before"))  # fmt: skip
    assert res.returncode == 0, res.stderr + res.stdout
    levels = _levels(tmp_path / "r")
    sides = {}
    for t in trials(tmp_path / "r"):
        assert t["status"] == "ok", t["reason"]
        sides[levels[t["config_id"]]["run.against"]] = json.loads(t["effective_json"])
    assert sides["before"]["storage.filesystem"] == "ext4"
    assert sides["before"]["storage.device"].startswith("/dev/loop")
    assert "storage.filesystem" not in sides["after"]  # the work area's own filesystem
    assert not ours()
    assert not list(state_dir.glob("*.undo"))


@requires_pg
@root_only
def test_btrfs_nocow_and_sector_size(tmp_path: Path, state_dir: Path) -> None:
    body = (
        HEAD
        + """
    [storage]
    device = "loop:1GiB"
    filesystem = "btrfs"
    [factors]
    storage.btrfs_nocow = [false, true]
    storage.sector_size = [512, 4096]
    """
    )
    _run_ok(tmp_path, body)
    levels = _levels(tmp_path / "r")
    for t in trials(tmp_path / "r"):
        level, seen = levels[t["config_id"]], json.loads(t["effective_json"])
        loop = seen["storage.device"].removeprefix("/dev/")
        assert seen[f"storage.sector_size.{loop}"] == str(level["storage.sector_size"])
        assert seen["storage.btrfs_nocow"] == str(level["storage.btrfs_nocow"])
    assert not ours()


@requires_pg
@root_only
def test_size_as_a_share_of_the_memory_limit(tmp_path: Path, state_dir: Path) -> None:
    body = (
        HEAD.replace("scale = 1", 'size = "25% of RAM"')
        + """
    [os]
    memory_limit = "512MiB"
    """
    )
    _run_ok(tmp_path, body)
    load = dict(_db(tmp_path / "r", "SELECT name, value FROM load_counter"))
    assert load["load.target_bytes"] == 128 * 1024**2  # a quarter of the limit, not of RAM
    assert abs(load["load.database_bytes"] / (128 * 1024**2) - 1) < 0.15, load
    assert 5 <= load["load.scale"] <= 12


@pytest.fixture
def spare_loop(tmp_path: Path):  # type: ignore[no-untyped-def]
    """A loop device with an ext4 signature, as a stand-in for a user's real disk."""
    image = tmp_path / "spare.img"
    with open(image, "wb") as f:
        f.truncate(300 * 1024**2)
    subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], check=True)
    dev = subprocess.run(["losetup", "--find", "--show", str(image)], capture_output=True,
                         text=True, check=True).stdout.strip()  # fmt: skip
    point = tmp_path / "mnt"
    try:
        yield Path(dev), point
    finally:
        subprocess.run(["umount", str(point)], capture_output=True, check=False)
        subprocess.run(["losetup", "-d", dev], check=False)


def _first_mib(dev: Path) -> str:
    with open(dev, "rb") as f:
        return hashlib.sha256(f.read(1024**2)).hexdigest()


@requires_pg
@root_only
def test_real_devices_are_refused_unless_allowed_and_free(
    tmp_path: Path, state_dir: Path, spare_loop: tuple[Path, Path]
) -> None:
    dev, point = spare_loop
    before = _first_mib(dev)
    path = write_experiment(tmp_path, HEAD + f'[storage]\ndevice = "{dev}"\n')
    runs = [
        ([], "the command line did not allow it"),
        (["--allow-device", str(dev)], "carries a signature: ext4 (offset 0x438)"),
    ]
    for extra, message in runs:
        res = pgsweep("run", str(path), "--results", str(tmp_path / "r"), *extra)
        assert res.returncode == 2, res.stderr + res.stdout
        assert message in res.stderr and f"{path}:" in res.stderr, res.stderr
        assert _first_mib(dev) == before
        assert not (tmp_path / "r").exists()
    point.mkdir()
    # read-only, so ext4 itself writes nothing (no lazy init, no journal) while mounted
    subprocess.run(["mount", "-o", "ro,noload", str(dev), str(point)], check=True)
    before = _first_mib(dev)  # mounting wrote the superblock; compare from here
    res = pgsweep("run", str(path), "--results", str(tmp_path / "r"),
                  "--allow-device", str(dev), "--wipe")  # fmt: skip
    assert res.returncode == 2, res.stderr + res.stdout
    assert f"mounted at {point}" in res.stderr
    assert _first_mib(dev) == before
    assert not (tmp_path / "r").exists(), "a refused run leaves no results folder"


@requires_pg
@root_only
@pytest.mark.parametrize("filesystem", ["xfs", "zfs"])
def test_kill_9_then_restore_leaves_no_mount_or_loop(
    tmp_path: Path, state_dir: Path, filesystem: str
) -> None:
    if filesystem == "zfs" and not Path("/usr/sbin/zfs-fuse").exists():
        pytest.skip("zfs-fuse is not installed")
    storage = f'[storage]\ndevice = "loop:1GiB"\nfilesystem = "{filesystem}"\n'
    body = HEAD.replace('duration = "1s"', 'duration = "30s"') + storage
    path = write_experiment(tmp_path, body)
    run = pgsweep_start("run", str(path), "--results", str(tmp_path / "r"))
    try:
        deadline = time.monotonic() + 120
        # a mount (the pool's, for zfs) and the run's own pgbench: a pgbench left by an
        # earlier killed run must not start the kill before the pool exists
        while time.monotonic() < deadline and not (_mounted() and _pgbench_running(run.pid)):
            time.sleep(0.3)
        assert _mounted() and len(ours()) >= 2, "no mount and loop device within 2 minutes"
        run.send_signal(signal.SIGKILL)
        run.wait(timeout=30)
        assert ours(), "kill -9 leaves them for restore"
        res = pgsweep("restore")
        assert res.returncode == 0, res.stderr
        assert "detached" in res.stdout, res.stdout
        undone = "destroyed pool" if filesystem == "zfs" else "unmounted"
        assert undone in res.stdout, res.stdout
        assert not ours(), res.stdout
        assert not list(state_dir.glob("*.undo"))
        assert not Path("/var/lib/zfs/zpool.cache").exists()
    finally:
        stop_and_restore(run)


def _mounted() -> bool:
    return any("/storage/mnt-" in m.point for m in pgsweep_mounts.mounts())


def _pgbench_running(ancestor: int) -> bool:
    """A live pgbench started (through any helper) by process `ancestor`."""
    for comm in Path("/proc").glob("[0-9]*/comm"):
        pid = int(comm.parent.name)
        if _comm(comm) != "pgbench" or proc.gone(pid):
            continue
        while pid > 1:
            try:
                pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                break
            if pid == ancestor:
                return True
    return False


@requires_pg
@root_only
@pytest.mark.parametrize("cold", [False, True])
def test_zfs_live_property_changes_keep_the_cluster(
    tmp_path: Path, state_dir: Path, cold: bool
) -> None:
    if not Path("/usr/sbin/zfs-fuse").exists():
        pytest.skip("zfs-fuse is not installed")
    body = (
        HEAD.replace("tpcb-like", "select-only")
        + """
    [storage]
    device = "loop:1GiB"
    filesystem = "zfs"
    [storage.zfs]
    recordsize = "8K"
    arc_max = "64MiB"
    [factors]
    storage.zfs.primarycache = ["metadata", "all"]
    """
    )
    if cold:  # on ZFS, dropping caches before each trial empties the ARC too
        body += '[os]\ndrop_caches = "before_trial"\n'
    _run_ok(tmp_path, body)
    levels = _levels(tmp_path / "r")
    written = dict(_db(tmp_path / "r", "SELECT trial_id, value FROM metric "
                                       "WHERE name = 'io.device_bytes_written'"))  # fmt: skip
    rows = trials(tmp_path / "r")
    assert len(rows) == 2
    events = [e for t in rows for e in json.loads(t["events_json"])]
    assert events.count("new-cluster") == 1 and events.count("new-storage") == 1
    assert events.count("zfs-set") >= 2  # the first trial, then the change
    if cold:
        assert events.count("arc-drop") == 2 and events.count("drop-caches") == 2
    else:  # every change after the first setting
        assert events.count("arc-drop") == events.count("zfs-set") - 1
    identities = set()
    for t in rows:
        seen = json.loads(t["effective_json"])
        assert t["status"] == "ok", t["reason"]
        assert seen["storage.filesystem"] == "fuse.zfs"
        assert seen["storage.zfs.implementation"].startswith("zfs-fuse")
        assert (
            seen["storage.zfs.primarycache"] == levels[t["config_id"]]["storage.zfs.primarycache"]
        )
        assert seen["storage.zfs.recordsize"] == "8K"
        assert seen["storage.root"] == "0711 uid 0"  # the pool's root, made root's as ext4's
        assert seen["storage.pool_devices"].startswith("loop")
        assert t["id"] in written  # the pool's loop device is counted
        identities.add(seen["cluster.system_identifier"])
    assert len(identities) == 1, "one cluster for every primarycache level"
    assert not ours()  # the daemon too
    assert not Path("/var/lib/zfs/zpool.cache").exists(), "pools are made with cachefile=none"


def _comm(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


@requires_pg
@root_only
def test_wal_on_a_device_of_its_own_survives_snapshot_restores(
    tmp_path: Path, state_dir: Path
) -> None:
    body = (
        HEAD.replace("rounds = 1", "rounds = 3")
        + """
    [storage]
    device = "loop:1GiB"
    wal_device = "loop:512MiB"
    [storage.wal]
    filesystem = "xfs"
    sector_size = 4096
    """
    )
    _run_ok(tmp_path, body)
    rows = trials(tmp_path / "r")
    assert [t["status"] for t in rows] == ["ok"] * 3, [t["reason"] for t in rows]
    assert "restore" in json.loads(rows[1]["events_json"])  # data and WAL snapshots put back
    for t in rows:
        seen = json.loads(t["effective_json"])
        assert seen["storage.filesystem"] == "ext4" and seen["storage.wal.filesystem"] == "xfs"
        data_loop = seen["storage.device"].removeprefix("/dev/")
        wal_loop = seen["storage.wal.device"].removeprefix("/dev/")
        assert data_loop != wal_loop
        assert seen[f"storage.sector_size.{data_loop}"] == "512"
        assert seen[f"storage.sector_size.{wal_loop}"] == "4096"
        assert t["tps"] > 0
    assert not ours()


@requires_pg
@root_only
def test_a_mount_option_the_kernel_rejects_fails_the_trial_quoting_it(
    tmp_path: Path, state_dir: Path
) -> None:
    body = (
        HEAD + '[storage]\ndevice = "loop:1GiB"\nfilesystem = "xfs"\nmount_options = "nobarrier"\n'
    )
    res = pgsweep("run", str(write_experiment(tmp_path, body)), "--results", str(tmp_path / "r"))
    assert res.returncode == 3, res.stderr + res.stdout
    (row,) = trials(tmp_path / "r")
    assert row["status"] == "failed"
    assert "mounting xfs with 'nobarrier' failed" in row["reason"]
    assert "xfs: Unknown parameter 'nobarrier'" in row["reason"], row["reason"]
    assert not ours()


@requires_pg
@root_only
def test_a_loop_image_larger_than_the_free_space_is_refused(
    tmp_path: Path, state_dir: Path
) -> None:
    body = HEAD + '[storage]\ndevice = "loop:100TiB"\n'
    res = pgsweep("run", str(write_experiment(tmp_path, body)), "--results", str(tmp_path / "r"))
    assert res.returncode == 2, res.stderr + res.stdout
    assert "loop:100TiB may grow to 102400.0 GiB" in res.stderr and "GiB free" in res.stderr
    assert not (tmp_path / "r").exists() and not ours()
