"""Bad experiment files: exit code 2, a message naming the file, key and line, and nothing
started or created. Server settings are checked by the real server binary."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import pgsweep, postmasters, requires_pg, write_experiment

HEAD = """
[experiment]
name = "bad"
seed = 1
"""

# (id, file body after HEAD, fragments the message must contain, line of the offending key)
CASES = [
    ("unknown-table", "[servr]\nwork_mem = '4MB'\n", ["servr", "unknown table"], 4),
    ("unknown-key", "[workload]\nclient = 2\n", ["workload.client", "unknown key", "clients"], 5),
    (
        "unknown-setting",
        "[factors]\nserver.shared_bufers = ['1GB']\n",
        ["factors.server.shared_bufers", "no setting named", "did you mean shared_buffers"],
        5,
    ),
    (
        "bad-unit",
        "[factors]\nserver.shared_buffers = ['128MB', '12XB']\n",
        ["factors.server.shared_buffers", "12XB", "Valid units"],
        5,
    ),
    (
        "out-of-range",
        "[server]\nmax_connections = 0\n",
        ["server.max_connections", "outside the valid range", "between 1 and"],
        5,
    ),
    (
        "bad-enum",
        "[server]\nwal_level = 'fast'\n",
        ["server.wal_level", "Available values: minimal, replica, logical"],
        5,
    ),
    (
        "read-only-setting",
        "[factors]\nserver.block_size = [4096]\n",
        ["factors.server.block_size", "cannot be changed"],
        5,
    ),
    ("managed-setting", "[server]\nport = 5433\n", ["server.port", "manages port"], 5),
    (
        "wrong-type",
        "[workload]\nclients = 'four'\n",
        ["workload.clients", "valid integer", "'four'"],
        5,
    ),
    (
        "empty-levels",
        "[factors]\nworkload.clients = []\n",
        ["factors.workload.clients", "at least one level"],
        5,
    ),
    (
        "levels-not-a-list",
        "[factors]\nserver.work_mem = '4MB'\n",
        ["factors.server.work_mem", "must be a list"],
        5,
    ),
    (
        "duplicate-level",
        "[factors]\nworkload.clients = [1, 1]\n",
        ["factors.workload.clients", "listed twice"],
        5,
    ),
    (
        "key-no-layer-owns",
        "[factors]\ncluster.scal = [1, 2]\n",
        ["factors.cluster.scal", "no layer owns cluster.scal", "scale"],
        5,
    ),
    (
        "unknown-layer",
        "[factors]\nhardware.cpus = [1, 2]\n",
        ["factors.hardware", "no layer named 'hardware'"],
        5,
    ),
    (
        "missing-script",
        "[workload]\nscript = 'nope.sql'\n",
        ["workload.script", "nope.sql", "does not exist"],
        5,
    ),
    (
        "bad-duration",
        "[factors]\nworkload.duration = ['10s', 'ten seconds']\n",
        ["factors.workload.duration", "a duration such as"],
        5,
    ),
    ("zero-rounds", "[repeat]\nrounds = 0\n", ["repeat.rounds", "greater than or equal to 1"], 5),
    ("bad-rebuild", "[repeat]\nrebuild = 'always'\n", ["repeat.rebuild", "always"], 5),
    ("wal-segsize", "[cluster]\nwal_segsize = 3\n", ["cluster.wal_segsize", "power of two"], 5),
    ("bad-protocol", "[workload]\nprotocol = 'binary'\n", ["workload.protocol", "binary"], 5),
    ("negative-seed", "", ["experiment.seed", "greater than or equal to 0"], 3),
    ("toml-syntax", "[server]\nwork_mem = 4MB\n", ["not valid TOML", "line 5"], None),
    ("missing-name", "", ["[experiment] needs the key 'name'"], 1),
    ("bad-bin", "[postgres]\nbin = '/nonexistent'\n", ["postgres.bin", "does not hold"], 5),
    (
        "baseline-not-a-factor",
        "[factors]\nserver.work_mem = ['4MB', '8MB']\n[report]\n"
        "baseline = { 'server.wal_level' = 'replica' }\n",
        ["report.baseline", "not a factor", "server.work_mem"],
        7,
    ),
    (
        "baseline-not-a-level",
        "[factors]\nserver.work_mem = ['4MB', '8MB']\n[report]\n"
        "baseline = { 'server.work_mem' = '16MB' }\n",
        ["report.baseline", "not a level", "4MB, 8MB"],
        7,
    ),
    (
        "margin-not-a-percentage",
        "[report]\nmargin = '2 percent'\n",
        ["report.margin", "2 percent"],
        5,
    ),
    (
        "latency-log-out-of-range",
        "[workload]\nlatency_log = 1.5\n",
        ["workload.latency_log", "sampling rate"],
        5,
    ),
    (
        "thp-level-not-offered",
        "[factors]\nos.thp = ['never', 'sometimes']\n",
        ["factors.os.thp", "offers no 'sometimes'", "expected: one of"],
        5,
    ),
    (
        "sysctl-unknown",
        "[os.sysctl]\n'vm.no_such_knob' = 1\n",
        ['os.sysctl."vm.no_such_knob"', "no sysctl 'vm.no_such_knob'"],
        5,
    ),
    (
        "memory-limit-too-small",
        "[os]\nmemory_limit = '1MB'\n",
        ["os.memory_limit", "at least 64MiB"],
        5,
    ),
    (
        "memory-limit-below-shared-memory",
        "[os]\nmemory_limit = '256MiB'\n[factors]\nserver.shared_buffers = ['128MB', '512MB']\n",
        ["os.memory_limit", "cannot hold the server's shared memory", "shared_buffers=512MB"],
        5,
    ),
    (
        "huge-pages-owns-server-setting",
        "[os]\nhuge_pages = '2MB'\n[server]\nhuge_pages = 'try'\n",
        ["server.huge_pages", "os.huge_pages sets the server's huge_pages"],
        7,
    ),
    (
        "storage-unknown-filesystem",
        "[storage]\ndevice = 'loop:1GiB'\n[factors]\nstorage.filesystem = ['ext4', 'ntfs']\n",
        ["factors.storage.filesystem", "'ntfs'"],
        7,
    ),
    (
        "storage-device-form",
        "[storage]\ndevice = 'sdb'\n",
        ["storage.device", "a device path under /dev"],
        5,
    ),
    (
        "zfs-fuse-has-no-sync",
        "[storage]\ndevice = 'loop:1GiB'\nfilesystem = 'zfs'\n[factors]\n"
        "storage.zfs.sync = ['standard', 'disabled']\n",
        ["factors.storage.zfs.sync", "zfs-fuse 0.7 has no sync property"],
        8,
    ),
    (
        "zfs-fuse-has-no-lz4",
        "[storage]\ndevice = 'loop:1GiB'\nfilesystem = 'zfs'\n[storage.zfs]\ncompression = 'lz4'\n",
        ["storage.zfs.compression", "(no lz4)"],
        8,
    ),
    (
        "nocow-on-ext4",
        "[storage]\ndevice = 'loop:1GiB'\nbtrfs_nocow = true\n",
        ["storage.btrfs_nocow", "applies to btrfs, not ext4"],
        6,
    ),
    (
        "size-and-scale",
        "[cluster]\nscale = 10\nsize = '50% of RAM'\n",
        ["cluster.size", "both set the data size"],
        6,
    ),
    (
        "size-form",
        "[cluster]\nsize = 'half of RAM'\n",
        ["cluster.size", "50% of RAM"],
        5,
    ),
    (
        "huge-pages-unknown-size",
        "[factors]\nos.huge_pages = ['off', '4MB']\n",
        ["factors.os.huge_pages", "'4MB'"],
        5,
    ),
]


@requires_pg
@pytest.mark.parametrize(("case", "body", "fragments", "line"), CASES, ids=[c[0] for c in CASES])
def test_bad_file_exits_2_naming_the_key(
    tmp_path: Path, case: str, body: str, fragments: list[str], line: int | None
) -> None:
    head = HEAD
    if case == "negative-seed":
        head = head.replace("seed = 1", "seed = -1")
    if case == "missing-name":
        head = "[experiment]\nseed = 1\n"
    path = write_experiment(tmp_path, head + body)
    before = set(postmasters())
    res = pgsweep("plan", str(path))
    assert res.returncode == 2, res.stderr + res.stdout
    assert res.stderr.startswith("error: "), res.stderr
    assert str(path) in res.stderr
    for fragment in fragments:
        assert fragment in res.stderr, f"{fragment!r} not in {res.stderr!r}"
    if line is not None:
        assert f"{path}:{line}:" in res.stderr, res.stderr
    assert "fix:" in res.stderr or "expected:" in res.stderr or case == "toml-syntax"
    assert set(postmasters()) == before


@requires_pg
def test_run_with_bad_file_creates_nothing(tmp_path: Path) -> None:
    path = write_experiment(tmp_path, HEAD + "[factors]\nserver.wal_level = ['replica', 'fast']\n")
    results = tmp_path / "results"
    res = pgsweep("run", str(path), "--results", str(results))
    assert res.returncode == 2
    assert "factors.server.wal_level" in res.stderr
    assert not results.exists()


def test_missing_file(tmp_path: Path) -> None:
    res = pgsweep("plan", str(tmp_path / "none.toml"))
    assert res.returncode == 2 and "cannot read the experiment file" in res.stderr
