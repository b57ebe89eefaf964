"""The devices and environment a trial records, read through a host (issue 25: the
environment's reads go through the Host): a scripted machine whose cluster sits on an
ext4 loop device over an image on vda1, a partition of vda, with its WAL on a
device-mapper volume over vdb. Nothing here reads this machine. The real reads are in
tests/integration/test_storage.py and test_counters.py."""

from __future__ import annotations

from pathlib import Path

from pgsweep.collect import devices, environment
from pgsweep.host.proc import RunAs
from pgsweep.host.recording import RecordingHost, Reply, argv_starts
from pgsweep.postgres.binaries import Binaries
from pgsweep.postgres.cluster import Cluster

MOUNTINFO = "\n".join([
    "22 1 254:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw,discard",
    "40 22 7:3 / /w/storage/mnt-1 rw,noatime shared:5 - ext4 /dev/loop3 rw,noinit_itable",
    "41 22 253:0 / /w/storage/mnt-1-wal rw,relatime shared:6 - xfs /dev/mapper/vg-wal rw",
    "42 22 0:45 / /w/storage/mnt-2 rw,relatime shared:7 - btrfs /dev/loop4 rw,ssd",
]) + "\n"  # fmt: skip
SYS = "/sys/class/block"


def _machine() -> RecordingHost:
    files = {
        "/proc/self/mountinfo": MOUNTINFO,
        "/sys/dev/block/7:3/uevent": "MAJOR=7\nMINOR=3\nDEVNAME=loop3\nDEVTYPE=disk\n",
        "/sys/dev/block/254:1/uevent": "MAJOR=254\nMINOR=1\nDEVNAME=vda1\nDEVTYPE=partition\n",
        "/sys/dev/block/253:0/uevent": "MAJOR=253\nMINOR=0\nDEVNAME=dm-0\nDEVTYPE=disk\n",
        f"{SYS}/loop3/loop/backing_file": "/w/private/images/disk-1.img\n",
        f"{SYS}/loop3/queue/rotational": "0\n",
        f"{SYS}/loop3/queue/scheduler": "[none] mq-deadline\n",
        f"{SYS}/loop3/queue/logical_block_size": "512\n",
        f"{SYS}/loop3/queue/physical_block_size": "512\n",
        f"{SYS}/vda1/partition": "1\n",
        f"{SYS}/vda1/../uevent": "MAJOR=254\nMINOR=0\nDEVNAME=vda\nDEVTYPE=disk\n",
        f"{SYS}/dm-0/slaves/vdb": "",
        f"{SYS}/dm-0/queue/scheduler": "[none]\n",
        "/w/private/images/disk-1.img": "",
    }
    host = RecordingHost("db", files=files, users={None: (0, 0), "pgsweep": (999, 999)},
                         commands=[(argv_starts("pgbench"), Reply(0, "pgbench (PostgreSQL) "
                                                                 "15.18\n"))])  # fmt: skip
    host.dirs |= {f"{SYS}/{d}" for d in ("loop3", "loop4", "vda", "vda1", "vdb", "dm-0")}
    host.dirs |= {f"{SYS}/dm-0/slaves", f"{SYS}/loop3/queue", f"{SYS}/dm-0/queue"}
    return host


def test_a_clusters_devices_are_its_mounts_and_everything_under_them() -> None:
    host = _machine()
    bins = Binaries(Path("/usr/lib/postgresql/15/bin"), "15.18", {})
    cluster = Cluster(bins, RunAs("pgsweep"), Path("/w/storage/mnt-1/c1"), Path("/s/c1"),
                      Path("/w/storage/mnt-1-wal/c1/pg_wal"), host=host)  # fmt: skip
    found, primary = devices.for_cluster(cluster)
    # the loop device, the partition its image is on and that partition's disk; then the
    # WAL's device-mapper volume and the disk it maps
    assert found == ["loop3", "vda1", "vda", "dm-0", "vdb"]
    assert primary == ["loop3", "dm-0"]  # what the filesystems sit on
    # btrfs reports an anonymous device number (0:45): its source names the device
    assert devices.devices_for(host, Path("/w/storage/mnt-2/c2")) == ["loop4"]
    env = environment.storage(cluster, ["loop3", "dm-0"])
    assert env["pgdata.fstype"] == "ext4" and env["pgdata.mount"] == "/w/storage/mnt-1"
    assert env["pgdata.mount_options"] == "rw,noatime,noinit_itable"
    assert env["pg_wal.fstype"] == "xfs" and env["pg_wal.mount"] == "/w/storage/mnt-1-wal"
    assert env["device.loop3.scheduler"] == "none" and env["device.loop3.rotational"] == "0"
    assert env["device.dm-0.model"] == "(unknown)"  # no such file there: not an error
    assert host.effects == []  # reads only


def test_the_machine_is_read_through_its_host() -> None:
    host = _machine()
    host.files |= {
        "/proc/meminfo": "MemTotal:       24684084 kB\nMemFree: 1 kB\n",
        "/proc/cpuinfo": "processor\t: 0\nmodel name\t: AMD EPYC 7B13\n",
        "/proc/sys/kernel/osrelease": "6.1.0-26-amd64\n",
        "/proc/sys/kernel/version": "#1 SMP Debian 6.1.112-1\n",
        "/sys/devices/system/cpu/online": "0-3\n",
        "/sys/kernel/mm/transparent_hugepage/enabled": "always [madvise] never\n",
        "/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages": "64\n",
        "/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages": "60\n",
        "/usr/lib/postgresql/15/bin/pgbench": "",
    }
    host.dirs.add("/sys/kernel/mm/hugepages")
    bins = Binaries(Path("/usr/lib/postgresql/15/bin"), "15.18", {})
    env = environment.host(host, bins, Path("/w/private"))
    assert env["kernel"] == "6.1.0-26-amd64" and env["cpu_model"] == "AMD EPYC 7B13"
    assert env["cpu_count"] == "4" and env["memory_total"] == "24684084 kB"
    assert env["thp_enabled"] == "madvise" and env["thp_defrag"] == ""
    assert env["hugepages-2048kB.nr"] == "64" and env["hugepages-2048kB.free"] == "60"
    assert env["pgbench_version"] == "pgbench (PostgreSQL) 15.18"
    assert "pg_config_configure" not in env  # no pg_config there
    assert [list(e.detail["argv"]) for e in host.kinds("run")] == [
        ["/usr/lib/postgresql/15/bin/pgbench", "--version"]]
