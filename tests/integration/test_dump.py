"""`cluster.from = "dump:/abs/path"`: a pg_dump archive made here from a real server (a
table with indexes, a role the new cluster lacks), restored into every new cluster
(custom format with pg_restore -j, plain SQL with psql), counted, snapshotted, and put
back before every writing trial; and refused at `plan` (exit 2, nothing made) when it is
a link, not readable by the server user, of a newer major version, or beside
cluster.scale."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import (
    SERVER_USER,
    open_base,
    pgsweep,
    requires_pg,
    run_shared,
    trials,
    write_experiment,
)
from pgsweep.host.local import LOCAL
from pgsweep.host.proc import RunAs
from pgsweep.postgres import binaries as pgbin
from pgsweep.postgres.cluster import Cluster

pytestmark = [requires_pg, pytest.mark.postgres]

ROWS = 20_000
SCHEMA = f"""
CREATE ROLE alice;
CREATE TABLE items (id int PRIMARY KEY, name text NOT NULL, price numeric NOT NULL);
INSERT INTO items SELECT g, md5(g::text), g % 100 FROM generate_series(1, {ROWS}) g;
CREATE INDEX items_name ON items (name);
CREATE TABLE orders (id serial PRIMARY KEY, item int REFERENCES items (id), qty int);
ALTER TABLE items OWNER TO alice;
GRANT SELECT ON orders TO alice;
"""
# every transaction first counts the restored table's rows and fails (division by zero: a
# client pgbench aborts, a failed trial) unless it holds every row the dump holds
SCRIPT = """SELECT count(*) AS n FROM items \\gset
\\if :n <> {rows}
SELECT 1 / 0;
\\endif
\\set id random(1, {rows})
UPDATE items SET price = price + 1 WHERE id = :id;
INSERT INTO orders (item, qty) VALUES (:id, 1);
"""


@pytest.fixture(scope="module")
def dumps() -> Iterator[Path]:
    """A folder (root's, 0755) with shop.dump (pg_dump -Fc), shop.tar (-Ft), shop.d (-Fd, a
    directory) and shop.sql (plain) of a real server's database, made as the server user,
    and the writing script."""
    folder = Path(tempfile.mkdtemp(prefix="pgsweep-test-dump-", dir=open_base(__name__)))
    try:
        _make_dumps(folder)
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _make_dumps(folder: Path) -> None:
    folder.chmod(0o755)
    user = RunAs(SERVER_USER) if os.geteuid() == 0 else None
    (folder / "out").mkdir(mode=0o700)
    binaries = pgbin.inspect(pgbin.locate("auto", where="test"), folder / "out", user)
    cluster = Cluster(binaries, user, folder / "c", folder / "s", host=LOCAL)
    shared = folder / "dumps"
    shared.mkdir(mode=0o700)  # the server user writes the dumps here, then root takes them
    if user is not None:
        os.chown(shared, user.uid, user.gid)
    try:
        cluster.create(["--no-sync"])
        cluster.start()
        with cluster.connect() as conn:
            for statement in filter(str.strip, SCHEMA.split(";")):
                conn.execute(statement)
        for args, name in ((["-Fc"], "shop.dump"), (["-Ft"], "shop.tar"), (["-Fd"], "shop.d"),
                           ([], "shop.sql")):  # fmt: skip
            argv = [binaries.path("pg_dump"), *cluster.pgbench_conn_args(), *args,
                    "-f", str(shared / name), "postgres"]  # fmt: skip
            res = LOCAL.run(argv, out=folder / "out" / f"{name}.out", user=user)
            assert res.ok, res.describe_failure()
    finally:
        cluster.destroy()
    for name in ("shop.dump", "shop.tar", "shop.sql"):
        shutil.copyfile(shared / name, folder / name)  # root's now, readable by all
        (folder / name).chmod(0o644)
    shutil.copytree(shared / "shop.d", folder / "shop.d")
    for path in [folder / "shop.d", *(folder / "shop.d").iterdir()]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    shutil.rmtree(shared)
    (folder / "write.sql").write_text(SCRIPT.format(rows=ROWS))  # the server user reads it
    (folder / "write.sql").chmod(0o644)


def _body(source: str, extra: str = "", factors: str = "") -> str:
    script = Path(source).parent / "write.sql"
    return f"""
        [experiment]
        name = "dump"
        seed = 11
        [cluster]
        from = "dump:{source}"
        {extra}
        [workload]
        script = "{script}"
        clients = 1
        jobs = 1
        duration = "1s"
        rate = 200  # conftest.MECHANICS
        warmup = "0s"
        [factors]
        {factors}
        [repeat]
        rounds = 1
        """


@pytest.fixture(scope="module")
def custom_run(dumps: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return run_shared(tmp_path_factory, "custom", _body(
        str(dumps / "shop.dump"), factors="cluster.data_checksums = [false, true]"))


def _load(results: Path) -> dict[str, dict[str, float]]:
    db = sqlite3.connect(results / "results.db")
    out: dict[str, dict[str, float]] = {}
    for cluster, name, value in db.execute("SELECT cluster, name, value FROM load_counter"):
        out.setdefault(cluster, {})[name] = value
    db.close()
    return out


def _effective(row: dict[str, object]) -> dict[str, str]:
    return dict(json.loads(str(row["effective_json"])))


def test_custom_dump_is_restored_into_every_cluster_and_every_writing_trial(
    custom_run: Path, dumps: Path
) -> None:
    rows = trials(custom_run)
    assert len(rows) == 2 and {r["status"] for r in rows} == {"ok"}, rows
    load = _load(custom_run)
    used = {_effective(r)["cluster.name"] for r in rows}
    assert len(used) == 2 and used <= set(load)  # two clusters, each restored from the dump
    for cluster in used:
        # both tables, every row the dump holds (orders was empty), the dump's size kept
        assert load[cluster]["load.tables"] == 2 and load[cluster]["load.rows"] == ROWS
        assert load[cluster]["load.dump_bytes"] == (dumps / "shop.dump").stat().st_size
        assert 0 < load[cluster]["load.restore_seconds"] <= load[cluster]["load.seconds"]
        assert load[cluster]["load.database_bytes"] > ROWS * 40  # the rows and two indexes
    # every transaction of both trials counted the restored items (SCRIPT fails otherwise)
    for row in rows:  # the writing script: every trial starts from the restored snapshot
        assert "restore" in json.loads(str(row["events_json"])), row["events_json"]
        command = _effective(row)["cluster.load_command"]  # what loaded the cluster
        assert "/pg_restore " in command and " -j " in command, command
        assert command.endswith(str(dumps / "shop.dump")) and "--no-owner" in command


@pytest.mark.parametrize(("name", "parallel"), [("shop.tar", False), ("shop.d", True)])
def test_tar_and_directory_dumps_are_restored_with_pg_restore(
    dumps: Path, tmp_path_factory: pytest.TempPathFactory, name: str, parallel: bool
) -> None:
    """The other two archive formats: a tar archive (pg_restore, one job: tar allows no
    more) and a directory archive (pg_restore -j), each restored whole into its cluster."""
    results = run_shared(tmp_path_factory, name.replace(".", "-"), _body(str(dumps / name)))
    (row,) = trials(results)
    assert row["status"] == "ok", row
    (load,) = _load(results).values()
    assert load["load.tables"] == 2 and load["load.rows"] == ROWS
    command = _effective(row)["cluster.load_command"]
    assert "/pg_restore " in command and command.endswith(str(dumps / name)), command
    assert (" -j " in command) == parallel


def test_plain_sql_dump_naming_a_missing_role_is_restored_with_psql(
    dumps: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    results = run_shared(tmp_path_factory, "plain", _body(str(dumps / "shop.sql")))
    (row,) = trials(results)
    assert row["status"] == "ok", row
    (load,) = _load(results).values()
    assert load["load.tables"] == 2 and load["load.rows"] == ROWS
    assert load["load.dump_bytes"] == (dumps / "shop.sql").stat().st_size


def _plan(tmp_path: Path, body: str) -> subprocess.CompletedProcess[str]:
    return pgsweep("plan", str(write_experiment(tmp_path, body)))


def _refused(res: subprocess.CompletedProcess[str], *words: str) -> str:
    assert res.returncode == 2, res.stdout + res.stderr
    assert "cluster.from" in res.stderr or "cluster.scale" in res.stderr, res.stderr
    for word in words:
        assert word in res.stderr, res.stderr
    return res.stderr


def test_link_to_a_dump_is_refused_and_nothing_is_made(
    dumps: Path, tmp_path: Path, state_dir: Path
) -> None:
    link = dumps / "link.dump"
    link.symlink_to(dumps / "shop.dump")
    try:
        path = write_experiment(tmp_path, _body(str(link)))
        res = pgsweep("run", str(path), "--results", str(tmp_path / "res"))
        _refused(res, "symbolic link", "exp.toml:5")
        # no results folder, and no run registered (its work area, journals and lock are)
        assert not (tmp_path / "res").exists()
        assert not state_dir.exists() or not any(state_dir.rglob("*")), list(
            state_dir.rglob("*"))
    finally:
        link.unlink()


def test_hostile_and_unreadable_dumps_are_refused_at_plan(dumps: Path, tmp_path: Path) -> None:
    script = str(dumps / "write.sql")
    for hostile in ("relative/shop.dump", "/etc/../etc/shadow"):
        _refused(_plan(tmp_path, _body(hostile).replace(str(Path(hostile).parent / "write.sql"),
                                                       script)), "absolute path")
    _refused(_plan(tmp_path, _body(str(dumps / "missing.dump"))), "No such file")
    if os.geteuid() == 0:  # root may read it, the server user who restores it may not
        _refused(_plan(tmp_path, _body("/etc/shadow")), "not readable by the server user")
    _refused(_plan(tmp_path, _body(str(dumps / "shop.dump"), extra="scale = 2")),
             "cluster.scale and cluster.from")  # fmt: skip
    text = dumps / "notes.txt"
    text.write_text("just some text\n")
    text.chmod(0o644)
    _refused(_plan(tmp_path, _body(str(text))), "not a pg_dump archive")


def test_dump_of_a_newer_major_version_is_refused_naming_both(
    dumps: Path, tmp_path: Path
) -> None:
    major = pgbin.inspect(pgbin.locate("auto", where="test"), _scratch(tmp_path),
                          None).major  # fmt: skip
    newer = str(major + 2).encode()
    for name in ("shop.dump", "shop.sql"):
        data = (dumps / name).read_bytes()
        # the header's version strings (custom: the archive header; plain: its comments)
        head, rest = data[:4096], data[4096:]
        forged = dumps / f"newer-{name}"
        forged.write_bytes(head.replace(f"{major}.".encode(), newer + b".") + rest)
        forged.chmod(0o644)
        err = _refused(_plan(tmp_path, _body(str(forged))), f"PostgreSQL {major + 2}.",
                       f"this cluster's PostgreSQL {major}.")  # fmt: skip
        assert f"pg_dump {major + 2}." in err


def _scratch(tmp_path: Path) -> Path:
    d = tmp_path / "inspect"
    d.mkdir(mode=0o700)
    return d
