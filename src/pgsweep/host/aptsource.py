"""Debian's source package of PostgreSQL, fetched by apt-get as apt's sandbox user.

apt-get runs with a configuration of its own (APT_CONFIG: none of the machine's
apt.conf.d, so none of its hooks run) and a private sources list and lists folder, and it
downloads as `_apt`, its sandbox user, never as root: the lists folder and a download
folder it may write sit in a root-owned folder it may pass through (0711). What it
downloads is then taken by root without trusting that folder: the orig tarball's name,
size and SHA-256 come from apt's signature-checked index (`--print-uris`, root's lists),
and root copies the file by descriptor (no link followed) into the build cache, hashing
it on the way; a file that differs from the index is refused."""

from __future__ import annotations

import hashlib
import os
import pwd
import re
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path

from . import proc, safefs

DEBIAN_SOURCES = "http://deb.debian.org/debian"
KEYRING = Path("/usr/share/keyrings/debian-archive-keyring.gpg")
SANDBOX_USER = "_apt"
# '<uri>' NAME SIZE SHA256:HEX, one line per file of the source package
_URI = re.compile(r"'[^']+' (\S+\.orig\.tar\.[a-z0-9]+) ([0-9]+) SHA256:([0-9a-f]{64})")


class AptError(Exception):
    def __init__(self, what: str, log: Path | None = None) -> None:
        super().__init__(what)
        self.log = log


@dataclass(frozen=True)
class Fetched:
    tarball: Path  # in the cache, root's
    sha256: str
    version: str


def sandbox_user() -> str:
    """_apt as root (apt drops to it to download); without root, this user."""
    if os.geteuid() != 0:
        return pwd.getpwuid(os.geteuid()).pw_name
    try:
        pwd.getpwnam(SANDBOX_USER)
    except KeyError:
        raise AptError(f"apt's sandbox user {SANDBOX_USER} does not exist") from None
    return SANDBOX_USER


def fetch(package: str, home: Path, scratch: Path) -> Fetched:
    """The orig tarball of `package`, fetched and copied into `home` (root's, empty)."""
    if not KEYRING.exists():
        raise AptError(f"no Debian archive keyring at {KEYRING} to verify {package}")
    user = sandbox_user()
    work = safefs.private_dir(home.parent / f".apt-{secrets.token_hex(4)}", 0o711)
    try:
        conf = _configure(work, user)
        _apt(["apt-get", "-q", "update"], conf, scratch, "apt-update", work)
        listed = _apt(["apt-get", "-q", "source", "--download-only", "--print-uris", package],
                      conf, scratch, "apt-uris", work)  # fmt: skip
        found = _URI.findall(listed)
        if len(found) != 1:
            raise AptError(f"apt's index lists no single orig tarball for {package}")
        name, size, sha = found[0]
        download = work / "download"
        download.mkdir(mode=0o700)
        uid, gid = pwd.getpwnam(user).pw_uid, pwd.getpwnam(user).pw_gid
        os.chown(download, uid, gid)  # apt's sandbox user writes here, and nowhere else
        _apt(["apt-get", "-q", "source", "--download-only", package], conf, scratch,
             "apt-source", download)  # fmt: skip
        tarball = home / name
        got = _copy_checked(download, name, tarball, int(size), {0, uid})
        if got != sha:
            raise AptError(f"{name} as downloaded has SHA-256 {got}, apt's signed index "
                           f"says {sha}")  # fmt: skip
    finally:
        safefs.remove_tree(work)
    version = name.split("_")[1].split(".orig.tar")[0]
    return Fetched(tarball, sha, version)


def _configure(work: Path, user: str) -> Path:
    for d in ("lists/partial", "cache/archives/partial"):
        (work / d).mkdir(mode=0o755, parents=True)
    sources = work / "sources.list"
    safefs.write_file(sources, f"deb-src [signed-by={KEYRING}] {DEBIAN_SOURCES} bookworm main\n",
                      0o644)  # fmt: skip
    conf = work / "apt.conf"
    safefs.write_file(conf, "".join(f'{k} "{v}";\n' for k, v in (
        ("Dir::Etc::Main", "/dev/null"), ("Dir::Etc::Parts", "/nonexistent"),
        ("Dir::Etc::SourceList", sources), ("Dir::Etc::SourceParts", "/nonexistent"),
        ("Dir::State::Lists", work / "lists"), ("Dir::Cache", work / "cache"),
        ("APT::Sandbox::User", user),
    )), 0o644)  # fmt: skip
    return conf


def _apt(argv: list[str], conf: Path, scratch: Path, name: str, cwd: Path) -> str:
    res = proc.run(argv, out=scratch / f"{name}.out", timeout=900, cwd=cwd,
                   env={"APT_CONFIG": str(conf)})  # fmt: skip
    if not res.ok:
        raise AptError(f"apt-get could not fetch the source: {res.last_line()}",
                       scratch / f"{name}.out.err")  # fmt: skip
    if "unsandboxed" in res.stderr:  # apt fell back to root: the download is refused
        raise AptError(f"apt-get downloaded as root, not as {SANDBOX_USER}: "
                       f"{res.last_line()}", scratch / f"{name}.out.err")  # fmt: skip
    return res.stdout


def _copy_checked(folder: Path, name: str, into: Path, size: int, owners: set[int]) -> str:
    """Copy `folder/name` (a folder apt's sandbox user owns) into root's `into` by
    descriptor: no link followed, a regular file of root's or that user's of the size the
    index gives; its SHA-256 as copied."""
    dfd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | safefs.NOFOLLOW)
    try:
        fd = os.open(name, os.O_RDONLY | safefs.NOFOLLOW | os.O_NONBLOCK, dir_fd=dfd)
    except OSError as exc:
        raise AptError(f"{name} was not downloaded as it should be: {exc.strerror}") from None
    finally:
        os.close(dfd)
    h = hashlib.sha256()
    with os.fdopen(fd, "rb") as src:
        st = os.fstat(src.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_uid not in owners or st.st_size != size:
            raise AptError(f"{name} as downloaded is not the {size}-byte file apt's index lists")
        out = safefs.open_output(into)
        with os.fdopen(out, "wb") as dst:
            for chunk in iter(lambda: src.read(1 << 20), b""):
                h.update(chunk)
                dst.write(chunk)
            if dst.tell() != size:
                raise AptError(f"{name} changed size while it was copied")
    os.chmod(into, 0o644)
    return h.hexdigest()

