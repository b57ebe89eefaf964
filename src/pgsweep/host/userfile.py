"""A file the experiment names (a custom pgbench script), read once by root on behalf of
the server user, with every check made on what was actually opened.

Checking a path with stat() and then reading it by path lets another user who can write
a folder on the way swap in a link between the two: a file only root may read would
become "the script" handed to the server user. Here the folder is resolved once, then
walked again component by component without following any link, the file is opened
without following a link, and every check (a regular file, its size, that the server
user could read it and pass through every folder above it) is made on the descriptors
held, from which the bytes are then read."""

from __future__ import annotations

import contextlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from .proc import RunAs
from .safefs import NOFOLLOW


class UserFileError(Exception):
    """The file cannot be used; the message says why (the caller names the key)."""


@dataclass(frozen=True)
class UserFile:
    path: Path  # the file opened: its folder resolved, its own name as written
    data: bytes


def read(path: Path, user: RunAs | None, limit: int) -> UserFile:
    """The bytes of the regular file `path` (at most `limit`; more is an error), opened
    without following a link at its own name or on its resolved folder, readable by
    `user` (None: this process's user). UserFileError for anything else."""
    folder = Path(os.path.realpath(path.parent))
    try:
        dfd = _walk(folder, user)
    except OSError as exc:
        raise UserFileError(f"cannot open the folder {folder}: {exc.strerror}") from None
    try:
        try:
            fd = os.open(path.name, os.O_RDONLY | NOFOLLOW | os.O_NONBLOCK, dir_fd=dfd)
        except OSError as exc:
            if exc.errno == 40:  # ELOOP: the name is a link
                why = "is a symbolic link; pgsweep reads only the file itself (name its target)"
                raise UserFileError(f"{folder / path.name} {why}") from None
            raise UserFileError(f"cannot open {folder / path.name}: {exc.strerror}") from None
    finally:
        os.close(dfd)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UserFileError(f"{folder / path.name} is not a regular file")
        if user is not None and not _may(st, user, stat.S_IRUSR, stat.S_IRGRP, stat.S_IROTH):
            raise UserFileError(f"{folder / path.name} is not readable by the server user "
                                f"{user.name}")  # fmt: skip
        if st.st_size > limit:
            raise UserFileError(f"{folder / path.name} is larger than {limit} bytes")
        data = os.read(fd, limit + 1)
        if len(data) > limit:
            raise UserFileError(f"{folder / path.name} is larger than {limit} bytes")
        return UserFile(folder / path.name, data)
    finally:
        os.close(fd)


@dataclass(frozen=True)
class Opened:
    """A file or folder the server user will read by path later (pg_restore of a dump),
    checked on what was opened here: `head` is the start of the file (of `toc.dat` in a
    folder), `size` its bytes (the regular files of a folder, summed)."""

    path: Path
    is_dir: bool
    head: bytes
    size: int


def inspect(path: Path, user: RunAs | None, head: int = 64 * 1024) -> Opened:
    """Like `read`, for a file of any size or a pg_dump directory: opened without following
    a link at its name or on its resolved folder, a regular file (or a folder holding a
    regular `toc.dat`) the server user may read (and pass through); only its first `head`
    bytes are read. UserFileError for anything else."""
    folder = Path(os.path.realpath(path.parent))
    try:
        dfd = _walk(folder, user)
    except OSError as exc:
        raise UserFileError(f"cannot open the folder {folder}: {exc.strerror}") from None
    where = folder / path.name
    try:
        fd = _open_nofollow(path.name, dfd, where)
    finally:
        os.close(dfd)
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            if user is not None and not _may(st, user, stat.S_IRUSR | stat.S_IXUSR,
                                              stat.S_IRGRP | stat.S_IXGRP,
                                              stat.S_IROTH | stat.S_IXOTH):  # fmt: skip
                raise UserFileError(f"{where} is not readable by the server user {user.name}")
            toc = _open_nofollow("toc.dat", fd, where / "toc.dat")
            try:
                data = _head_of(toc, where / "toc.dat", user, head)
            finally:
                os.close(toc)
            return Opened(where, True, data, _folder_bytes(fd))
        data = _head_of(fd, where, user, head)
        return Opened(where, False, data, st.st_size)
    finally:
        os.close(fd)


def list_dir(path: Path, user: RunAs | None) -> list[str]:
    """The names in a folder (an include_dir), reached without following a link on its
    resolved path, which `user` may pass through and read."""
    try:
        fd = _walk(Path(os.path.realpath(path)), user)
    except OSError as exc:
        raise UserFileError(f"cannot open the folder {path}: {exc.strerror}") from None
    try:
        if user is not None and not _may(os.fstat(fd), user, stat.S_IRUSR, stat.S_IRGRP,
                                          stat.S_IROTH):  # fmt: skip
            raise UserFileError(f"{path} is not readable by the server user {user.name}")
        return os.listdir(fd)
    finally:
        os.close(fd)


def _open_nofollow(name: str, dfd: int, where: Path) -> int:
    try:
        return os.open(name, os.O_RDONLY | NOFOLLOW | os.O_NONBLOCK, dir_fd=dfd)
    except OSError as exc:
        if exc.errno == 40:  # ELOOP: the name is a link
            why = "is a symbolic link; pgsweep reads only the file itself (name its target)"
            raise UserFileError(f"{where} {why}") from None
        raise UserFileError(f"cannot open {where}: {exc.strerror}") from None


def _head_of(fd: int, where: Path, user: RunAs | None, head: int) -> bytes:
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise UserFileError(f"{where} is not a regular file")
    if user is not None and not _may(st, user, stat.S_IRUSR, stat.S_IRGRP, stat.S_IROTH):
        raise UserFileError(f"{where} is not readable by the server user {user.name}")
    return os.pread(fd, head, 0)


def _folder_bytes(dfd: int) -> int:
    """The bytes of the regular files directly in a folder (a pg_dump directory)."""
    total = 0
    for name in os.listdir(dfd):
        with contextlib.suppress(OSError):
            st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
            if stat.S_ISREG(st.st_mode):
                total += st.st_size
    return total


def _walk(folder: Path, user: RunAs | None) -> int:
    """A descriptor of `folder` (resolved), opened one component at a time from / without
    following a link; each folder must let `user` pass (UserFileError otherwise)."""
    fd = os.open("/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in folder.parts[1:]:
            if user is not None and not _may(os.fstat(fd), user, stat.S_IXUSR, stat.S_IXGRP,
                                              stat.S_IXOTH):  # fmt: skip
                raise UserFileError(f"the server user {user.name} cannot reach {folder}")
            try:
                nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | NOFOLLOW, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (40, 20):  # a link (or no longer a folder) swapped in
                    raise UserFileError(f"{folder} changed while it was read (a link at "
                                        f"{part})") from None  # fmt: skip
                raise
            os.close(fd)
            fd = nxt
        if user is not None and not _may(os.fstat(fd), user, stat.S_IXUSR, stat.S_IXGRP,
                                          stat.S_IXOTH):  # fmt: skip
            raise UserFileError(f"the server user {user.name} cannot reach {folder}")
        return fd
    except BaseException:
        os.close(fd)
        raise


def _may(st: os.stat_result, user: RunAs, mine: int, group: int, other: int) -> bool:
    """Would `user` have this permission (owner, primary group, others) on the file?"""
    if st.st_uid == user.uid:
        return bool(st.st_mode & mine)
    if st.st_gid == user.gid:
        return bool(st.st_mode & group)
    return bool(st.st_mode & other)
