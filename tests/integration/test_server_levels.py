"""Server levels as a DBA writes them: automatic values (-1 and their kind) and values the
server formats when it shows them run like any other level and are recorded as the value
in force; a stock postgresql.conf pasted into [server] runs. (A level the server will not
start with is exit 2 at `plan`: test_start_refusals, which runs alone, as it counts every
server and scratch folder on the machine.)"""

from __future__ import annotations

import json
import os
import re
import sqlite3
from pathlib import Path

import pytest

from conftest import DATA, SERVER_USER, pgsweep, requires_pg, trials, write_experiment
from pgsweep.host.local import LOCAL
from pgsweep.host.proc import RunAs
from pgsweep.postgres import binaries as pgbin
from pgsweep.postgres.cluster import Cluster

pytestmark = [requires_pg, pytest.mark.postgres]
MANAGED = {"config_file", "data_directory", "hba_file", "ident_file", "external_pid_file",
           "unix_socket_permissions"}  # fmt: skip


def _derived_settings(tmp: Path) -> dict[str, str]:
    """Every setting whose value on a started server with no configuration differs from
    its boot value although nothing set it (the server derived or formatted it): name ->
    boot value (the shown one where there is none, as a DBA would write it). Asked of
    the installed server itself, not listed by hand. `tmp` is a root-owned folder the
    server user may pass through."""
    user = RunAs(SERVER_USER) if os.geteuid() == 0 else None
    (tmp / "out").mkdir(mode=0o700)
    binaries = pgbin.inspect(pgbin.locate("auto", where="test"), tmp / "out", user)
    cluster = Cluster(binaries, user, tmp / "c", tmp / "s", host=LOCAL)
    cluster.create(["--no-sync"])
    cluster.start()
    try:
        with cluster.connect() as conn:
            rows = conn.execute(
                "SELECT name, coalesce(boot_val, setting) FROM pg_settings WHERE context <> "
                "'internal' AND source IN ('default', 'override') AND setting IS DISTINCT "
                "FROM boot_val"
            ).fetchall()
    finally:
        cluster.destroy()
    return {name: boot for name, boot in rows if name not in MANAGED}


def _run(folder: Path, body: str) -> tuple[Path, object]:
    path = write_experiment(folder, body)
    res = pgsweep("run", str(path), "--results", str(folder / "res"))
    return folder / "res", res


def test_automatic_and_formatted_values_are_levels_in_force(
    tmp_path: Path, state_dir: Path, open_dir: Path
) -> None:
    derived = _derived_settings(open_dir)
    # the kinds this test exists for: -1 resolved at start, a mode shown in octal
    assert {"wal_buffers", "log_file_mode"} <= set(derived), derived
    base = "".join(f"{n} = {json.dumps(v)}\n" for n, v in sorted(derived.items())
                   if n != "wal_buffers")  # fmt: skip
    results, res = _run(tmp_path, (
        f'[experiment]\nname = "auto-values"\nseed = 3\n[server]\n{base}[factors]\n'
        'server.wal_buffers = ["-1", "16MB"]\nserver.shared_buffers = ["128MB", "256MB"]\n'
        '[workload]\nduration = "1s"\nwarmup = "0s"\n[repeat]\nrounds = 1\n'
    ))
    assert res.returncode == 0, res.stderr + res.stdout
    rows = trials(results)
    assert len(rows) == 4 and all(r["status"] == "ok" for r in rows), rows
    db = sqlite3.connect(results / "results.db")
    levels = dict(db.execute("SELECT id, levels_json FROM configuration").fetchall())
    for r in rows:
        eff = json.loads(r["effective_json"])
        lv = json.loads(levels[r["config_id"]])
        if lv["server.wal_buffers"] == "-1":  # the level and the value the server chose
            assert eff["wal_buffers.level"] == "-1"
            # auto: 1/32 of shared_buffers (128MB -> 4MB, 256MB -> 8MB)
            want = {"128MB": "4MB", "256MB": "8MB"}[lv["server.shared_buffers"]]
            assert eff["wal_buffers"] == want, eff
        else:
            assert eff["wal_buffers"] == "16MB" and "wal_buffers.level" not in eff
        assert eff["log_file_mode"] == "0600"
    env = dict(db.execute("SELECT scope || '/' || name, value FROM environment").fetchall())
    auto = [k for k, v in env.items() if k.endswith("/wal_buffers") and "derived" in v]
    assert len(auto) == 2, env  # the two -1 configurations, recorded with their value


def test_a_stock_postgresql_conf_in_server_runs(tmp_path: Path, state_dir: Path) -> None:
    stock = {}
    for line in (DATA / "debian" / "postgresql-15-stock.conf").read_text().splitlines():
        m = re.match(r"^(\w+)\s*=\s*('(?:[^']|'')*'|\S+)", line)
        if m:
            value = m.group(2)
            stock[m.group(1)] = value[1:-1].replace("''", "'") if value[0] == "'" else value
    assert len(stock) >= 25 and "data_directory" in stock and "ssl" in stock
    base = "".join(f"{n} = {json.dumps(v)}\n" for n, v in stock.items())
    body = (f'[experiment]\nname = "stock"\nseed = 1\n[server]\n{base}[factors]\n'
            'workload.clients = [1, 2]\n[workload]\nduration = "1s"\nwarmup = "0s"\n'
            "[repeat]\nrounds = 1\n")
    path = write_experiment(tmp_path, body)
    plan = pgsweep("plan", str(path))
    assert plan.returncode == 0, plan.stderr
    notes = [line for line in plan.stdout.splitlines() if line.startswith("note:")]
    # what pgsweep sets itself is said, one line each, naming the line of the file
    for name in ("data_directory", "port", "unix_socket_directories", "ssl", "ssl_key_file",
                 "external_pid_file", "include_dir"):  # fmt: skip
        assert any(f"server.{name} = " in n and "not used" in n for n in notes), (name, notes)
    res = pgsweep("run", str(path), "--results", str(tmp_path / "res"))
    assert res.returncode == 0, res.stderr + res.stdout
    rows = trials(tmp_path / "res")
    assert len(rows) == 2 and all(r["status"] == "ok" for r in rows)
    eff = json.loads(rows[0]["effective_json"])
    assert eff["datestyle"] == "ISO, MDY" and eff["cluster_name"] == "15/main"
    assert eff["log_line_prefix"] == "%m [%p] %q%u@%d "


def test_the_start_checks_clusters_go_under_the_work_base_and_their_sockets_under_tmp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An initdb is about a thousand files: under PGSWEEP_WORK_BASE (where runs make their
    work areas), not /tmp; the sockets keep a short path under /tmp. Both go at the end."""
    from pgsweep.postgres.startcheck import StartChecker

    base = tmp_path / "base"
    base.mkdir()
    (tmp_path / "out").mkdir()
    monkeypatch.setenv("PGSWEEP_WORK_BASE", str(base))
    binaries = pgbin.inspect(pgbin.locate("auto", where="test"), tmp_path / "out")
    with StartChecker(binaries, None, LOCAL) as checker:
        made = [checker._dir, checker._sockets]
        assert made[0] is not None and made[0].parent == base
        assert made[1] is not None and made[1].parent == Path("/tmp")
        assert oct(made[0].stat().st_mode & 0o777) == "0o711" and made[0].stat().st_uid == 0
    assert not any(p.exists() for p in made if p is not None)


def test_the_start_check_copies_a_template_a_run_kept_in_the_build_cache(
    tmp_path: Path, open_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A check (plan's, or a refused file's) makes no template; a run whose checks passed
    makes one (root's 0711 folder, the data directory the server user's, a `ready` mark
    root wrote), and the next check copies it instead of running initdb: a template
    spoiled on purpose (another PG_VERSION) fails that check's start in the server's
    words. `builds --prune` removes the templates, and checks run initdb again. A link the
    server user planted in the template is removed with it, never followed."""
    from pgsweep.postgres.startcheck import TEMPLATES, StartChecker

    cache = open_dir / "cache"  # the server user passes to the cache's templates
    monkeypatch.setenv("PGSWEEP_CACHE_DIR", str(cache))
    user = RunAs(SERVER_USER) if os.geteuid() == 0 else None
    (tmp_path / "out").mkdir()
    binaries = pgbin.inspect(pgbin.locate("auto", where="test"), tmp_path / "out", user)

    def check() -> object:
        with StartChecker(binaries, user, LOCAL) as checker:
            return checker.shown({"work_mem": "5MB"}, ("--data-checksums",))

    assert check() == {"work_mem": "5120"}
    bad = write_experiment(tmp_path, """
        [experiment]
        name = "t"
        [cluster]
        data_checksums = true
        [server]
        shared_preload_libraries = "no_such_library"
        """, "bad.toml")  # fmt: skip
    refused = pgsweep("plan", str(bad))
    assert refused.returncode == 2 and "does not start" in refused.stderr, refused.stderr
    assert pgsweep("run", str(bad), "--results", str(tmp_path / "no")).returncode == 2
    assert not cache.exists()  # neither the check nor a refused file made anything
    good = write_experiment(tmp_path, """
        [experiment]
        name = "t"
        [cluster]
        scale = 1
        data_checksums = true
        [server]
        work_mem = "5MB"
        [workload]
        duration = "1s"
        rate = 200  # conftest.MECHANICS
        warmup = "0s"
        [repeat]
        rounds = 1
        """, "good.toml")  # fmt: skip
    assert pgsweep("plan", str(good)).returncode == 0 and not cache.exists()
    res = pgsweep("run", str(good), "--results", str(tmp_path / "res"))
    assert res.returncode == 0, res.stderr + res.stdout
    (home,) = (cache / TEMPLATES).iterdir()
    assert (home / "ready").stat().st_uid == 0 and oct(home.stat().st_mode & 0o777) == "0o711"
    data = home / "data"
    assert data.stat().st_uid != 0 or user is None
    assert (data / "global" / "pg_control").is_file()
    version = data / "PG_VERSION"
    LOCAL.run(["sh", "-c", f"echo 99 > {version}; ln -s /etc/shadow {data}/planted"],
              out=tmp_path / "out" / "spoil.out", user=user)  # fmt: skip
    spoiled = check()
    assert "incompatible" in " ".join(getattr(spoiled, "messages", [])), spoiled
    res = pgsweep("builds", "--prune")
    assert res.returncode == 0 and f"removed {cache / TEMPLATES}" in res.stdout, res.stdout
    assert not (cache / TEMPLATES).exists()
    assert check() == {"work_mem": "5120"}  # from initdb again
    assert not (cache / TEMPLATES).exists()
    assert Path("/etc/shadow").is_file() and not Path("/etc/shadow").is_symlink()


def test_a_runs_cluster_is_a_copy_of_the_kept_template_and_initdb_without_one(
    open_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cluster layer copies the data directory the start checks keep for its binaries,
    initdb options and server user: the copy has the template's system identifier, which
    initdb draws anew each time, and a link planted in the template is never followed.
    Without a template (another option set), and with pg_wal on a device of its own
    (initdb --waldir places it), initdb makes the directory."""
    from pgsweep.layers.cluster import _create
    from pgsweep.postgres.startcheck import keep_templates, kept_template

    monkeypatch.setenv("PGSWEEP_CACHE_DIR", str(open_dir / "cache"))
    user = RunAs(SERVER_USER) if os.geteuid() == 0 else None
    (open_dir / "out").mkdir(mode=0o700)
    binaries = pgbin.inspect(pgbin.locate("auto", where="test"), open_dir / "out", user)
    keep_templates(binaries, user, [("--data-checksums",)], LOCAL)
    template = kept_template(binaries, user, ("--data-checksums",), LOCAL)
    assert template is not None and kept_template(binaries, user, (), LOCAL) is None

    def sysid(data: Path) -> str:
        res = LOCAL.run([binaries.path("pg_controldata"), str(data)],
                        out=open_dir / "out" / "controldata.out", user=user)
        assert res.ok, res.describe_failure()
        found = re.search(r"system identifier:\s+(\d+)", res.stdout)
        assert found, res.stdout
        return found.group(1)

    def made(name: str, options: list[str], wal: bool = False) -> str:
        root = open_dir / name
        waldir = open_dir / f"{name}-wal" if wal else None
        cluster = Cluster(binaries, user, root, open_dir / f"s-{name}", waldir, host=LOCAL)
        try:
            _create(cluster, options)
            return sysid(cluster.datadir)
        finally:
            cluster.destroy()

    kept = sysid(template)
    assert made("copied", ["--data-checksums"]) == kept
    # a link the server user planted in the template is copied as a link and removed as
    # one with the cluster: root follows it neither way
    shadow = Path("/etc/shadow").stat()
    LOCAL.run(["ln", "-s", "/etc/shadow", str(template / "planted")],
              out=open_dir / "out" / "plant.out", user=user)  # fmt: skip
    assert made("copied-again", ["--data-checksums"]) == kept
    after = Path("/etc/shadow")
    assert not after.is_symlink() and after.stat().st_mode == shadow.st_mode
    assert (after.stat().st_uid, after.stat().st_size) == (shadow.st_uid, shadow.st_size)
    assert (template / "planted").is_symlink()
    assert made("other-options", []) != kept
    assert made("own-wal", ["--data-checksums"], wal=True) != kept
