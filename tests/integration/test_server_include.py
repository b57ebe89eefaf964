"""`server.include = "/abs/path/postgresql.conf"`: Debian's stock postgresql.conf, with
its include_dir and a nested relative include, becomes every configuration's base
settings; [server] and factors override it; what pgsweep manages (paths, port, SSL,
archiving) is not used and said so with the file's line; a setting the server does not
know, rejects or will not start with, a library by path, a link and a loop are exit 2 at
`plan` naming the file's line. (That the scratch server of a failed start is gone is
test_server_levels' question: it looks at the whole machine, in the suite's machine lane;
this module runs beside others.)"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import DATA, open_base, pgsweep, requires_pg, run_shared, trials, write_experiment

pytestmark = [requires_pg, pytest.mark.postgres]


@pytest.fixture(scope="module")
def confs() -> Iterator[Path]:
    """A folder (root's, 0755) holding postgresql.conf (Debian's stock file, which ends
    with include_dir = 'conf.d') and conf.d/: one file with a tuned setting and a
    production archive_command, one including extra.conf by a relative path."""
    folder = Path(tempfile.mkdtemp(prefix="pgsweep-test-include-", dir=open_base(__name__)))
    try:
        folder.chmod(0o755)
        shutil.copyfile(DATA / "debian" / "postgresql-15-stock.conf", folder / "postgresql.conf")
        (folder / "conf.d").mkdir()
        (folder / "conf.d" / "10-tune.conf").write_text(
            "work_mem = '8MB'   # tuned\narchive_mode = on\n"
            "archive_command = 'cp %p /backup/%f'\n")  # fmt: skip
        (folder / "conf.d" / "20-more.conf").write_text("include 'extra.conf'\n")
        (folder / "conf.d" / "extra.conf").write_text("log_min_duration_statement = 250\n")
        (folder / "conf.d" / ".hidden.conf").write_text("work_mem = '1MB'\n")  # never read
        for p in [folder / "conf.d", *folder.rglob("*")]:
            p.chmod(0o755 if p.is_dir() else 0o644)
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _body(include: str, factors: str = 'server.shared_buffers = ["128MB", "256MB"]') -> str:
    return f"""
        [experiment]
        name = "include"
        seed = 2
        [server]
        include = "{include}"
        max_connections = 50
        [cluster]
        scale = 1
        [workload]
        script = "select-only"
        duration = "1s"
        rate = 200  # conftest.MECHANICS
        warmup = "0s"
        [factors]
        {factors}
        [repeat]
        rounds = 1
        """


@pytest.fixture(scope="module")
def results(confs: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return run_shared(tmp_path_factory, "include", _body(str(confs / "postgresql.conf")))


def test_the_file_is_the_base_and_the_experiment_overrides_it(
    results: Path, confs: Path
) -> None:
    rows = trials(results)
    assert len(rows) == 2 and {r["status"] for r in rows} == {"ok"}, rows
    for row in rows:
        eff = json.loads(row["effective_json"])
        # from the stock file, from conf.d, and from the file conf.d includes
        assert eff["cluster_name"] == "15/main" and eff["datestyle"] == "ISO, MDY"
        assert eff["work_mem"] == "8MB" and eff["log_min_duration_statement"] == "250ms"
        assert eff["max_connections"] == "50"  # [server] beats the file's 100
        assert eff["shared_buffers"] in ("128MB", "256MB")  # the factor beats the file
        assert "archive_mode" not in eff and "archive_command" not in eff
    assert {json.loads(r["effective_json"])["shared_buffers"] for r in rows} == {"128MB",
                                                                                  "256MB"}


def test_what_came_from_the_file_and_what_was_not_used_is_recorded(
    results: Path, confs: Path
) -> None:
    db = sqlite3.connect(results / "results.db")
    notes = [v for (v,) in db.execute("SELECT value FROM environment WHERE scope = 'notes'")]
    db.close()
    tune = confs / "conf.d" / "10-tune.conf"
    for where, name in ((f"{confs}/postgresql.conf:3", "data_directory"),
                        (f"{confs}/postgresql.conf:7", "port"),
                        (f"{confs}/postgresql.conf:10", "ssl"),
                        (f"{tune}:2", "archive_mode"), (f"{tune}:3", "archive_command")):
        assert any(n.startswith(f"{where}: {name} = ") and "not used" in n for n in notes), (
            where, notes)  # fmt: skip
    (summary,) = [n for n in notes if "setting(s) from" in n]
    assert "work_mem = '8MB'" in summary and "log_min_duration_statement = '250'" in summary
    assert "set by the experiment instead: max_connections, shared_buffers" in summary
    # and the report says it, in every form a reader opens
    md = pgsweep("report", str(results), "--format", "markdown").stdout
    section = md.split("## What ran otherwise than the file says")[1].split("\n## ")[0]
    assert "setting(s) from" in section and "archive_command" in section, section
    term = pgsweep("report", str(results)).stdout
    assert any(line.startswith("note: ") and "setting(s) from" in line
               for line in term.splitlines()), term  # fmt: skip


def _plan_error(tmp_path: Path, body: str) -> str:
    res = pgsweep("plan", str(write_experiment(tmp_path, body)))
    assert res.returncode == 2, res.stdout + res.stderr
    return res.stderr


@pytest.mark.parametrize(("line", "words"), [
    ("shared_bufers = 128MB", "has no setting named 'shared_bufers'"),
    ("work_mem = 'lots'", "PostgreSQL rejects work_mem = 'lots'"),
    ("wal_level = minimal", "does not start"),  # beside the default max_wal_senders
    ("shared_preload_libraries = '/tmp/evil.so'", "names a library by path"),
    ("this is = not a line", "not a setting PostgreSQL reads"),
    ("include 'bad.conf'", "included again"),
])  # fmt: skip
def test_a_bad_line_is_exit_2_naming_the_file_and_line(
    confs: Path, tmp_path: Path, line: str, words: str
) -> None:
    bad = confs / "bad.conf"
    bad.write_text(f"# the user's file\n{line}\n")
    bad.chmod(0o644)
    err = _plan_error(tmp_path, _body(str(bad), factors=""))
    assert f"{bad}:2: " in err and words in err, err


def test_links_and_relative_paths_are_refused(confs: Path, tmp_path: Path) -> None:
    link = confs / "link.conf"
    link.symlink_to(confs / "conf.d" / "extra.conf")
    outer = confs / "outer.conf"
    outer.write_text("work_mem = '4MB'\ninclude 'link.conf'\n")
    outer.chmod(0o644)
    try:
        err = _plan_error(tmp_path, _body(str(outer), factors=""))
        assert f"{outer}:2: " in err and "symbolic link" in err, err
        err = _plan_error(tmp_path, _body(str(link), factors=""))
        assert "exp.toml:5: server.include" in err and "symbolic link" in err, err
        err = _plan_error(tmp_path, _body("postgresql.conf", factors=""))
        assert "exp.toml:5" in err and "not an absolute path" in err, err
    finally:
        link.unlink()
    if os.geteuid() == 0:  # root may read it; the server user, and so pgsweep, may not
        err = _plan_error(tmp_path, _body("/etc/shadow", factors=""))
        assert "not readable by the server user" in err, err
