"""Debian's source package is fetched by apt-get as its sandbox user (_apt), never as
root, and taken into the cache only if it is the file apt's signed index lists: a real
fetch from deb.debian.org (a package registry; about 25 MB), then a download folder
tampered with as _apt (a different file, a link to a root-only file) refused."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import pytest

from pgsweep.host import aptsource, safefs

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="apt's sandbox needs root")


def test_apt_downloads_as_its_sandbox_user_and_the_index_pins_the_file(
    open_dir: Path, tmp_path: Path
) -> None:
    cache = open_dir / "sources"  # as the build cache: a folder others may pass through
    cache.mkdir(mode=0o755)
    home = safefs.private_dir(cache / "postgresql-15", 0o755)
    scratch = tmp_path / "out"
    scratch.mkdir()
    try:
        got = aptsource.fetch("postgresql-15", home, scratch)
    except aptsource.AptError as exc:
        if "Temporary failure resolving" in str(exc) or "Could not resolve" in str(exc):
            pytest.skip(f"no network to deb.debian.org: {exc}")
        raise
    assert got.tarball.parent == home and got.version.startswith("15.")
    data = got.tarball.read_bytes()
    assert hashlib.sha256(data).hexdigest() == got.sha256
    st = got.tarball.stat()
    assert st.st_uid == 0 and oct(st.st_mode & 0o777) == "0o644"
    err = (scratch / "apt-source.out.err").read_text()
    assert "unsandboxed" not in err  # _apt downloaded it, not root
    assert list(cache.iterdir()) == [home]  # apt's own folders are gone


def test_a_tampered_download_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "download"
    folder.mkdir(mode=0o700)
    apt = aptsource.sandbox_user()
    uid = int(subprocess.run(["id", "-u", apt], capture_output=True, text=True).stdout)
    os.chown(folder, uid, -1)
    good = b"the real tarball"
    (folder / "x.orig.tar.gz").write_bytes(b"a tampered one!!")  # same size, other bytes
    into = tmp_path / "copy.tar.gz"
    got = aptsource._copy_checked(folder, "x.orig.tar.gz", into, len(good), {0, uid})
    assert got != hashlib.sha256(good).hexdigest()  # fetch() refuses on this difference
    secret = tmp_path / "secret"
    secret.write_bytes(b"root only")
    secret.chmod(0o600)
    (folder / "y.orig.tar.gz").symlink_to(secret)
    with pytest.raises(aptsource.AptError, match="was not downloaded as it should be"):
        aptsource._copy_checked(folder, "y.orig.tar.gz", tmp_path / "y", 9, {0, uid})
    (folder / "z.orig.tar.gz").write_bytes(b"short")
    with pytest.raises(aptsource.AptError, match="is not the 9-byte file"):
        aptsource._copy_checked(folder, "z.orig.tar.gz", tmp_path / "z", 9, {0, uid})
