"""Files and directories when root works next to trees an unprivileged user owns.

The server user (or code the server runs) can plant a symlink or a hard link in any
directory it owns, so root never acts by path inside one. The layout that makes this
hold: every directory pgsweep makes is root-owned (0700, or 0711 where the server must
pass through to reach its leaves), and the server user owns only leaves it must write
(PGDATA, its WAL directory, its socket directory, its log and transaction-log
directories), which root creates here with `leaf_dir`. Root then:

- writes only in root-owned directories, and even there with O_NOFOLLOW and O_EXCL
  temporary files renamed over the target (`write_file`);
- reads from a server-owned leaf only through `read_owned`: no link is followed, the file
  must be a regular file owned by the server user (a hard link to a root-only file fails
  that check), and at most `limit` bytes are read;
- deletes with shutil.rmtree, which on Linux works through directory file descriptors and
  never follows a link (checked at import);
- mounts only on a directory `check_mountpoint` found to be a real, root-owned directory.
"""

from __future__ import annotations

import os
import secrets
import shutil
import stat
from pathlib import Path

from ..errors import PgsweepError, internal

assert shutil.rmtree.avoids_symlink_attacks, "this platform's rmtree can follow symlinks"

NOFOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC


class UnsafePath(Exception):
    """A path is not what pgsweep made or expects (a planted link, another owner)."""


def owner_ids(user: object | None) -> tuple[int, int]:
    """(uid, gid) of the server user (a RunAs), or of this process when it runs the server."""
    if user is None:
        return os.geteuid(), os.getegid()
    return int(user.uid), int(user.gid)  # type: ignore[attr-defined]


def private_dir(path: Path, mode: int = 0o700) -> Path:
    """A new root-owned directory. It must not exist yet: pgsweep never adopts a directory
    it did not make in this run."""
    os.mkdir(path, 0o700)
    _check_own_dir(path)
    os.chmod(path, mode, follow_symlinks=False)
    return path


def leaf_dir(path: Path, user: object | None, mode: int = 0o700) -> Path:
    """A new directory for the server user, made in a root-owned parent: created
    exclusively, opened without following links, then handed over by file descriptor."""
    os.mkdir(path, 0o700)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | NOFOLLOW)
    try:
        st = os.fstat(fd)
        if st.st_uid != os.geteuid():
            raise UnsafePath(f"{path} changed owner while it was made")
        uid, gid = owner_ids(user)
        if (uid, gid) != (st.st_uid, st.st_gid):
            os.fchown(fd, uid, gid)
        os.fchmod(fd, mode)
    finally:
        os.close(fd)
    return path


def _check_own_dir(path: Path) -> os.stat_result:
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
        raise UnsafePath(f"{path} is not a directory owned by this process's user")
    return st


def write_file(
    path: Path, data: bytes | str, mode: int = 0o600, owner: tuple[int, int] | None = None
) -> None:
    """Replace `path` atomically: a temporary file made exclusively (never through a link),
    owned and moded by descriptor, renamed over the target (a link there is replaced, not
    followed). For files in directories root owns; `owner` hands the file to another user."""
    raw = data.encode() if isinstance(data, str) else data
    parent = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        tmp = f".{path.name}.{secrets.token_hex(6)}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW, 0o600, dir_fd=parent)
        try:
            with os.fdopen(fd, "wb", closefd=False) as f:
                f.write(raw)
            if owner is not None:
                os.fchown(fd, *owner)
            os.fchmod(fd, mode)
        finally:
            os.close(fd)
        os.rename(tmp, path.name, src_dir_fd=parent, dst_dir_fd=parent)
    finally:
        os.close(parent)


def open_output(path: Path) -> int:
    """A file descriptor for command output in a root-owned directory: a link planted at
    the name is refused, not followed."""
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | NOFOLLOW, 0o600)


def read_owned(path: Path, uid: int, limit: int = 1 << 20, tail: bool = False) -> bytes:
    """Read a file in a tree the server user owns: a regular file owned by `uid`, opened
    without following a link; at most `limit` bytes (the last ones with `tail`).
    UnsafePath when it is anything else (a planted link, a hard link to another user's
    file, a device)."""
    try:
        fd = os.open(path, os.O_RDONLY | NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno == 40:  # ELOOP: the name is a symlink
            raise UnsafePath(f"{path} is a symbolic link; pgsweep does not follow it") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != uid:
            raise UnsafePath(f"{path} is not a regular file owned by uid {uid}")
        if tail and st.st_size > limit:
            os.lseek(fd, st.st_size - limit, os.SEEK_SET)
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read(limit)
    finally:
        os.close(fd)


def open_owned_in(directory: Path, name: str, uid: int) -> int:
    """A read-only descriptor for `directory/name`, a regular file owned by `uid`, where
    `directory` itself may be owned by the server user: the directory is opened without
    following a link and the file relative to it, also without following one."""
    dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | NOFOLLOW)
    try:
        fd = os.open(name, os.O_RDONLY | NOFOLLOW | os.O_NONBLOCK, dir_fd=dfd)
    except OSError as exc:
        os.close(dfd)
        if exc.errno == 40:
            raise UnsafePath(f"{directory / name} is a symbolic link") from None
        raise
    os.close(dfd)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != uid:
        os.close(fd)
        raise UnsafePath(f"{directory / name} is not a regular file owned by uid {uid}")
    return fd


def list_owned(directory: Path) -> list[str]:
    """Names in a directory that may be owned by the server user, listed through a
    descriptor opened without following a link."""
    dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | NOFOLLOW)
    try:
        return sorted(os.listdir(dfd))
    finally:
        os.close(dfd)


def check_mountpoint(path: Path) -> None:
    """Right before mounting: a real directory (not a link) owned by root, in a directory
    only root can change. Anything else means someone swapped it: refuse."""
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
        raise UnsafePath(f"mount point {path} is not a directory pgsweep owns")
    parent = os.lstat(path.parent)
    if parent.st_uid != os.geteuid() or parent.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise UnsafePath(f"mount point {path} sits in a directory others can change")


def untrusted_component(path: Path) -> str | None:
    """Why another user could swap a part of `path` (resolved), or None: every directory
    on the way must be owned by root, this user (or the user who ran it through sudo) and
    not writable by others, unless it is sticky (/tmp), where others cannot move what they
    do not own."""
    trusted = {0, os.geteuid()}
    if os.environ.get("SUDO_UID", "").isdigit():  # the user who ran pgsweep through sudo
        trusted.add(int(os.environ["SUDO_UID"]))
    real = Path(os.path.realpath(path))
    parts = [real, *real.parents]
    for i, part in enumerate(parts):
        try:
            st = os.lstat(part)
        except FileNotFoundError:
            continue
        if st.st_uid not in trusted:
            return f"{part} belongs to uid {st.st_uid}"
        writable = st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
        if writable and not (st.st_mode & stat.S_ISVTX and i > 0):
            return f"{part} is writable by other users"
    return None


def trusted_dir(path: Path, what: str, where: str | None = None) -> Path:
    """The resolved `path`, refused (exit 2) when another user could swap a part of it
    for a link: root writes there."""
    why = untrusted_component(path)
    if why:
        raise PgsweepError(
            f"{what} {path} is not safe for root to write in: {why}",
            where=where,
            fix="choose a folder owned by you (or root) that other users cannot write to",
        )
    return Path(os.path.realpath(path))


def remove_tree(path: Path) -> None:
    """Delete a tree without following links (fd-based rmtree); a missing path is fine."""
    try:
        shutil.rmtree(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise internal(f"cannot remove {path}: {exc}") from exc
