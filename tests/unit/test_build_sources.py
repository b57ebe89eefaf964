"""The build cache and build sources against another user's links and folders, with real
git, tar and files (nothing is compiled here; tests/integration/test_build.py compiles):
the cache refuses a folder another user could change or a link they planted; a tarball
with a link member cannot make root write outside the build; git runs as the work tree's
owner (git refuses root in another user's repository), and the work tree's uncommitted
changes are part of what is built and of its key."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import SERVER_USER
from pgsweep.errors import PgsweepError
from pgsweep.host import builds, sources

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="another user's files need root")


def _uid() -> tuple[int, int]:
    pw = pwd.getpwnam(SERVER_USER)
    return pw.pw_uid, pw.pw_gid


def _as_server(argv: list[str], cwd: Path) -> None:
    subprocess.run(["runuser", "-u", SERVER_USER, "--", *argv], cwd=cwd, check=True,
                   capture_output=True, env={"PATH": os.environ["PATH"], "HOME": str(cwd)})  # fmt: skip


@pytest.fixture
def sticky() -> Iterator[Path]:
    """A fresh folder under /tmp: sticky, where any user may plant a name."""
    d = Path(tempfile.mkdtemp(prefix="pgsweep-test-cache-", dir="/tmp"))
    d.chmod(0o1777)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_cache_refuses_a_link_another_user_planted(sticky: Path, monkeypatch: pytest.MonkeyPatch,
                                                   tmp_path: Path) -> None:  # fmt: skip
    target = tmp_path / "roots-own"
    target.mkdir()
    link = sticky / "cache"
    os.symlink(target, link)
    os.lchown(link, *_uid())
    monkeypatch.setenv("PGSWEEP_CACHE_DIR", str(link))
    with pytest.raises(PgsweepError, match="is a link owned by uid"):
        builds.open_cache()
    assert list(target.iterdir()) == []


def test_cache_refuses_a_folder_of_another_user_or_open_to_others(
    sticky: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    theirs = sticky / "theirs"
    theirs.mkdir()
    os.chown(theirs, *_uid())
    monkeypatch.setenv("PGSWEEP_CACHE_DIR", str(theirs))
    with pytest.raises(PgsweepError, match="belongs to uid"):
        builds.open_cache()
    opened = sticky / "open"
    opened.mkdir()
    opened.chmod(0o777)
    monkeypatch.setenv("PGSWEEP_CACHE_DIR", str(opened))
    with pytest.raises(PgsweepError, match="writable by other users"):
        builds.open_cache()
    fresh = sticky / "fresh" / "builds"
    monkeypatch.setenv("PGSWEEP_CACHE_DIR", str(fresh))
    assert builds.open_cache(create=False) is None  # plan and `builds` make nothing
    assert not fresh.parent.exists()
    assert builds.open_cache() == fresh and oct(fresh.stat().st_mode & 0o777) == "0o755"


def test_a_cache_entry_not_ours_is_not_a_build(tmp_path: Path) -> None:
    entry = tmp_path / "0123456789abcdef"
    (entry / "prefix" / "bin").mkdir(parents=True)
    meta = {"key": entry.name, "spec": {"source": "apt:postgresql-15", "ref": None,
            "configure": [], "cflags": ""}, "source": "s", "version": "v",
            "configure_line": "", "seconds": 1.0}  # fmt: skip
    (entry / "meta.json").write_text(__import__("json").dumps(meta))
    assert builds.lookup(tmp_path, entry.name) is not None
    os.chown(entry / "meta.json", *_uid())
    assert builds.lookup(tmp_path, entry.name) is None


def test_a_tarball_link_member_cannot_make_root_write_outside(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    evil = tmp_path / "postgresql-99.0.tar.gz"
    with tarfile.open(evil, "w:gz") as tar:
        link = tarfile.TarInfo("postgresql-99.0/escape")
        link.type, link.linkname = tarfile.SYMTYPE, str(outside)
        tar.addfile(link)
        for name in ("postgresql-99.0/configure", "postgresql-99.0/escape/planted"):
            data = b"#!/bin/sh\n"
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, __import__("io").BytesIO(data))
    into, scratch = tmp_path / "src", tmp_path / "out"
    into.mkdir()
    scratch.mkdir()
    pinned = sources.resolve(str(evil), None, tmp_path, scratch)
    try:
        sources.unpack(pinned, into, scratch)
    except sources.SourceError:
        pass  # tar refusing the member is fine too; writing through the link is not
    assert list(outside.iterdir()) == []


def test_git_runs_as_the_tree_owner_and_pins_uncommitted_changes(
    tmp_path: Path, open_dir: Path
) -> None:
    home = open_dir / "home"  # the server user must reach it
    home.mkdir()
    os.chown(home, *_uid())
    tree = home / "postgres"
    tree.mkdir()
    os.chown(tree, *_uid())
    (tree / "configure").write_text("#!/bin/sh\necho one\n")
    os.chown(tree / "configure", *_uid())
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    _as_server([*git, "init", "-q"], tree)
    _as_server([*git, "add", "configure"], tree)
    _as_server([*git, "commit", "-qm", "one"], tree)
    _as_server([*git, "tag", "v1"], tree)
    # root's own git refuses another user's repository; pgsweep's runs as its owner
    refused = subprocess.run(["git", "-C", str(tree), "rev-parse", "HEAD"], capture_output=True)
    assert refused.returncode != 0 and b"dubious ownership" in refused.stderr
    scratch = tmp_path / "out"
    scratch.mkdir()
    clean = sources.resolve(str(tree), None, tmp_path, scratch)
    tagged = sources.resolve(str(tree), "v1", tmp_path, scratch)
    assert clean.commit == tagged.commit and len(clean.commit) == 40 and not clean.diff
    (tree / "configure").write_text("#!/bin/sh\necho two\n")
    changed = sources.resolve(str(tree), None, tmp_path, scratch)
    assert changed.commit == clean.commit and changed.digest != clean.digest
    assert sources.resolve(str(tree), "v1", tmp_path, scratch).digest == tagged.digest
    into = tmp_path / "src"
    into.mkdir()
    built = sources.unpack(changed, into, scratch)
    assert (built / "configure").read_text() == "#!/bin/sh\necho two\n"  # what is built
    with pytest.raises(sources.SourceError, match="rev-parse"):
        sources.resolve(str(tree), "no-such-tag", tmp_path, scratch)


def test_a_source_in_another_users_folder_is_refused(tmp_path: Path) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, *_uid())
    (theirs / "postgresql-15.5.tar.gz").write_bytes(b"")
    why = sources.check_path(str(theirs / "postgresql-15.5.tar.gz"))
    assert why is not None and "another user could swap it" in why
