"""A build copied into another host's cache (host/buildcopy.py): the tree arrives as it
was, its binaries runnable by the server user; a copy changed on the way, a key that is
a path, and an archive reaching out of its folder are refused, leaving no entry."""

from __future__ import annotations

import io
import json
import os
import stat
import tarfile
from dataclasses import asdict
from pathlib import Path

import pytest

from pgsweep.host import buildcopy
from pgsweep.host.builds import Build, BuildSpec

KEY = "0123456789abcdef"


def _build(tmp: Path) -> Build:
    home = tmp / "here" / KEY
    (home / "prefix" / "bin").mkdir(parents=True)
    (home / "prefix" / "lib").mkdir()
    spec = BuildSpec("apt:postgresql-15", None, (), "")
    (home / "meta.json").write_text(json.dumps({
        "key": KEY, "spec": asdict(spec), "source": "15.18", "version": "15.18",
        "configure_line": "", "seconds": 1.0}))  # fmt: skip
    postgres = home / "prefix" / "bin" / "postgres"
    postgres.write_text("#!/bin/sh\necho postgres\n")
    postgres.chmod(0o755)
    (home / "prefix" / "lib" / "libpq.so.5.15").write_text("lib")
    os.symlink("libpq.so.5.15", home / "prefix" / "lib" / "libpq.so.5")
    return Build(KEY, home, spec, "15.18", "15.18", "", 1.0, cached=True)


def test_a_build_arrives_as_it_was_and_a_second_copy_keeps_the_first(tmp_path: Path) -> None:
    build = _build(tmp_path)
    there = tmp_path / "there"
    there.mkdir()
    data = buildcopy.pack(build)
    umask = os.umask(0o077)  # an agent's: its folders must still let the server user in
    try:
        home = buildcopy.unpack(there, KEY, data, buildcopy.digest(data))
    finally:
        os.umask(umask)
    assert stat.S_IMODE((home / "prefix" / "bin").stat().st_mode) == 0o755
    assert home == there / KEY and json.loads((home / "meta.json").read_text())["key"] == KEY
    postgres = home / "prefix" / "bin" / "postgres"
    assert stat.S_IMODE(postgres.stat().st_mode) == 0o755 and postgres.stat().st_uid == 0
    assert stat.S_IMODE(home.stat().st_mode) == 0o755  # the server user reaches it
    assert os.readlink(home / "prefix" / "lib" / "libpq.so.5") == "libpq.so.5.15"
    (home / "meta.json").write_text("kept")  # a second copy: the entry there is kept
    assert buildcopy.unpack(there, KEY, data, buildcopy.digest(data)) == home
    assert (home / "meta.json").read_text() == "kept"
    assert sorted(p.name for p in there.iterdir()) == [KEY]  # no .incoming-* left


def test_a_changed_copy_a_key_that_is_a_path_and_an_escaping_archive_are_refused(
    tmp_path: Path,
) -> None:
    data = buildcopy.pack(_build(tmp_path))
    there = tmp_path / "there"
    there.mkdir()
    with pytest.raises(ValueError, match="arrived changed"):
        buildcopy.unpack(there, KEY, data, buildcopy.digest(data + b"x"))
    for key in ("../etc", "0123456789ABCDEF", "/tmp/x", ""):
        with pytest.raises(ValueError, match="is not a build's key"):
            buildcopy.unpack(there, key, data, buildcopy.digest(data))
    hostile = io.BytesIO()
    with tarfile.open(fileobj=hostile, mode="w:gz") as tar:
        link = tarfile.TarInfo("prefix/bin/postgres")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/shadow"
        tar.addfile(link)
    evil = hostile.getvalue()
    with pytest.raises(tarfile.FilterError):
        buildcopy.unpack(there, KEY, evil, buildcopy.digest(evil))
    assert list(there.iterdir()) == []  # nothing half made is left


def test_the_agents_side_takes_parts_until_the_digest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PGSWEEP_CACHE_DIR", str(tmp_path / "cache"))
    data = buildcopy.pack(_build(tmp_path))
    incoming = buildcopy.Incoming()
    first = incoming.take(KEY, 0, b"", None)
    assert first == {"home": str(tmp_path / "cache" / KEY), "have": False}
    half = len(data) // 2
    assert incoming.take(KEY, 0, data[:half], None)["have"] is False
    done = incoming.take(KEY, 0, data[half:], buildcopy.digest(data))
    assert done["have"] is True and (tmp_path / "cache" / KEY / "meta.json").is_file()
    assert len(incoming.held) == 1  # the entry is locked while the agent lives
    again = buildcopy.Incoming()  # the next run: nothing to copy, the entry locked too
    assert again.take(KEY, 0, b"", None)["have"] is True and len(again.held) == 1
    from pgsweep.host.builds import locked

    with locked(tmp_path / "cache", KEY, wait=False) as alone:
        assert not alone  # what `pgsweep builds --prune` takes: refused while in use
