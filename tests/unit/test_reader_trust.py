"""What the reader commands trust in a results folder, and how they write their files
(host/folders.py, store/db.py): a folder, a file or a link another user could change is
refused with exit 2 and the way out; SQLite's rollback of a planted journal cannot delete
a file of root's; output files are never written through a link. Each case is built for
real on this machine's filesystem, as root with the server user's account; the real
commands are tried in tests/integration/test_readers.py."""

from __future__ import annotations

import os
import pwd
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pgsweep.errors import PgsweepError
from pgsweep.host import folders
from pgsweep.store import Results, Store
from synthetic import make_results

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root and the server user")
SERVER_USER = "pgsweep"
MAGIC = bytes.fromhex("d9d505f920a163d7")


def _theirs() -> tuple[int, int]:
    pw = pwd.getpwnam(SERVER_USER)
    return pw.pw_uid, pw.pw_gid


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    tps = {(c, r): 100.0 + c + r for c in range(2) for r in (1, 2)}
    return make_results(tmp_path / "res", {"server.work_mem": ["4MB", "8MB"]}, tps, 2)


def _hot_journal(folder: Path) -> Path:
    """kill -9 inside the writer's transaction: results.db-journal is hot."""
    code = textwrap.dedent(f"""
        import os
        from pgsweep.store import Store
        store = Store({str(folder / "results.db")!r})
        store.db.execute("PRAGMA cache_size = 2")
        store.db.execute("BEGIN IMMEDIATE")
        store.db.execute("UPDATE trial SET tps = -1")
        store.db.executemany("INSERT INTO artifact VALUES ('r1-c01', ?, ?)",
                             [(f"big{{i}}", os.urandom(20000)) for i in range(40)])
        os._exit(9)
    """)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 9, res.stderr
    journal = folder / "results.db-journal"
    assert journal.stat().st_size > 16
    return journal


def _name_super_journal(journal: Path, target: Path) -> None:
    """What SQLite's pager appends when a transaction spans attached databases: the
    super-journal's name, its length, a checksum and the journal magic."""
    name = str(target).encode()
    checksum = sum(b - 256 if b > 127 else b for b in name) & 0xFFFFFFFF
    with journal.open("ab") as f:
        f.write(struct.pack(">I", (1 << 30) // 4096 + 1) + name
                + struct.pack(">II", len(name), checksum) + MAGIC)  # fmt: skip


def test_a_planted_super_journal_deletes_nothing(folder: Path, tmp_path: Path) -> None:
    """SQLite rolls a hot journal back when the database opens for writing, then deletes
    the super-journal the journal names, any path (checked: it deleted the canary before
    this fix). Both the readers (which let the writer roll back) and --resume refuse."""
    canary = tmp_path / "canary"
    canary.write_text("root's\n")
    _name_super_journal(_hot_journal(folder), canary)
    for open_it in (lambda: Results(folder), lambda: Store(folder / "results.db")):
        with pytest.raises(PgsweepError) as err:
            open_it()
        assert err.value.exit_code == 2 and "super-journal" in err.value.what
        assert canary.read_text() == "root's\n"
    (folder / "results.db-journal").rename(tmp_path / "aside")  # the way out it names
    with Results(folder) as r:
        assert len(r.trials()) == 4


def test_a_folder_another_user_can_change_is_refused(folder: Path, tmp_path: Path) -> None:
    os.chown(folder, *_theirs())
    with pytest.raises(PgsweepError) as err:
        Results(folder)
    assert err.value.exit_code == 2 and "could be changed by another user" in err.value.what
    assert f"belongs to uid {_theirs()[0]}" in err.value.what and "cp -rP" in str(err.value.fix)
    os.chown(folder, 0, 0)
    folder.parent.chmod(0o777)  # a parent anyone may write to: the folder can be swapped
    with pytest.raises(PgsweepError, match="is writable by other users"):
        Results(folder)
    folder.parent.chmod(0o1777)  # sticky, as /tmp: nobody moves what is not theirs
    Results(folder).close()
    folder.parent.chmod(0o700)
    link = tmp_path / "link"  # a link of theirs on the path: they can point it elsewhere
    link.symlink_to(folder)
    os.chown(link, *_theirs(), follow_symlinks=False)
    with pytest.raises(PgsweepError, match=f"link owned by uid {_theirs()[0]}"):
        Results(link)


@pytest.mark.parametrize("case", ["theirs", "group-writable", "journal-link", "db-link"])
def test_a_file_another_user_can_change_is_refused(folder: Path, case: str) -> None:
    db = folder / "results.db"
    if case == "theirs":
        os.chown(db, *_theirs())
    elif case == "group-writable":
        db.chmod(0o664)
    elif case == "journal-link":
        (folder / "results.db-journal").symlink_to("/etc/shadow")
    else:
        db.rename(folder / "real.db")
        db.symlink_to(folder / "real.db")
    with pytest.raises(PgsweepError) as err:
        Results(folder)
    assert err.value.exit_code == 2 and "pgsweep reads only files" in err.value.what


def test_output_files_are_never_written_through_a_link(tmp_path: Path) -> None:
    canary = tmp_path / "canary"
    canary.write_text("root's\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / "link.csv").symlink_to(canary)  # even a link of one's own is refused
    (out / "hard.csv").hardlink_to(canary)
    with pytest.raises(PgsweepError, match="is a symbolic link"):
        folders.write_output(out / "link.csv", "x", "the export")
    assert folders.write_output(out / "hard.csv", "new\n", "the export") == out / "hard.csv"
    assert canary.read_text() == "root's\n"  # the name was replaced, the file untouched
    assert (out / "hard.csv").read_text() == "new\n"
    assert (out / "hard.csv").stat().st_mode & 0o777 == 0o600
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    sticky.chmod(0o1777)
    planted = sticky / "report.md"  # the server user's link in a sticky folder
    planted.symlink_to(canary)
    os.chown(planted, *_theirs(), follow_symlinks=False)
    theirs = sticky / "junit.xml"
    theirs.write_text("theirs")
    os.chown(theirs, *_theirs())
    for path in (planted, theirs):
        with pytest.raises(PgsweepError) as err:
            folders.write_output(path, "x", "the report")
        assert err.value.exit_code == 2
    assert canary.read_text() == "root's\n" and theirs.read_text() == "theirs"
    folders.write_output(sticky / "mine.md", "ok", "the report")  # /tmp-like is fine
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(PgsweepError, match="is writable by other users"):
        folders.write_output(shared / "x.csv", "x", "the export")
