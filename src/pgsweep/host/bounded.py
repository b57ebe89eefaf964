"""Reads of files whose size the server user decides, bounded and in chunks.

pgbench runs as the server user and a custom script can run programs through `\\shell`
that inherit its output; the transaction-log folder and the server log are that user's.
So every such read has a bound: a file's size is checked on its descriptor before any
byte is read (a sparse file of a terabyte is refused at once, not read into root's
memory until the OOM killer skips the cleanup), it is read in 1 MiB chunks, a file that
grows past the bound while read is refused, a folder lists at most so many names, and a
trial's outputs share one budget. TooLarge says which file and which bound."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from .safefs import NOFOLLOW

CHUNK = 1 << 20
OUTPUT_LIMIT = 64 << 20  # one command's output (pgbench prints a line a second)
TAIL = 64 << 10  # the end of an output, quoted in a failure


class TooLarge(Exception):
    """A file or folder beyond what pgsweep reads; the message says which and why."""


def read_fd(fd: int, limit: int, what: str) -> bytes:
    """At most `limit` bytes of the open file `fd`, from its current offset, in chunks;
    TooLarge when it holds (or grows to) more."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise TooLarge(f"{what} is not a regular file")
    if st.st_size > limit:
        raise TooLarge(f"{what} holds {st.st_size:,} bytes, more than pgsweep reads "
                       f"({limit:,})")  # fmt: skip
    parts: list[bytes] = []
    got = 0
    while True:
        chunk = os.read(fd, min(CHUNK, limit + 1 - got))
        if not chunk:
            return b"".join(parts)
        parts.append(chunk)
        got += len(chunk)
        if got > limit:
            raise TooLarge(f"{what} grew past {limit:,} bytes while it was read")


def read_output(path: Path, limit: int = OUTPUT_LIMIT, what: str | None = None) -> bytes:
    """A command's output file in a folder root owns, opened without following a link."""
    fd = os.open(path, os.O_RDONLY | NOFOLLOW | os.O_NONBLOCK)
    try:
        return read_fd(fd, limit, what or path.name)
    finally:
        os.close(fd)


def read_tail(path: Path, limit: int = TAIL) -> bytes:
    """The last `limit` bytes of an output file (whatever its size); b"" when it is gone."""
    try:
        fd = os.open(path, os.O_RDONLY | NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return b""
    try:
        size = os.fstat(fd).st_size
        os.lseek(fd, max(0, size - limit), os.SEEK_SET)
        return read_fd_upto(fd, limit)
    finally:
        os.close(fd)


def read_fd_upto(fd: int, limit: int) -> bytes:
    """Up to `limit` bytes from the current offset, in chunks; what lies beyond is left."""
    parts: list[bytes] = []
    got = 0
    while got < limit:
        chunk = os.read(fd, min(CHUNK, limit - got))
        if not chunk:
            break
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


def list_names(directory: Path, limit: int) -> list[str]:
    """The names in a folder another user may own (opened without following a link), at
    most `limit` of them: TooLarge for more (a folder filled with a million names)."""
    dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | NOFOLLOW)
    try:
        names: list[str] = []
        with os.scandir(dfd) as entries:
            for entry in entries:
                names.append(entry.name)
                if len(names) > limit:
                    raise TooLarge(f"{directory} holds more than {limit:,} entries")
        return sorted(names)
    finally:
        os.close(dfd)


class Budget:
    """One trial's reads of output files: together at most `limit` bytes."""

    def __init__(self, limit: int, what: str) -> None:
        self.left, self.limit, self.what = limit, limit, what

    def read(self, path: Path) -> bytes:
        try:
            data = read_output(path, self.left, path.name)
        except TooLarge as exc:
            raise TooLarge(f"{exc} ({self.what} may hold {self.limit:,} bytes in all)") from None
        self.left -= len(data)
        return data
