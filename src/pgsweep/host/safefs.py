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
- deletes with `remove_tree`, which works through directory descriptors, never follows a
  link, and takes each directory from its owner before emptying it;
- mounts only on a directory `check_mountpoint` found to be a real, root-owned directory.
"""

from __future__ import annotations

import os
import secrets
import shutil
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
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


def own_root(point: Path) -> None:
    """A filesystem pgsweep just mounted: its root must be root's (mkfs options could say
    otherwise), then made 0711 through a descriptor."""
    fd = os.open(point, os.O_RDONLY | os.O_DIRECTORY | NOFOLLOW)
    try:
        st = os.fstat(fd)
        if st.st_uid != os.geteuid():
            raise UnsafePath(f"the new filesystem's root {point} belongs to uid {st.st_uid}")
        os.fchmod(fd, 0o711)
    finally:
        os.close(fd)


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


def untrusted_link(path: Path) -> str | None:
    """A symbolic link on `path` (as written, before resolving) that another user owns: it
    could be pointed elsewhere between a check and a use."""
    trusted = {0, os.geteuid()}
    if os.environ.get("SUDO_UID", "").isdigit():
        trusted.add(int(os.environ["SUDO_UID"]))
    current = Path("/")
    for part in path.absolute().parts[1:]:
        current = current / part
        try:
            st = os.lstat(current)
        except FileNotFoundError:
            return None
        if stat.S_ISLNK(st.st_mode):
            if st.st_uid not in trusted:
                return f"{current} is a link owned by uid {st.st_uid}"
            current = Path(os.path.realpath(current))
    return None


def trusted_target(path: Path, what: str) -> Path:
    """Where root will write `path` (which may not exist yet), resolved once: its nearest
    existing ancestor must be safe (`untrusted_link`, `untrusted_component`), and the
    caller uses the returned path from then on, never the one written (a link on it
    could be pointed elsewhere later)."""
    probe, rest = path.absolute(), list[str]()
    while not os.path.lexists(probe) and probe != probe.parent:
        rest.insert(0, probe.name)
        probe = probe.parent
    why = untrusted_link(probe) or untrusted_component(probe)
    if why:
        raise PgsweepError(
            f"{what} {path} is not safe for root to write in: {why}",
            fix="choose a folder owned by you (or root) that other users cannot write to",
        )
    return Path(os.path.realpath(probe)).joinpath(*rest)


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
    """Delete a tree without following links and without racing its owner; a missing path
    is fine. Each directory is opened by descriptor (never through a link), made ours (root's)
    and 0700 before it is emptied, so a server-user process still running cannot refill
    it while it is being deleted (rmtree alone loses that race: "Directory not empty").
    The walk keeps one descriptor per level and no recursion; a tree deeper than
    MAX_DEPTH (the server user can build one in its leaves) is finished by GNU rm, which
    walks without recursion and never follows links either. A directory on another
    filesystem (a mount left inside) is an error, never emptied."""
    try:
        top = os.open(path, os.O_RDONLY | os.O_DIRECTORY | NOFOLLOW)
    except FileNotFoundError:
        return
    except OSError:  # a file or a link: remove the name itself
        _unlink(path)
        return
    try:
        deep = _empty_tree(top, path)
    except OSError as exc:
        raise internal(f"cannot remove {path}: {exc}") from exc
    finally:
        os.close(top)
    if deep:
        _rm_rf(path)
        return
    _remove_name(os.rmdir, path)


MAX_DEPTH = 256
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | NOFOLLOW


def _lock(fd: int, dev: int, where: Path) -> None:
    st = os.fstat(fd)
    if st.st_dev != dev:
        raise OSError(f"{where} is on another filesystem (a mount inside the tree)")
    os.fchown(fd, os.geteuid(), os.getegid())  # root's as root; ours (a no-op) otherwise
    os.fchmod(fd, 0o700)


@dataclass
class _Level:
    fd: int
    name: str
    left: set[str] = field(default_factory=set)  # entries kept for rm (too deep below)


def _empty_tree(top: int, path: Path) -> bool:
    """Empty the directory open as `top`; True if a branch went deeper than MAX_DEPTH
    (what is left there is for rm)."""
    dev = os.fstat(top).st_dev
    _lock(top, dev, path)
    stack = [_Level(top, "")]
    try:
        return _walk(stack, dev, path)
    finally:
        for level in stack[1:]:  # left open by an error (top is the caller's)
            os.close(level.fd)


def _walk(stack: list[_Level], dev: int, path: Path) -> bool:
    while stack:
        level = stack[-1]
        child = _next_subdir(level, too_deep=len(stack) > MAX_DEPTH)
        if child is not None:
            stack.append(_Level(os.open(child, _DIR_FLAGS, dir_fd=level.fd), child))
            _lock(stack[-1].fd, dev, path.joinpath(*(lv.name for lv in stack)))
            continue
        stack.pop()
        if not stack:
            return bool(level.left)
        os.close(level.fd)
        parent = stack[-1]
        if level.left:
            parent.left.add(level.name)
        else:
            os.rmdir(level.name, dir_fd=parent.fd)
    return False


def _next_subdir(level: _Level, too_deep: bool) -> str | None:
    """Unlink the level's files; the first subdirectory still to empty, if any. The level
    is locked, so nothing new appears in it while it is read."""
    with os.scandir(level.fd) as entries:
        for entry in entries:
            if entry.name in level.left:
                continue
            if not entry.is_dir(follow_symlinks=False):
                os.unlink(entry.name, dir_fd=level.fd)
            elif too_deep:
                level.left.add(entry.name)
            else:
                return entry.name
    return None


def _unlink(path: Path) -> None:
    _remove_name(os.unlink, path)


def _remove_name(remove: Callable[[Path], None], path: Path) -> None:
    """rmdir or unlink one name; already gone is fine, anything else is pgsweep's failure."""
    try:
        remove(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise internal(f"cannot remove {path}: {exc}") from exc


def _rm_rf(path: Path) -> None:
    import subprocess

    res = subprocess.run(["rm", "-rf", "--one-file-system", "--", str(path)], check=False,
                         stdin=subprocess.DEVNULL, capture_output=True, text=True)  # fmt: skip
    if res.returncode != 0 or path.exists():
        raise internal(f"cannot remove {path}: {res.stderr.strip()}")
