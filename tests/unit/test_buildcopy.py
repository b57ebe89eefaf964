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
    os.link(home / "prefix" / "lib" / "libpq.so.5.15", home / "prefix" / "lib" / "zone")
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
    zone = home / "prefix" / "lib" / "zone"  # a hard link (as PostgreSQL's time zones are)
    assert zone.stat().st_ino == (home / "prefix" / "lib" / "libpq.so.5.15").stat().st_ino
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
    for members, said in (
        ([_link("prefix/bin/postgres", "/etc/shadow")], "points out of its tree"),
        ([_link("prefix/lib", "../prefix"), _file("prefix/lib/x")], "through a link"),
        ([_link("a", "."), _link("a/b", "../../etc")], "through a link"),  # chained
        ([_file("../escape")], "outside its tree"),
        ([_hard("prefix/bin/postgres", "/etc/shadow")], "not to a file of its own"),
        ([_file("prefix/x"), _hard("prefix/y", "prefix/x/../../../etc/shadow")],
         "not to a file of its own"),
        ([_fifo("prefix/bin/postgres")], "neither a file"),
    ):
        evil = _archive(members)
        with pytest.raises(ValueError, match=said):
            buildcopy.unpack(there, KEY, evil, buildcopy.digest(evil))
    # a tree that is not the build its key names is never put in place
    other = _archive([_file("meta.json", b'{"key": "fedcba9876543210"}'),
                      _file("prefix/bin/postgres")])  # fmt: skip
    with pytest.raises(ValueError, match="is not that build"):
        buildcopy.unpack(there, KEY, other, buildcopy.digest(other))
    assert list(there.iterdir()) == []  # nothing half made is left


def _link(name: str, target: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = tarfile.SYMTYPE, target
    return info


def _fifo(name: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = tarfile.FIFOTYPE
    return info


def _hard(name: str, target: str) -> tarfile.TarInfo:
    info = _link(name, target)
    info.type = tarfile.LNKTYPE
    return info


def _file(name: str, data: bytes = b"x") -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    return info, data


def _archive(members: list[tarfile.TarInfo | tuple[tarfile.TarInfo, bytes]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for m in members:
            info, data = m if isinstance(m, tuple) else (m, b"")
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
    return buf.getvalue()


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
