"""The build layer with a real build: Debian's PostgreSQL 15 source compiled with a 4 kB WAL
block size (tests/data/suite-build.toml, compiled once for the suite by
tests/prebuild.py into the suite's cache), run beside the installed binaries; a configure
option that fails; settings one build lacks or rejects; the cache listed and pruned."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from conftest import open_base, pgsweep, requires_pg, trials, write_experiment
from pgsweep import spec
from pgsweep.collect import perf
from pgsweep.engine import buildprep
from pgsweep.host.local import LOCAL
from pgsweep.layers.oslayer import OsLayer
from pgsweep.postgres.binaries import ValueChecker

HERE = Path(__file__).resolve().parents[1]
SUITE_BUILD = (HERE / "data" / "suite-build.toml").read_text()
BUILD_TABLE = SUITE_BUILD[SUITE_BUILD.index("[build]") :]
INSTALLED_PGBENCH = "/usr/lib/postgresql/15/bin/pgbench"

FOLDERS: dict[str, Path] = {}  # results of earlier tests here, for `compare`
pytestmark = [requires_pg, pytest.mark.skipif(os.geteuid() != 0, reason="builds as root")]


@pytest.fixture(scope="module")
def cache() -> Iterator[Path]:
    """The suite's build cache with the suite's build in it (made here when the prebuild
    beside the suite has not made it: the cache's lock makes this wait for it)."""
    import prebuild

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PGSWEEP_CACHE_DIR", str(prebuild.SUITE_CACHE))
        assert prebuild.main() == 0
        yield prebuild.SUITE_CACHE
    if not os.environ.get("PGSWEEP_KEEP_SUITE_BUILD"):
        shutil.rmtree(prebuild.SUITE_CACHE.parent, ignore_errors=True)


def _finished(cache: Path) -> dict[str, float]:
    """Finished builds in the cache -> their meta.json's mtime (nothing compiled: none new,
    none rewritten)."""
    return {p.parent.name: p.stat().st_mtime_ns for p in cache.glob("*/meta.json")}


def _head(rounds: int = 1, extra: str = "") -> str:
    return (f'[experiment]\nname = "b"\nseed = 3\n{extra}[repeat]\nrounds = {rounds}\n'
            '[cluster]\nscale = 1\n[workload]\nclients = 1\nduration = "1s"\n'
            'warmup = "0s"\n')  # fmt: skip


def _experiment(tmp: Path, body: str, rounds: int = 1, extra: str = "") -> Path:
    return write_experiment(tmp, _head(rounds, extra) + BUILD_TABLE + body)


def _profiles(results: Path) -> dict[str, Counter[str]]:
    """Each configuration's CPU profile (its round-1 trial's folded stacks)."""
    db = sqlite3.connect(results / "results.db")
    rows = db.execute("SELECT t.config_id, a.gz FROM trial t JOIN artifact a ON "
                      "a.trial_id = t.id AND a.name = 'profile.folded'").fetchall()  # fmt: skip
    db.close()
    return {c: perf.parse(gzip.decompress(gz).decode()) for c, gz in rows}


def _share(stacks: Counter[str], has: Callable[[list[str]], bool]) -> float:
    """The share of the samples whose stack (frames, outermost first) `has` says yes to."""
    total = sum(stacks.values())
    return sum(n for s, n in stacks.items() if has(s.split(";"))) / total if total else 0.0


def test_a_cached_build_runs_beside_the_installed_binaries(
    cache: Path, tmp_path: Path, state_dir: Path
) -> None:
    before = _finished(cache)
    (key,) = before
    path = _experiment(tmp_path, '[factors]\nbuild.source = ["installed", "apt:postgresql-15"]\n',
                       extra='cpu_profile = "2s"\n')
    res = pgsweep("run", str(path), "--results", str(tmp_path / "res"))
    assert res.returncode == 0, res.stderr + res.stdout
    assert f"cached ({key}), nothing to compile" in res.stdout
    assert f"client: every configuration runs {INSTALLED_PGBENCH} (the installed" in res.stdout
    assert _finished(cache) == before  # a second run compiles nothing
    assert not list(cache.glob(".building-*"))
    rows = {t["config_id"]: t for t in trials(tmp_path / "res")}
    installed, built = (json.loads(rows[c]["effective_json"]) for c in ("c01", "c02"))
    assert built["build.wal_block_size"] == "4096"  # SHOW wal_block_size of the build
    assert installed["build.wal_block_size"] == "8192"
    assert (built["build.id"], installed["build.id"]) == (key, "installed")
    assert "'--with-wal-blocksize=4'" in built["build.configure"]
    assert built["build.version"] == installed["build.version"] == "15.18"
    assert built["cluster.data_directory"] != installed["cluster.data_directory"]
    # the client stays constant: the installed pgbench drives both configurations
    argv = {c: json.loads(rows[c]["pgbench_argv"])[0] for c in rows}
    assert set(argv.values()) == {INSTALLED_PGBENCH}
    md = pgsweep("report", str(tmp_path / "res"), "--format", "markdown")
    assert md.returncode == 0, md.stderr
    builds_section = md.stdout.split("## Builds")[1].split("##")[0]
    assert f"| c02 | {key} |" in builds_section and "| c01 | installed |" in builds_section
    phases = md.stdout.split("## Bytes written by phase")[1].split("##")[0]
    load_row = next(line for line in phases.splitlines() if "load: WAL bytes" in line)
    assert load_row.count("(one)") == 2  # one load per cluster, both measured
    FOLDERS["installed-and-build"] = tmp_path / "res"
    # docs/explain.md's promise: a build with frame pointers (the suite's, at -O0, keeps
    # them) names every frame from the postmaster's main down to a backend's PostgresMain,
    # where Debian's -O2 binary leaves [unknown] frames between named ones. Measured on the
    # backends' samples (those under PostgresMain) and on that part of their stacks: what
    # lies below depends on where the time went (into libc or the kernel, whose frames the
    # build does not compile, the more so on a loaded machine)
    prof = _profiles(tmp_path / "res")
    named = {}
    for c in ("c01", "c02"):
        backend = Counter({s: n for s, n in prof[c].items() if ";PostgresMain" in s})
        assert sum(backend.values()) >= 5, (c, prof[c].most_common(3))
        named[c] = _share(backend, lambda f: "[unknown]" not in f[:f.index("PostgresMain")])
    print(f"profiles: backends' samples named down to PostgresMain {named}")
    assert named["c02"] >= 0.9 and named["c01"] <= 0.2, named


def test_plan_commands_shows_a_builds_trials_with_its_binaries(
    cache: Path, tmp_path: Path, state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`plan --commands` walks the build's trials too: its cluster made and started with the
    cache entry's binaries, or, not built yet, with those it will have there; nothing
    compiled, nothing made."""
    (key,) = before = _finished(cache)
    path = _experiment(tmp_path, '[factors]\nbuild.source = ["installed", "apt:postgresql-15"]\n',
                       rounds=2)  # fmt: skip
    res = pgsweep("plan", str(path), "--results", str(tmp_path / "r"), "--commands")
    assert res.returncode == 0, res.stderr + res.stdout
    assert _finished(cache) == before and not (tmp_path / "r").exists()
    bindir = cache.resolve() / key / "prefix" / "bin"
    out = res.stdout
    assert f"run as pgsweep: {bindir}/initdb -D " in out, out
    assert f"run as pgsweep: {bindir}/pg_ctl -D " in out
    assert f": found in the cache ({cache.resolve() / key}): its trials above run its " in out
    assert "it runs a [build]" not in out
    # an empty cache the server user can pass through (as `run` requires, and so the dry run)
    empty = Path(tempfile.mkdtemp(prefix="pgsweep-test-cache-", dir=open_base(__name__)))
    empty.chmod(0o755)
    monkeypatch.setenv("PGSWEEP_CACHE_DIR", str(empty))
    try:
        res = pgsweep("plan", str(path), "--results", str(tmp_path / "r"), "--commands")
        assert res.returncode == 0, res.stderr + res.stdout
        assert list(empty.iterdir()) == []  # nothing fetched
    finally:
        shutil.rmtree(empty)
    assert f"run as pgsweep: {empty}/DRYRUN/prefix/bin/initdb -D " in res.stdout, res.stdout
    work = f"{empty}/.building-DRYRUN-DRYRUN"
    assert (f"unpacked into {work}/src and compiled there as root before the first trial: "
            f"./configure --prefix={empty}/DRYRUN/prefix --with-wal-blocksize=4 "
            "--without-readline --without-zlib; make -j") in res.stdout, res.stdout
    assert f"make -s install DESTDIR={work}/stage; then renamed to {empty}/DRYRUN" in res.stdout


def test_run_against_a_folder_of_the_installed_binaries_measures_the_build_beside_it(
    cache: Path, tmp_path: Path, state_dir: Path
) -> None:
    """A patch's workflow: an earlier folder ran the installed PostgreSQL, today's file names
    a build. `run --against` measures both in every round of one run; the change is a
    build, so run.against is a whole-plot factor: a new cluster per side in every round
    (rebuild = "auto"), the build itself compiled once."""
    (key,) = _finished(cache)
    before = tmp_path / "before"
    res = pgsweep("run", str(write_experiment(tmp_path, _head(), "before.toml")),
                  "--results", str(before))  # fmt: skip
    assert res.returncode == 0, res.stderr + res.stdout
    path = _experiment(tmp_path, "", rounds=2)
    res = pgsweep("run", str(path), "--results", str(tmp_path / "res"), "--against", str(before))
    assert res.returncode == 0, res.stderr + res.stdout
    assert f"cached ({key}), nothing to compile" in res.stdout
    ran: dict[tuple[int, str], tuple[str, str, str]] = {}
    for t in trials(tmp_path / "res"):
        e = json.loads(t["effective_json"])
        side = (e["build.id"], e["build.wal_block_size"], e["cluster.data_directory"])
        ran[(t["round"], t["config_id"])] = side
    assert sorted(ran) == [(1, "c01"), (1, "c02"), (2, "c01"), (2, "c02")]  # both, each round
    assert {r[:2] for (_, c), r in ran.items() if c == "c01"} == {("installed", "8192")}
    assert {r[:2] for (_, c), r in ran.items() if c == "c02"} == {(key, "4096")}
    assert len({r[2] for r in ran.values()}) == 4  # a cluster per side and round
    data = json.loads(pgsweep("report", str(tmp_path / "res"), "--format", "json").stdout)
    assert data["whole_plot_factors"] == ["run.against"]  # a build costs more than a cluster
    (change,) = [e for e in data["effects"] if e["metric"] == "tps" and e["kind"] == "main"]
    assert (change["error"], change["replicates"]) == ("whole-plot", 2), change
    assert {(b["config"], b["build"]) for b in data["builds"]} == {("c01", "installed"),
                                                                  ("c02", key)}  # fmt: skip


def test_huge_pages_are_sized_by_each_builds_own_server(cache: Path, tmp_path: Path) -> None:
    """os.huge_pages reserves what the trial's server needs, asked of the binaries that run
    it: the 4 kB WAL build needs other shared memory than the installed server (fewer
    pages at 128MB of buffers). Nothing here touches the kernel's pools: the sizes are
    computed before the first trial, and the trial looks them up by its binaries."""
    body = ('[server]\nshared_buffers = "128MB"\n[os]\nhuge_pages = "2MB"\n[factors]\n'
            'build.source = ["installed", "apt:postgresql-15"]\n')  # fmt: skip
    exp = spec.load(_experiment(tmp_path, body))
    (prepared,) = [p for p in buildprep.prepare(exp, lambda line: None, LOCAL).values() if p.build]
    assert prepared.binaries is not None
    server = {"shared_buffers": "128MB"}
    initdb = tuple(exp.configurations[("installed",)]["cluster"].initdb_options())
    oslayer = exp.layer("os")
    assert isinstance(oslayer, OsLayer)
    asked = {}
    for name, binaries in (("installed", exp.binaries), ("build", prepared.binaries)):
        with ValueChecker(binaries, exp.user) as checker:  # the server's own answer
            full = server | {"huge_pages": "on", "huge_page_size": "2MB"}
            own = int(checker.runtime("shared_memory_size_in_huge_pages", full, initdb))
        asked[name] = (oslayer.needed_pages("2MB", server, initdb, binaries), own)
    assert asked["installed"][0] == asked["installed"][1] > 0
    assert asked["build"][0] == asked["build"][1] > 0
    assert asked["build"][1] != asked["installed"][1], asked  # else this test shows nothing


def test_a_failing_configure_fails_its_configurations_and_the_rest_run(
    cache: Path, tmp_path: Path, state_dir: Path
) -> None:
    before = _finished(cache)
    levels = '["--without-readline --without-zlib", "--without-readline --with-ssl=bogus"]'
    # and with pgbench = "own", each build's own pgbench drives its trials
    path = _experiment(tmp_path, f'pgbench = "own"\n[factors]\nbuild.configure = {levels}\n')
    res = pgsweep("run", str(path), "--results", str(tmp_path / "res"))
    assert res.returncode == 3, res.stderr + res.stdout  # some trials failed
    assert "FAILED: configure failed" in res.stdout
    rows = {t["config_id"]: t for t in trials(tmp_path / "res")}
    assert rows["c01"]["status"] == "ok"
    (key,) = before
    assert json.loads(rows["c01"]["pgbench_argv"])[0] == str(cache / key / "prefix/bin/pgbench")
    assert rows["c02"]["status"] == "failed"
    assert "configure failed" in rows["c02"]["reason"]
    assert "--with-ssl must specify openssl" in rows["c02"]["log_tail"]
    assert _finished(cache) == before  # the failed build left no entry, only its log
    assert len(list(cache.glob("*.failed.log"))) == 1
    assert not list(cache.glob(".building-*"))
    if "installed-and-build" in FOLDERS:  # compare names what each folder ran
        cmp = pgsweep("compare", str(FOLDERS["installed-and-build"]), str(tmp_path / "res"))
        ran = f"{key} (15.18)"
        assert f"the environments differ in builds: '{ran}, installed' vs '{ran}'" in cmp.stdout


def test_a_setting_the_build_lacks_is_exit_2_naming_the_build(
    cache: Path, tmp_path: Path, state_dir: Path
) -> None:
    (key,) = _finished(cache)
    # trace_locks exists only in builds with LOCK_DEBUG: neither the build nor Debian's.
    # The build is of the installed major version and adds no macro: refused at plan,
    # before anything is fetched or compiled, naming the build
    path = _experiment(tmp_path, '[server]\ntrace_locks = "on"\n')
    for command in ("plan", "run"):
        res = pgsweep(command, str(path), "--results", str(tmp_path / "res"))
        assert res.returncode == 2, res.stderr + res.stdout
        assert "no setting named 'trace_locks'" in res.stderr
        assert "--with-wal-blocksize=4" in res.stderr and "compiling" not in res.stdout
        assert "exp.toml:" in res.stderr  # the file and line of the key
        assert not (tmp_path / "res").exists()
    # lz4 is a value Debian's build takes and this one (no --with-lz4) rejects
    path = _experiment(tmp_path, '[server]\nwal_compression = "lz4"\n[factors]\n'
                       'build.source = ["installed", "apt:postgresql-15"]\n')  # fmt: skip
    res = pgsweep("run", str(path), "--results", str(tmp_path / "res"))
    assert res.returncode == 2, res.stderr + res.stdout
    assert "wal_compression" in res.stderr and key in res.stderr
    assert not (tmp_path / "res").exists()


def test_the_builds_command_lists_and_prunes(cache: Path, tmp_path: Path) -> None:
    (key,) = _finished(cache)
    (cache / f"{'0' * 16}.failed.log").write_text("a failed build's log\n")
    listed = pgsweep("builds")
    assert listed.returncode == 0, listed.stderr
    assert key in listed.stdout and "15.18" in listed.stdout
    assert "failed.log" in listed.stdout
    unknown = pgsweep("builds", "--remove", "ffffffffffffffff")
    assert unknown.returncode == 2 and "not in the build cache" in unknown.stderr
    pruned = pgsweep("builds", "--prune")
    assert pruned.returncode == 0, pruned.stderr
    assert not list(cache.glob("*.failed.log"))
    assert _finished(cache) == {key: (cache / key / "meta.json").stat().st_mtime_ns}


def test_a_server_on_another_host_runs_a_build_made_here_copied_into_its_cache(
    cache: Path, tmp_path: Path, state_dir: Path
) -> None:
    """[build] beside [roles] server: the build is made (here: found) in this machine's
    cache, copied into the server's host's own build cache under its key, and its trials
    run that copy there; the copy stays in that cache, root's, for the next run."""
    sys.path.insert(0, str(HERE))
    from sshhosts import ssh_hosts

    (key,) = _finished(cache)
    with ssh_hosts(1) as (db,):
        table = (f'[hosts.db]\nssh = "root@{db.address}"\nidentity_file = "{db.identity}"\n'
                 f'known_hosts = "{db.known_hosts}"\npgsweep = "{HERE.parent}/.venv/bin/'
                 'pgsweep"\n[roles]\nserver = "db"\n')  # fmt: skip
        path = _experiment(tmp_path, '[factors]\nserver.synchronous_commit = ["on", "off"]\n',
                           extra="")  # fmt: skip
        path.write_text(path.read_text() + table)
        copy = f"/var/cache/pgsweep/builds/{key}"  # db's cache (tests/sshhosts.py: its own)
        plan = pgsweep("plan", str(path), "--commands")
        assert plan.returncode == 0, plan.stderr
        assert f"[build] {key}: copied into this host's build cache as {copy} " in plan.stdout
        assert f"{copy}/prefix/bin/initdb" in plan.stdout.split("host db (the server")[1]
        res = pgsweep("run", str(path), "--results", str(tmp_path / "res"))
        assert res.returncode == 0, res.stderr + res.stdout
        assert f"cached ({key}), nothing to compile" in res.stdout
        assert "copying it to host db" in res.stdout
        there = f"{copy}/prefix/bin/postgres"
        listed = subprocess.run(db.ssh_argv("stat", "-c", "%U:%a", there), capture_output=True,
                                text=True, timeout=30)  # fmt: skip
        assert listed.stdout.strip() == "root:755", listed.stderr
        assert len(db.settled_pids()) == 1  # its sshd alone: the agent stopped what it ran
    rows = trials(tmp_path / "res")
    assert len(rows) == 2 and all(r["status"] == "ok" for r in rows), [r["reason"] for r in rows]
    for row in rows:  # the build's server ran on db: its WAL block size, its key
        effective = json.loads(row["effective_json"])
        assert (effective["build.wal_block_size"], effective["build.id"]) == ("4096", key)
    assert not Path(there).exists()  # db's cache, not this machine's
