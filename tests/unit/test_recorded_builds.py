"""The builds before the first trial (engine/buildprep.py) on a recording host: each build
the configurations need is asked of the host once, in first-use order; one the cache
holds is not compiled, one it lacks is, and one that fails fails only itself (why, and
its log's tail, kept for its configurations' trials) while the others are inspected and
checked. `plan` reads the cache and makes nothing. The builds' binaries are the installed
PostgreSQL's (each scripted build's prefix/bin links to them), so their inspection runs
for real; the real compile, and a setting a build lacks, are tests/integration/test_build.py's."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conftest import requires_pg, write_experiment
from pgsweep import spec
from pgsweep.engine import buildprep
from pgsweep.errors import PgsweepError
from pgsweep.host.builds import Build, BuildError, BuildSpec
from pgsweep.host.local import LocalHost
from pgsweep.host.recording import RecordingHost

pytestmark = requires_pg
INSTALLED = Path("/usr/lib/postgresql/15/bin")
BODY = """
[experiment]
name = "b"
seed = 3
[cluster]
scale = 1
[workload]
clients = 1
duration = "1s"
[build]
source = "apt:postgresql-15"
optimize = "0"
[factors]
build.wal_blocksize = [4, 8, 16]
workload.clients = [1, 2]
"""


def _build(tmp: Path, spec_: BuildSpec, key: str, cached: bool) -> Build:
    home = tmp / key
    (home / "prefix").mkdir(parents=True)
    (home / "prefix" / "bin").symlink_to(INSTALLED)
    return Build(key, home, spec_, "postgresql-15 15.18", "postgres (PostgreSQL) 15.18",
                 "'--prefix=...'", 42.0, cached)  # fmt: skip


def _setup(tmp: Path) -> tuple[spec.Experiment, list[BuildSpec], RecordingHost, Path]:
    exp = spec.load(write_experiment(tmp, BODY))
    four, eight, sixteen = buildprep.needed(exp)
    log = tmp / "k16.failed.log"
    log.write_text("".join(f"line {n}\n" for n in range(30)) + "configure: error: no\n")
    host = RecordingHost(users={None: (0, 0), "pgsweep": (os.getuid(), os.getgid())},
                         builds={four: _build(tmp, four, "k4", cached=True),
                                 eight: _build(tmp, eight, "k8", cached=False),
                                 sixteen: BuildError("configure failed for 16", log)})  # fmt: skip
    return exp, [four, eight, sixteen], host, log


def test_each_build_is_asked_once_in_first_use_order_and_a_failure_fails_only_itself(
    open_dir: Path,
) -> None:
    tmp_path = open_dir  # the server user runs the builds' binaries
    exp, (four, eight, sixteen), host, log = _setup(tmp_path)
    said: list[str] = []
    prepared = buildprep.prepare(exp, said.append, host)
    # six configurations, three builds: each made once, in the order the plan first uses them
    assert [(e.what, e.detail.get("cached")) for e in host.kinds("build")] == [
        (four.describe(), True), (eight.describe(), False), (sixteen.describe(), None)]
    assert f"build 1/3: {four.describe()}: cached (k4), nothing to compile" in said
    assert f"build 2/3: {eight.describe()}: compiling into {tmp_path / 'k8'}" in said
    assert "build 2/3: built in 42 s (postgres (PostgreSQL) 15.18)" in said
    failed = [line for line in said if line.startswith("build 3/3: FAILED")]
    assert failed == [f"build 3/3: FAILED: configure failed for 16; log: {log} "
                      "(its configurations fail, the others run)"]  # fmt: skip
    k4 = str(tmp_path / "k4")  # the folder's random name may hold "k4" too
    assert not any("compiling" in line for line in said if k4 in line or "(k4)" in line)
    # the failed build keeps why and its log's last 20 lines; it is not inspected
    bad = prepared[sixteen]
    assert bad.build is None and bad.binaries is None and bad.canonical == {}
    assert bad.failure == "configure failed for 16"
    assert bad.log_tail.splitlines() == [*(f"line {n}" for n in range(11, 30)),
                                         "configure: error: no"]  # fmt: skip
    # the two made ones: inspected, each with its own binaries (prefix/bin) and catalog
    for s, key in ((four, "k4"), (eight, "k8")):
        p = prepared[s]
        assert p.build is not None and p.build.key == key and not p.failure
        assert p.binaries is not None and p.binaries.bindir == tmp_path / key / "prefix" / "bin"
        assert p.binaries.version == "15.18" and "work_mem" in p.binaries.settings


def test_plan_reads_the_cache_and_makes_nothing(open_dir: Path) -> None:
    tmp_path = open_dir
    exp, (four, eight, sixteen), host, _ = _setup(tmp_path)
    planned = buildprep.planned(exp, host)
    assert [(p.spec, p.key, p.cached) for p in planned] == [
        (four, "k4", True), (eight, "k8", False), (sixteen, None, False)]
    assert planned[0].seconds == 42.0 and planned[1].seconds == buildprep.BUILD_SECONDS_GUESS
    assert host.effects == []
    # the dry run: the cached build with its own binaries, the others where the cache will
    # hold them (an unknown key stands as DRYRUN), with [server]'s catalog
    shown = buildprep.stand_ins(exp, "DRYRUN", host)
    assert shown[four].binaries is not None
    assert shown[four].binaries.bindir == tmp_path / "k4" / "prefix" / "bin"
    assert shown[eight].build is not None and shown[eight].build.home == host.cache / "k8"
    assert shown[sixteen].build is not None and shown[sixteen].build.key == "DRYRUN"
    assert host.effects == []


def test_a_cache_the_server_user_cannot_reach_is_refused_before_anything_is_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real LocalHost's cache check: a 0700 folder above the cache stops the server
    user from running the binaries in it, so `run` (and `plan`) refuse, naming it."""
    closed = tmp_path / "closed"
    closed.mkdir(mode=0o700)
    monkeypatch.setenv("PGSWEEP_CACHE_DIR", str(closed / "cache"))
    exp = spec.load(write_experiment(tmp_path, BODY))
    if exp.user is None or os.geteuid() != 0:
        pytest.skip("the server runs as another user only when pgsweep runs as root")
    host = LocalHost()
    with pytest.raises(PgsweepError, match=f"{closed} is drwx------"):
        buildprep.prepare(exp, lambda line: None, host)
    assert host._build_locks == []  # nothing was built or locked
    assert list((closed / "cache").iterdir()) == []  # nothing fetched into the cache


def test_a_cached_build_is_held_by_a_shared_lock_and_marked_used(
    open_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real LocalHost on a cache entry made here (a tarball source, so nothing is
    fetched): found, not compiled; marked as used now; and held by a shared lock for as
    long as the host lives, so `builds --prune` leaves it and no one can take it alone."""
    import fcntl
    import json
    import tarfile

    from pgsweep.host import builds

    if os.geteuid() != 0:
        pytest.skip("the cache checks are root's")
    tarball = open_dir / "pg.tar.gz"
    with tarfile.open(tarball, "w:gz") as tar:
        info = tarfile.TarInfo("pg/configure")
        tar.addfile(info)
    monkeypatch.setenv("PGSWEEP_CACHE_DIR", str(open_dir / "cache"))
    spec_ = BuildSpec(str(tarball), None, ("--with-wal-blocksize=4",), "-O0")
    host = LocalHost()
    root = host.build_cache(0, create=True)
    assert root is not None
    key, found = host.find_build(root, spec_)
    assert key is not None and found is None  # pinned by its bytes, not built
    home = root / key
    home.mkdir()
    meta = {"key": key, "spec": {"source": spec_.source, "ref": None,
                                 "configure": list(spec_.configure), "cflags": spec_.cflags},
            "source": "pg.tar.gz", "version": "postgres (PostgreSQL) 15.18",
            "configure_line": "", "seconds": 7.0}  # fmt: skip
    (home / "meta.json").write_text(json.dumps(meta))
    os.utime(home, (1_000_000, 1_000_000))
    said: list[str] = []
    try:
        build, cached = host.make_build(root, spec_, said.append)
        assert cached and build.key == key and build.home == home and said == []
        assert home.stat().st_mtime > 1_000_000  # used now (`builds --prune --unused-days`)
        assert len(host._build_locks) == 1
        fd = os.open(root / f"{key}.lock", os.O_RDWR)
        try:
            with pytest.raises(BlockingIOError):
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(fd)
        assert builds.prune(root, [key], False, None) == []  # in use: left alone
        assert home.is_dir()
    finally:
        for fd in host._build_locks:
            os.close(fd)


def test_a_dry_run_without_builds_never_looks_at_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PGSWEEP_CACHE_DIR", "relative/cache")  # open_cache refuses this
    exp = spec.load(write_experiment(tmp_path, BODY[: BODY.index("[build]")]))
    assert buildprep.stand_ins(exp, "DRYRUN", LocalHost()) == {}
    assert buildprep.planned(exp, LocalHost()) == []


def test_a_build_being_made_is_never_left_unlocked_for_prune(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run's shared lock on a build is taken before anything and never changed: a run
    that compiles waits its turn on a lock of its own, so no instant exists (as a flock
    turned from exclusive to shared had: Linux lets go first) where `builds --prune` could
    take the entry alone and remove it."""
    import fcntl

    from pgsweep.host import builds

    root, key = tmp_path / "cache", "k1"
    root.mkdir()
    calls: list[tuple[int, int]] = []
    real_flock = fcntl.flock

    def flock(fd: int, op: int) -> None:
        calls.append((fd, op))
        real_flock(fd, op)

    monkeypatch.setattr(fcntl, "flock", flock)
    seen: list[list[str]] = []

    def make() -> Build:
        (root / f".building-{key}-abcd").mkdir()  # what a compile has under way
        seen.append(builds.prune(root, [], True, None))  # prune now: in use, left alone
        home = root / key
        home.mkdir()
        return Build(key, home, BuildSpec("/src.tar.gz", None, (), ""), "", "", "", 1.0, False)

    build, fd, cached = builds.acquire(root, key, make)
    try:
        assert not cached and build.key == key and seen == [[]]
        assert (root / f".building-{key}-abcd").is_dir()
        ops = [op for f, op in calls if f == fd]
        assert ops == [fcntl.LOCK_SH], ops  # taken once, shared, never turned
        assert builds.prune(root, [], True, None) == []  # still held after acquire returns
    finally:
        os.close(fd)
