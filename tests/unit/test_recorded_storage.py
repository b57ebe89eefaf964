"""The storage layer's logic on a recording host (host/recording.py): what it makes, in
which order, what it journals first, and what it takes down, for loop images, a WAL
device, an allowed real device (checked again before every mkfs), btrfs without
copy-on-write and a zfs-fuse pool whose live properties change between trials. Nothing
on this machine is touched; the real runs of each path are in
tests/integration/test_storage.py."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from pgsweep.host.agent import Agent
from pgsweep.host.blockdev import Grant
from pgsweep.host.proc import RunAs
from pgsweep.host.recording import RecordingHost
from pgsweep.layers.context import RunContext, Server, TrialContext, TrialFailure
from pgsweep.layers.storage import StorageLayer
from pgsweep.layers.storage_build import FsSettings, StorageSettings
from pgsweep.postgres.binaries import Binaries
from pgsweep.postgres.cluster import Cluster

GIB = 1 << 30


def _fs(device: str = "loop:1GiB", filesystem: str = "ext4", **kw: Any) -> FsSettings:
    size = GIB if device.startswith("loop:") else None
    return FsSettings(device, size, filesystem, kw.get("mkfs", ""), kw.get("mount", ""),
                      kw.get("sector"), kw.get("dio", False), kw.get("nocow", False))  # fmt: skip


def _run(host: RecordingHost, grant: Grant | None = None) -> RunContext:
    bins = Binaries(Path("/usr/lib/postgresql/15/bin"), "15.18", {})
    return RunContext(bins, RunAs("pgsweep"), Path("/w"), Path("/w/private"), Path("/s"), {},
                      host=host, run_id="run", registry=Path("/registry"),
                      grant=grant)  # fmt: skip


def _steps(host: RecordingHost) -> list[tuple[str, str]]:
    """The effects as (kind, what), journal entries as their JSON."""
    return [(e.kind, e.detail["entry"] if e.kind == "journal" else e.what)
            for e in host.effects]  # fmt: skip


def _entry(**kw: str) -> str:
    return json.dumps(kw)


def test_a_loop_filesystem_and_its_wal_are_journaled_before_they_are_made_and_undone_in_reverse(
) -> None:  # fmt: skip
    host = RecordingHost()
    run = _run(host)
    settings = StorageSettings(True, _fs(mount="noatime", sector=4096, dio=True),
                               _fs(filesystem="xfs", mkfs="-m crc=1"))  # fmt: skip
    storage = StorageLayer().build(settings, {}, {}, run)
    assert storage.home == Path("/w/storage/mnt-1")
    assert storage.wal_home == Path("/w/storage/mnt-1-wal")
    journal = "/registry/run.storage-1.undo"
    assert _steps(host) == [
        ("private_dir", "/w/private/storage-cmd"),
        ("private_dir", "/w/storage"),
        ("private_dir", "/w/private/images"),
        ("journal", _entry(loop_image="/w/private/images/disk-1.img")),
        ("attach_loop", "/w/private/images/disk-1.img"),
        ("private_dir", "/w/storage/mnt-1"),
        ("mkfs", "/dev/loop0"),
        ("journal", _entry(mount="/w/storage/mnt-1")),
        ("mount", "/w/storage/mnt-1"),
        ("journal", _entry(loop_image="/w/private/images/disk-1-wal.img")),
        ("attach_loop", "/w/private/images/disk-1-wal.img"),
        ("private_dir", "/w/storage/mnt-1-wal"),
        ("mkfs", "/dev/loop1"),
        ("journal", _entry(mount="/w/storage/mnt-1-wal")),
        ("mount", "/w/storage/mnt-1-wal"),
    ]
    assert all(e.what == journal for e in host.kinds("journal"))
    loop = host.kinds("attach_loop")[0].detail
    assert (loop["bytes"], loop["sector_size"], loop["direct_io"]) == (GIB, 4096, True)
    assert host.kinds("mkfs")[1].detail == {"fstype": "xfs", "options": "-m crc=1"}
    assert host.mounted["/w/storage/mnt-1"] == {"device": "/dev/loop0", "fstype": "ext4",
                                                "options": "noatime", "nocow": False}  # fmt: skip
    mark = len(host.effects)
    StorageLayer().destroy(storage, run)
    assert _steps(host)[mark:] == [
        ("unmount", "/w/storage/mnt-1-wal"),
        ("detach_loop", "/w/private/images/disk-1-wal.img"),
        ("unmount", "/w/storage/mnt-1"),
        ("detach_loop", "/w/private/images/disk-1.img"),
    ]
    assert host.mounted == {}


def test_without_storage_the_clusters_live_in_the_work_areas_folder() -> None:
    host = RecordingHost()
    storage = StorageLayer().build(StorageSettings(False, None, None), {}, {}, _run(host))
    assert storage.home == Path("/w/clusters") and storage.handle is None
    assert _steps(host) == [("private_dir", "/w/clusters")]


def test_a_real_device_is_claimed_before_every_mkfs_and_known_again_by_its_uuid() -> None:
    """The second storage on one allowed device (a rebuild) claims it again, naming the
    filesystem pgsweep made there as its own; a device that is busy by then fails the
    trial with the reason, and what was made before it is taken down."""
    host = RecordingHost()
    run = _run(host, Grant((Path("/dev/sdb"), Path("/dev/sdc"))))
    layer = StorageLayer()
    settings = StorageSettings(True, _fs("/dev/sdb"), None)
    first = layer.build(settings, {}, {}, run)
    claims = host.kinds("claim_device")
    assert [(c.what, c.detail["ours"]) for c in claims] == [("/dev/sdb", [])]
    assert host.effects.index(claims[0]) < host.effects.index(host.kinds("mkfs")[0])
    assert not host.kinds("attach_loop")  # a real device has no image
    layer.destroy(first, run)
    layer.build(settings, {}, {}, run)
    assert [c.detail["ours"] for c in host.kinds("claim_device")] == [[], ["uuid-1"]]

    host.busy["/dev/sdc"] = "sdc1 is mounted at /srv"
    with pytest.raises(TrialFailure, match="refusing to format /dev/sdc now: sdc1 is mounted"):
        layer.build(StorageSettings(True, _fs(), _fs("/dev/sdc")), {}, {}, run)
    last = _steps(host)[-2:]
    assert last == [("unmount", "/w/storage/mnt-3"), ("detach_loop",
                                                      "/w/private/images/disk-3.img")]  # fmt: skip
    with pytest.raises(TrialFailure, match="did not allow"):
        layer.build(StorageSettings(True, _fs("/dev/sdd"), None), {}, {}, run)


class _Aliases(RecordingHost):
    """A machine where /dev/disk/by-id/wal names the device /dev/sdc (a link there)."""

    def claim_device(self, device: Path, grant: Grant, ours: Any, scratch: Path) -> Path:
        real = Path("/dev/sdc") if device == Path("/dev/disk/by-id/wal") else device
        return super().claim_device(real, Grant((real,)), ours, scratch)


def test_a_device_named_two_ways_is_known_again_by_its_filesystem() -> None:
    """The filesystems pgsweep made are kept by the device the host resolved, so a rebuild
    reaching the device by another name still knows its own filesystem there (and --wipe
    never takes it for a stranger's first format)."""
    host = _Aliases()
    run = _run(host, Grant((Path("/dev/sdc"), Path("/dev/disk/by-id/wal"))))
    layer = StorageLayer()
    layer.destroy(layer.build(StorageSettings(True, _fs("/dev/sdc"), None), {}, {}, run), run)
    layer.build(StorageSettings(True, _fs("/dev/disk/by-id/wal"), None), {}, {}, run)
    assert [c.detail["ours"] for c in host.kinds("claim_device")] == [[], ["uuid-1"]]


class _Interrupted(RecordingHost):
    def make_filesystem(self, fstype: str, device: Path, options: str,
                        scratch: Path) -> str | None:  # fmt: skip
        raise KeyboardInterrupt


def test_ctrl_c_mid_build_takes_down_what_was_made() -> None:
    """Not only a refused step: any interruption between attach and mount (Ctrl-C, a lost
    host) detaches the loop device it attached before it goes on up."""
    host = _Interrupted()
    with pytest.raises(KeyboardInterrupt):
        StorageLayer().build(StorageSettings(True, _fs(), None), {}, {}, _run(host))
    assert _steps(host)[-1] == ("detach_loop", "/w/private/images/disk-1.img")
    assert host.journals == {}


def test_btrfs_without_copy_on_write_is_asked_of_the_mount() -> None:
    host = RecordingHost()
    run = _run(host)
    StorageLayer().build(StorageSettings(True, _fs(filesystem="btrfs", nocow=True), None), {},
                         {}, run)  # fmt: skip
    StorageLayer().build(StorageSettings(True, _fs(filesystem="xfs", nocow=True), None), {},
                         {}, run)  # fmt: skip
    assert [m.detail["nocow"] for m in host.kinds("mount")] == [True, False]
    assert host.has_nocow(Path("/w/storage/mnt-1/c1/data"))
    assert not host.has_nocow(Path("/w/storage/mnt-2/c1/data"))


def _zfs_trial(host: RecordingHost, run: RunContext, storage: Any,
               drop: bool = False) -> TrialContext:  # fmt: skip
    cluster = Cluster(run.binaries, RunAs("pgsweep"), storage.home / "c1", Path("/s/c1"),
                      host=host)  # fmt: skip
    os_settings = type("Os", (), {"drop_caches": drop})()
    return TrialContext("r1-c01", {"os": os_settings}, {"storage": storage}, run,
                        Server("c1", cluster, run.binaries))  # fmt: skip


def test_zfs_pool_and_daemon_are_journaled_first_and_live_properties_change_in_place() -> None:
    host = RecordingHost(users={None: (0, 0), "pgsweep": (999, 999)})
    run = _run(host)
    layer = StorageLayer()

    def zfs(**props: str) -> StorageSettings:
        return StorageSettings(True, _fs(filesystem="zfs"), None, props, 12, 512)

    storage = layer.build(zfs(recordsize="8K", primarycache="all"), {}, {}, run)
    pool = host.kinds("zfs_create")[0]
    entries = [json.loads(e.detail["entry"]) for e in host.kinds("journal")]
    assert entries[1:] == [{"zfs_daemon": "/w/private/storage-cmd/zfs-fuse.pid"},
                           {"zpool": pool.what}]  # fmt: skip
    assert host.effects.index(host.kinds("journal")[-1]) < host.effects.index(pool)
    assert not host.kinds("mkfs", "mount")  # the pool mounts itself
    assert pool.detail["values"] == {"zfs.recordsize": "8K", "zfs.primarycache": "all",
                                     "zfs.ashift": 12, "zfs.arc_max": "512MiB"}  # fmt: skip
    assert storage.pool_devices == ["loop0"]

    trial = _zfs_trial(host, run, storage)
    layer.prepare(zfs(recordsize="8K", primarycache="all"), trial)  # as made: only recorded
    assert trial.events == ["zfs-set"] and host.pools[pool.what]["primarycache"] == "all"
    mark = len(host.effects)
    trial = _zfs_trial(host, run, storage)
    layer.prepare(zfs(recordsize="8K", primarycache="all"), trial)
    assert trial.events == [] and host.effects[mark:] == []  # nothing changed: nothing done
    trial = _zfs_trial(host, run, storage)
    layer.prepare(zfs(recordsize="8K", primarycache="metadata"), trial)
    change = host.kinds("zfs_change")[-1]
    assert change.detail == {"props": {"primarycache": "metadata"}, "drop_arc": True}
    assert trial.events == ["arc-drop", "zfs-set"]  # a cache property: the ARC is emptied
    trial = _zfs_trial(host, run, storage, drop=True)
    layer.prepare(zfs(recordsize="8K", primarycache="metadata"), trial)
    assert host.kinds("zfs_change")[-1].detail == {"props": {}, "drop_arc": True}
    assert trial.events == ["arc-drop"]  # os.drop_caches: the ARC is the cache to drop

    mark = len(host.effects)
    layer.destroy(storage, run)
    assert _steps(host)[mark:] == [
        ("destroy_pool", pool.what),
        ("stop_zfs_daemon", "/w/private/storage-cmd/zfs-fuse.pid"),
        ("detach_loop", "/w/private/images/disk-1.img"),
    ]


def test_two_runs_of_one_layer_keep_their_own_storages_and_devices() -> None:
    """Layers hold no run state: the numbers and the filesystems a run made on its device
    are its own, so another run's claim of the same device names none of them."""
    layer = StorageLayer()
    settings = StorageSettings(True, _fs("/dev/sdb"), None)
    hosts = [RecordingHost("a"), RecordingHost("b")]
    runs = [_run(h, Grant((Path("/dev/sdb"),))) for h in hosts]
    first = layer.build(settings, {}, {}, runs[0])
    layer.destroy(first, runs[0])
    layer.build(settings, {}, {}, runs[0])
    layer.build(settings, {}, {}, runs[1])
    assert [c.detail["ours"] for c in hosts[0].kinds("claim_device")] == [[], ["uuid-1"]]
    assert [c.detail["ours"] for c in hosts[1].kinds("claim_device")] == [[]]
    assert hosts[1].kinds("mount")[0].what == "/w/storage/mnt-1"


def _agent_with_area(tmp_path: Path) -> tuple[Agent, Path]:
    """An agent holding one work area (marked as pgsweep marks its own)."""
    from types import SimpleNamespace

    from pgsweep.host.workarea import MARKER

    area = tmp_path / ".pgsweep-work-test"
    area.mkdir()
    (area / MARKER).write_text("")
    agent = Agent(io.BytesIO(), io.BytesIO())
    agent.areas.append(SimpleNamespace(workdir=area))  # type: ignore[arg-type]
    return agent, area


@pytest.mark.parametrize("method,args,refusal", [
    ("make_filesystem", {"fstype": "ext4", "device": "/dev/sda", "options": ""},
     "/dev/sda was not attached or claimed for this run"),
    ("mount", {"fstype": "ext4", "device": "/dev/sda", "point": "AREA/storage/mnt-1",
               "options": "", "nocow": False}, "/dev/sda was not attached or claimed"),
    ("zfs_create", {"pool": "rpool", "device": "/dev/sda", "point": "AREA/storage/mnt-1",
                    "values": {}}, "/dev/sda was not attached or claimed"),
    ("zfs_change", {"pool": "pgsweep1n1", "props": {}, "drop_arc": True},
     "pgsweep1n1 was not created for this run"),
    ("mount", {"fstype": "ext4", "device": "/dev/sda", "point": "AREA/..", "options": "",
               "nocow": False}, "AREA/.. is not in a work area"),
    # a device it claimed, but a pool name pgsweep never gives (another's pool)
    ("zfs_create", {"pool": "rpool", "device": "/dev/loop7", "point": "AREA/storage/mnt-1",
                    "values": {}}, "rpool is not a pool name pgsweep gives"),
])  # fmt: skip
def test_the_agent_formats_and_mounts_only_what_it_attached_or_claimed(
    tmp_path: Path, method: str, args: dict[str, Any], refusal: str
) -> None:
    """Inside its own work area too, an agent runs mkfs, mount and zfs only on a device it
    attached or claimed for the run, and on pools it created; `..` never leads out."""
    agent, area = _agent_with_area(tmp_path)
    agent.devices.add("/dev/loop7")  # as if it had attached it
    scratch = str(area / "private" / "storage-cmd")
    args = {k: v.replace("AREA", str(area)) if isinstance(v, str) else v
            for k, v in args.items()} | {"scratch": scratch}  # fmt: skip
    reply = agent._call({"method": method, "args": args})
    assert reply["error"]["type"] == "OSError"
    assert refusal.replace("AREA", str(area)) in reply["error"]["message"]


@pytest.mark.parametrize("method,args", [
    ("attach_loop", {"image": "/etc/passwd", "size": 1, "sector_size": None,
                     "direct_io": False, "scratch": "/tmp"}),
    ("mount", {"fstype": "ext4", "device": "/dev/loop0", "point": "/var/lib", "options": "",
               "scratch": "/tmp", "nocow": False}),
    ("zfs_create", {"pool": "pgsweep1n1", "device": "/dev/loop0", "point": "/srv",
                    "values": {}, "scratch": "/tmp"}),
])  # fmt: skip
def test_the_agent_makes_images_and_mounts_only_in_a_work_area_it_made(
    method: str, args: dict[str, Any]
) -> None:
    """A remote host's agent holds the line a local run holds: an image, mount point or
    scratch folder outside a work area it made for this run is refused before anything
    runs (the controller is trusted with the device, never with a path anywhere)."""
    agent = Agent(io.BytesIO(), io.BytesIO())
    reply = agent._call({"method": method, "args": args})
    assert reply["error"]["type"] == "OSError"
    assert "is not in a work area of this run on this host" in reply["error"]["message"]
