"""A build compiled on this machine, copied into another host's build cache: a server on
another host runs the builds made here ([build] beside [roles] server), under the same
key in that host's own cache (host/builds.py), so a later run there finds it.

The copy is a gzip'd tar of the build's prefix/ and meta.json, checked by its SHA-256
and unpacked with tarfile's "data" filter (no absolute paths, no links out of the tree,
no devices, no set-id bits, owned by root) into a fresh folder in the cache, renamed to
its key once complete: a copy cut short leaves no entry a run could take for a build."""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import re
import shutil
import tarfile
import tempfile
from pathlib import Path

from .builds import Build

CHUNK = 16 << 20  # bytes per message to the agent (base64 in a frame of at most 64 MiB)
MOST = 1 << 30  # a build's packed tree, at most: anything larger is not a build of ours
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
            tar.extractall(incoming, filter="data")
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


class Incoming:
    """An agent's side of copies: each build's parts as they arrive, until the last; then
    a shared lock on the entry, held until the agent exits (`pgsweep builds --prune`
    there leaves a build a run uses, as with a build made there)."""

    def __init__(self) -> None:
        self.parts: dict[str, bytearray] = {}
        self.held: list[int] = []

    def take(self, key: str, uid: int, data: bytes, sha256: str | None) -> dict[str, object]:
        """A first call (no data, no digest) opens this host's cache (made if need be,
        the server user `uid` must reach it) and says whether `key` is in it; each next
        adds a part; the one with the digest unpacks them all."""
        from .builds import check_reachable, lookup, open_cache

        root = open_cache(create=True)
        assert root is not None
        home = entry(root, key)
        if not data and sha256 is None:
            check_reachable(root, uid)
            if lookup(root, key) is not None:
                self._hold(root, key, b"", "")
                return {"home": str(home), "have": True}
            self.parts[key] = bytearray()
            return {"home": str(home), "have": False}
        got = self.parts[key]
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
        from .builds import acquire, lookup

        def made() -> Build:
            unpack(root, key, data, sha256)
            build = lookup(root, key)
            if build is None:
                raise ValueError(f"the copy of build {key} is not a build of this host's")
            return build

        _, fd, _ = acquire(root, key, made)
        self.held.append(fd)
