"""The commands that read a results folder, tried on one real run whose levels are hostile
(application_name "[/x]", "=1+1", "<b>x</b>" and a rich hyperlink: valid values all) and
as a hostile local user would (the server user's account). The results folder is private;
every level stays text in the terminal, the CSV, the Markdown and the JUnit file; a folder
another user could change is refused by every reader; a link at any output name is
refused and the file it points to untouched."""

from __future__ import annotations

import csv
import io
import os
import pwd
import re
import shutil
import sqlite3
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest

from conftest import SERVER_USER, pgsweep, requires_pg, write_experiment

WORK_ON_DISK = "var-tmp"  # see conftest: results folders where a user's runs put them

pytestmark = [
    requires_pg,
    pytest.mark.postgres,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root and the server user"),
]
LEVELS = ["[/x]", "=1+1", "<b>x</b>", "[link=http://evil.example]click[/link]"]
EXPERIMENT = """
[experiment]
name = "readers"
seed = 5
[cluster]
scale = 1
[workload]
script = "point.sql"
clients = 1
jobs = 1
duration = "1s"
rate = 200  # conftest.MECHANICS
warmup = "0s"
[repeat]
rounds = 2
[factors]
server.application_name = {levels}
"""
SECRET = "root's own file\n"


def _theirs() -> tuple[int, int]:
    pw = pwd.getpwnam(SERVER_USER)
    return pw.pw_uid, pw.pw_gid


@pytest.fixture(scope="module")
def folder() -> Iterator[Path]:
    """A folder the server user can pass through and read (the custom script must be
    readable by it): results folders in it are as on a user's machine."""
    d = Path(tempfile.mkdtemp(prefix="pgsweep-test-readers-", dir="/dev/shm"))  # conftest.open_base
    d.chmod(0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def run(folder: Path) -> dict[str, Path | str]:
    (folder / "point.sql").write_text("SELECT 1;\n")
    (folder / "point.sql").chmod(0o644)
    levels = "[" + ", ".join(f'"{v}"' for v in LEVELS) + "]"
    path = write_experiment(folder, EXPERIMENT.format(levels=levels))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PGSWEEP_STATE_DIR", str(folder / "state"))
        res = pgsweep("run", str(path), "--results", str(folder / "res"))
    # before: the summary at the end crashed on "[/x]" (exit 1, after every trial ran)
    assert res.returncode == 0, res.stderr + res.stdout
    return {"file": path, "res": folder / "res", "stdout": res.stdout}


@pytest.fixture
def canary(tmp_path: Path) -> Path:
    path = tmp_path / "canary"
    path.write_text(SECRET)
    path.chmod(0o600)
    return path


def _plant(at: Path, target: Path) -> None:
    """A link as the server user would leave it: theirs, pointing at root's file."""
    at.symlink_to(target)
    os.chown(at, *_theirs(), follow_symlinks=False)


def test_the_results_folder_is_private(run: dict[str, Path | str]) -> None:
    res = Path(run["res"])
    # the server user passed through it to the work area inside (0711 during the run)
    assert "cannot reach" not in str(run["stdout"]), run["stdout"]
    assert not list(res.glob(".pgsweep-work-*"))
    assert res.stat().st_mode & 0o777 == 0o700
    modes = {p.relative_to(res).as_posix(): p.stat().st_mode & 0o777 for p in res.rglob("*")}
    assert modes == {"experiment.toml": 0o600, "plan.json": 0o600, "results.db": 0o600,
                     "scripts": 0o700, "scripts/0-point.sql": 0o600}, modes  # fmt: skip
    peek = subprocess.run(["runuser", "-u", SERVER_USER, "--", "cat", str(res / "results.db")],
                          capture_output=True)  # fmt: skip
    assert peek.returncode != 0 and b"Permission denied" in peek.stderr


def test_levels_stay_text_in_every_output(run: dict[str, Path | str], tmp_path: Path) -> None:
    res = str(run["res"])
    for args in (["plan", str(run["file"])], ["show", res], ["report", res]):
        out = pgsweep(*args)
        assert out.returncode == 0, out.stderr  # "[/x]" was a MarkupError (exit 1)
        for level in LEVELS:  # shown as written: no markup consumed, no hidden link
            assert level in out.stdout, (args, out.stdout)
    md = pgsweep("report", res, "--format", "markdown")
    assert md.returncode == 0 and "<b>" not in md.stdout and "&lt;b&gt;x&lt;/b&gt;" in md.stdout
    assert not re.search(r"(?<!\\)\[", md.stdout), md.stdout  # no link, no image
    out = tmp_path / "trials.csv"
    assert pgsweep("export", res, "-o", str(out)).returncode == 0
    rows = list(csv.DictReader(io.StringIO(out.read_text())))
    assert {r["server.application_name"] for r in rows} == {
        "[/x]", "'=1+1", "<b>x</b>", "[link=http://evil.example]click[/link]"}  # fmt: skip
    for cell in (v for r in rows for v in r.values() if v):
        assert not cell.startswith(("=", "+", "@", "\t", "\r")), cell
        assert not cell.startswith("-") or re.fullmatch(r"-[\d.e+-]+", cell), cell
    junit = tmp_path / "gate.xml"
    gate = pgsweep("report", res, "--fail-if-slower", "90%", "--junit", str(junit))
    assert gate.returncode == 0, gate.stderr
    names = {c.get("name") for c in ET.parse(junit).iter("testcase")}
    assert "server.application_name=<b>x</b>" in names, names


def test_junit_stays_xml_for_a_folder_from_elsewhere(
    run: dict[str, Path | str], folder: Path, tmp_path: Path
) -> None:
    """A folder written by an older pgsweep (levels were not checked for noncharacters),
    under a name with a control character: `report` and `compare` still write XML."""
    old = tmp_path / "old\x01run"
    shutil.copytree(Path(run["res"]), old)
    db = sqlite3.connect(old / "results.db")
    db.execute("""UPDATE configuration SET levels_json =
                  '{"server.application_name": "bad\\ufffe\\u0001"}' WHERE id = 'c02'""")
    db.commit()
    db.close()
    show = pgsweep("show", str(old))
    assert show.returncode == 0 and "bad\\ufffe\\u0001" in show.stdout, show.stdout
    good = str(run["res"])  # the gate between two folders needs an A/A calibration
    calibrated = ["--calibration", good, "--calibration", good]
    for args in (["report", str(old)], ["compare", str(old), good, *calibrated]):
        junit = tmp_path / "junit.xml"
        res = pgsweep(*args, "--fail-if-slower", "90%", "--junit", str(junit))
        assert res.returncode == 0, res.stderr
        suite = ET.parse(junit).getroot()  # ParseError before: invalid XML
        text = ET.tostring(suite, encoding="unicode")
        assert "\\u0001" in text and "\x01" not in text


def _readers(res: Path, run: dict[str, Path | str], tmp_path: Path) -> list[list[str]]:
    file, good = str(run["file"]), str(run["res"])
    return [
        ["show", str(res)], ["show", str(res), "--env"], ["report", str(res)],
        ["report", str(res), "--format", "json"], ["export", str(res)],
        ["compare", good, str(res)], ["compare", str(res), good],
        ["plan", file, "--noise-from", str(res)], ["explain", str(res), "--config", "c01"],
        ["run", file, "--against", str(res), "--results", str(tmp_path / "new")],
    ]  # fmt: skip


@pytest.mark.parametrize("how", ["owned-by-them", "writable-by-others", "their-link"])
def test_every_reader_refuses_a_folder_another_user_can_change(
    run: dict[str, Path | str], folder: Path, tmp_path: Path, how: str
) -> None:
    theirs = folder / f"theirs-{how}"
    shutil.copytree(Path(run["res"]), theirs)
    named = theirs
    if how == "owned-by-them":
        for p in [theirs, *theirs.rglob("*")]:
            os.chown(p, *_theirs())
    elif how == "writable-by-others":
        theirs.chmod(0o777)
    else:  # root's folder, reached through a link the server user owns
        named = folder / f"link-{how}"
        _plant(named, theirs)
    before = sorted(p.name for p in theirs.iterdir())
    for args in _readers(named, run, tmp_path):
        res = pgsweep(*args)
        assert res.returncode == 2, (args, res.stderr)
        assert "could be changed by another user" in res.stderr, (args, res.stderr)
        assert "cp -rP" in res.stderr, res.stderr
    res = pgsweep("run", str(run["file"]), "--results", str(named), "--resume")
    assert res.returncode == 2 and "not safe for root to write in" in res.stderr, res.stderr
    assert sorted(p.name for p in theirs.iterdir()) == before  # nothing written there
    assert not (tmp_path / "new").exists()


OUTPUTS = [(what, fmt) for what in ("trials", "samples", "latency", "standbys", "waits", "cpu")
           for fmt in ("csv", "json", "parquet")]  # fmt: skip


def test_a_planted_link_at_every_output_name_is_refused(
    run: dict[str, Path | str], canary: Path, tmp_path: Path
) -> None:
    res = Path(run["res"])
    for what, fmt in OUTPUTS:  # export's own names in the results folder
        name = res / f"{what}.{fmt}"
        _plant(name, canary)
        out = pgsweep("export", str(res), "--what", what, "--format", fmt)
        assert out.returncode == 2 and "is a symbolic link" in out.stderr, out.stderr
        name.unlink()
    shared = tmp_path / "shared"  # -o names in a sticky folder such as /tmp
    shared.mkdir()
    shared.chmod(0o1777)
    commands = [["report", str(res), "--format", f, "-o", "{}"]
                for f in ("terminal", "markdown", "html", "json")]  # fmt: skip
    commands += [["report", str(res), "--fail-if-slower", "90%", "--junit", "{}"],
                 ["compare", str(res), str(res), "--calibration", str(res),
                  "--calibration", str(res), "--fail-if-slower", "90%", "--junit", "{}"],
                 ["export", str(res), "--format", "csv", "-o", "{}"]]  # fmt: skip
    for n, command in enumerate(commands):
        name = shared / f"out-{n}"
        _plant(name, canary)
        out = pgsweep(*(str(name) if a == "{}" else a for a in command))
        assert out.returncode == 2 and "is a symbolic link" in out.stderr, (command, out.stderr)
    assert canary.read_text() == SECRET and canary.stat().st_mode & 0o777 == 0o600
    assert sorted(p.name for p in res.iterdir()) == [
        "experiment.toml", "plan.json", "results.db", "scripts"]  # fmt: skip
