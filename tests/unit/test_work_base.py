"""PGSWEEP_WORK_BASE is checked once and the resolved directory is used from then on; a
link on it is refused (a link another user owns could be pointed elsewhere between the
check and the use: root would make the work area in their folder)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import SERVER_USER
from pgsweep.errors import PgsweepError
from pgsweep.host import workarea
from pgsweep.host.proc import RunAs


@pytest.fixture
def sticky() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="pgsweep-test-base-", dir="/tmp"))
    d.chmod(0o1777)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="another user's link needs root")
def test_a_link_is_refused_whoever_owns_it(sticky: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = sticky / "real"
    real.mkdir(mode=0o1777)
    theirs = sticky / "theirs"
    os.symlink(real, theirs)
    os.lchown(theirs, RunAs(SERVER_USER).uid, RunAs(SERVER_USER).gid)
    mine = sticky / "mine"
    os.symlink(real, mine)
    for link in (theirs, mine, real / ".." / "mine"):
        monkeypatch.setenv("PGSWEEP_WORK_BASE", str(link))
        with pytest.raises(PgsweepError, match="symbolic link") as err:
            workarea.fallback_base()
        assert err.value.exit_code == 2
    monkeypatch.setenv("PGSWEEP_WORK_BASE", str(real / ".." / "real"))  # no link: fine
    assert workarea.fallback_base() == real


def test_the_base_is_resolved_once_and_kept(sticky: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    base = sticky / "base"
    base.mkdir(mode=0o1777)
    monkeypatch.setenv("PGSWEEP_WORK_BASE", str(base))
    first = workarea.fallback_base()
    assert first == base
    elsewhere = sticky / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    base.rename(sticky / "moved")
    os.symlink(elsewhere, base)  # the name now leads elsewhere
    assert workarea.fallback_base() == first  # what was checked, not what the name says now
