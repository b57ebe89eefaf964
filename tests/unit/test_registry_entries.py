"""Registry entries are held to the journal's rules before `cleanup` acts on them: the
run's name matched whole (no trailing newline), a work area named as pgsweep names them,
root's, whose marker holds that run's name, and a server user that is not root. A
refused entry is kept and reported; its folder and the processes using it are left
alone. A good entry is cleaned up (the control)."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import SERVER_USER
from pgsweep.host import journal, workarea
from pgsweep.host.local import LOCAL
from pgsweep.host.proc import RunAs

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="root's registry")


@pytest.fixture
def base() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="pgsweep-test-reg-", dir="/var/tmp"))
    yield d
    subprocess.run(["rm", "-rf", "--one-file-system", str(d)], check=False)


def _area(base: Path, name: str, marker: str) -> Path:
    d = base / name
    d.mkdir(mode=0o711)
    (d / workarea.MARKER).write_text(marker)
    (d / "keep").write_text("data")
    return d


GONE = "/tmp/pgsweep-test-reg-gone"  # a socket folder already removed


def _entry(state: Path, run: str, workdir: Path, uid: int, socket: str = GONE,
           **more: str) -> None:  # fmt: skip
    state.mkdir(mode=0o700, exist_ok=True)
    body = {"workdir": str(workdir), "socket_root": socket, "results": "/x", "run": run.strip(),
            "server_uid": str(uid), **more}  # fmt: skip
    (state / f"{run}.json").write_text(json.dumps(body))


def test_refused_entries_are_kept_and_their_folders_left_alone(
    base: Path, state_dir: Path
) -> None:
    uid = RunAs(SERVER_USER).uid
    other = _area(base, "pgsweep-work-a-1", "999999-1")  # another run's marker
    _entry(state_dir, "123-456", other, uid)
    rooted = _area(base, "pgsweep-work-b-1", "123-457")
    _entry(state_dir, "123-457", rooted, 0)  # "the server user" is root
    sleeper = subprocess.Popen(["sleep", "60"], cwd=rooted)  # root's, using that folder
    named = _area(base, "not-a-work-area", "123-458")
    _entry(state_dir, "123-458", named, uid)
    newline = _area(base, "pgsweep-work-c-1", "123-459\n")
    _entry(state_dir, "123-459\n", newline, uid)
    good = _area(base, "pgsweep-work-d-1", "123-460")
    _entry(state_dir, "123-460", good, uid)
    elsewhere = base / "someone-elses"  # "opened": cleanup would make it private (0700)
    elsewhere.mkdir(mode=0o755)
    opened = _area(base, "pgsweep-work-e-1", "123-461")
    _entry(state_dir, "123-461", opened, uid, results=str(elsewhere), opened="True")
    try:
        done, failed = journal.recover_stale(LOCAL)
        assert sleeper.poll() is None  # never killed
    finally:
        sleeper.kill()
        sleeper.wait()
    for d in (other, rooted, named, newline, opened):
        assert (d / "keep").read_text() == "data", d
    assert oct(elsewhere.stat().st_mode & 0o777) == "0o755"
    assert not good.exists() and f"removed {good}" in done, (done, failed)  # the control
    text = "\n".join(failed)
    assert "run 123-456" in text and "marker is not this run's" in text
    assert "run 123-457" in text and "uid 0" in text
    assert "run 123-458" in text and "not named as pgsweep names" in text
    assert "run 123-461" in text and "is not the one its work area" in text
    assert (state_dir / "123-456.json").exists() and not (state_dir / "123-460.json").exists()


def test_journal_names_are_matched_whole() -> None:
    assert journal.allowed("/proc/sys/vm/swappiness")
    assert not journal.allowed("/proc/sys/vm/swappiness\n")
    assert not journal.allowed("/sys/kernel/mm/transparent_hugepage/enabled\n")
