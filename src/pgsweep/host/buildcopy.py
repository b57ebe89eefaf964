"""A build compiled on this machine, copied into another host's build cache: a server on
another host runs the builds made here ([build] beside [roles] server), under the same
key in that host's own cache (host/builds.py), so a later run there finds it.

The copy is a gzip'd tar of the build's prefix/ and meta.json, checked by its SHA-256,
its members checked (`checked`), and unpacked with tarfile's "data" filter (no absolute
paths, no links out of the tree, no devices, no set-id bits, owned by root) into a fresh
folder in the cache, renamed to its key once it is that build: a copy cut short leaves
no entry a run could take for a build."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
import shutil
import tarfile
import tempfile
from pathlib import Path

from .builds import Build, acquire, check_reachable, lookup, open_cache

CHUNK = 16 << 20  # bytes per message to the agent (base64 in a frame of at most 64 MiB)
MOST = 1 << 30  # a build's packed tree, at most: anything larger is not a build of ours
UNPACKED = 4 << 30  # and unpacked (the suite's -O0 build: 34 MiB)
KEY = re.compile(r"[0-9a-f]{16}")  # builds.build_key's


def pack(build: Build) -> bytes:
    """The build's tree as the copy carries it."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=1) as tar:
        for name in ("meta.json", "prefix"):
            tar.add(build.home / name, arcname=name)
    return buf.getvalue()


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def entry(root: Path, key: str) -> Path:
    """The cache entry of `key` under `root`; ValueError for a key no build has."""
    if not KEY.fullmatch(key):
        raise ValueError(f"{key!r} is not a build's key")
    return root / key


def unpack(root: Path, key: str, data: bytes, sha256: str) -> Path:
    """The copy made the cache entry of `key` (kept when one is there already)."""
    home = entry(root, key)
    if digest(data) != sha256:
        raise ValueError(f"the copy of build {key} arrived changed (SHA-256)")
    if (home / "meta.json").is_file():
        return home
    incoming = Path(tempfile.mkdtemp(prefix=f".incoming-{key}-", dir=root))
    umask = os.umask(0o022)  # the data filter leaves folders at mkdir's mode: 0755 here
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            members = checked(tar)
            tar.extractall(incoming, members=members, filter="data")
        _is_build(incoming, key)  # before it can be taken for one
        os.chmod(incoming, 0o755)  # the server user runs its binaries
        with contextlib.suppress(FileExistsError, OSError):
            os.rename(incoming, home)  # another run's copy may have landed first
    finally:
        os.umask(umask)
        if incoming.exists():
            shutil.rmtree(incoming)
    if not (home / "meta.json").is_file():
        raise ValueError(f"the copy of build {key} could not be put in {root}")
    return home


def checked(tar: tarfile.TarFile) -> list[tarfile.TarInfo]:
    """The archive's members, each a folder, a regular file, a link within the tree or a
    hard link to a file before it (PostgreSQL's time zones are hard links), none reached
    through a link, at most UNPACKED bytes in all; ValueError otherwise. The
    "data" filter alone is not trusted: Pythons before 3.11.13 let chained links and long
    paths past it (CVE-2025-4517, CVE-2025-4138)."""
    members, links, files, total = tar.getmembers(), set(), set(), 0
    for m in members:
        parts = Path(m.name).parts
        if m.name.startswith("/") or ".." in parts or not parts or len(m.name) > 1024:
            raise ValueError(f"the copy holds {m.name!r}, outside its tree")
        if m.islnk() and str(Path(m.linkname)) not in files:
            raise ValueError(f"the copy's hard link {m.name!r} is not to a file of its own")
        if not (m.isdir() or m.isreg() or m.issym() or m.islnk()):
            raise ValueError(f"the copy holds {m.name!r}, neither a file, a folder nor a link")
        if any(str(Path(*parts[:i])) in links for i in range(1, len(parts))):
            raise ValueError(f"the copy reaches {m.name!r} through a link")
        if m.issym():
            target = os.path.normpath(os.path.join(os.path.dirname(m.name), m.linkname))
            if m.linkname.startswith("/") or target.startswith(".."):
                raise ValueError(f"the copy's link {m.name!r} points out of its tree")
            links.add(str(Path(*parts)))
        elif m.isreg():
            files.add(str(Path(*parts)))
        total += m.size
    if total > UNPACKED:
        raise ValueError(f"the copy unpacks to more than {UNPACKED >> 30} GiB")
    return members


def _is_build(folder: Path, key: str) -> None:
    """The unpacked tree is the build `key`: its meta.json says so, its postgres is there."""
    try:
        meta = json.loads((folder / "meta.json").read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"the copy of build {key} has no meta.json pgsweep reads: {exc}") from None
    if not isinstance(meta, dict) or meta.get("key") != key or \
            not (folder / "prefix" / "bin" / "postgres").is_file():
        raise ValueError(f"the copy of build {key} is not that build")


class Incoming:
    """An agent's side of copies: each build's parts as they arrive, until the last; then
    a shared lock on the entry, held until the agent exits (`pgsweep builds --prune`
    there leaves a build a run uses, as with a build made there)."""

    def __init__(self) -> None:
        self.parts: dict[str, bytearray] = {}  # one copy under way at a time
        self.held: dict[str, int] = {}  # key -> the descriptor of its shared lock

    def take(self, key: str, uid: int, data: bytes, sha256: str | None) -> dict[str, object]:
        """A first call (no data, no digest) opens this host's cache (made if need be,
        the server user `uid` must reach it) and says whether `key` is in it; each next
        adds a part; the one with the digest unpacks them all."""
        root = open_cache(create=True)
        assert root is not None
        home = entry(root, key)
        if not data and sha256 is None:
            check_reachable(root, uid)
            if lookup(root, key) is not None:
                self._hold(root, key, b"", "")
                return {"home": str(home), "have": True}
            self.parts = {key: bytearray()}  # a copy begun before and never ended: dropped
            return {"home": str(home), "have": False}
        got = self.parts.get(key)
        if got is None:
            raise ValueError(f"a part of build {key} came before its copy began")
        got += data
        if len(got) > MOST:
            del self.parts[key]
            raise ValueError(f"the copy of build {key} is over {MOST >> 20} MiB")
        if sha256 is None:
            return {"home": str(home), "have": False}
        del self.parts[key]
        self._hold(root, key, bytes(got), sha256)
        return {"home": str(home), "have": True}

    def _hold(self, root: Path, key: str, data: bytes, sha256: str) -> None:
        """The entry, unpacked from `data` unless there (another run's copy may be landing:
        its lock is waited for), under a shared lock kept open."""
        def made() -> Build:
            unpack(root, key, data, sha256)
            build = lookup(root, key)
            if build is None:
                raise ValueError(f"the copy of build {key} is not a build of this host's")
            return build

        if key in self.held:
            return
        _, fd, _ = acquire(root, key, made)
        self.held[key] = fd
