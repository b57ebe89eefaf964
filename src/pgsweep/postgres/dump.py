"""A pg_dump archive as the data of a cluster (`cluster.from = "dump:/abs/path"`).

At validation the archive is opened once without following a link (host/userfile.py:
the server user, who restores it, must be able to read it) and only its first bytes are
read, by descriptor: the format (custom, directory, tar or plain SQL) and the versions
it names (the server that was dumped and the pg_dump that dumped it). A dump of a newer
major version than the cluster's is refused then. In a run the server user restores it
by path (pg_restore, or psql for plain SQL): root never reads the archive's contents."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from ..host import proc
from ..host.userfile import Opened

FORMATS = ("custom", "directory", "tar", "plain")
_PLAIN_VERSION = re.compile(rb"^-- Dumped (from database|by pg_dump) version (\S+)", re.M)
# psql's message for a statement naming a role the new cluster lacks (OWNER TO, GRANT):
# ownership and privileges then stay pgsweep's, as pg_restore --no-owner --no-privileges
_ROLE_MISSING = re.compile(r'ERROR:\s+role "[^"]*" does not exist')


class DumpError(Exception):
    """Not a pg_dump archive pgsweep can restore; the message says why."""


@dataclass(frozen=True)
class Dump:
    path: str  # the archive as opened: its folder resolved
    format: str  # one of FORMATS
    bytes: int  # its size (a directory's files summed)
    server_version: str  # the version of the server that was dumped ("15.18")
    pg_dump_version: str  # the pg_dump that made it

    @property
    def majors(self) -> tuple[int, int]:
        return _major(self.server_version), _major(self.pg_dump_version)

    def estimate_bytes(self) -> int:
        """The restored database, guessed from the archive: custom and directory archives
        are compressed (about a fifth), tar and plain SQL are not; indexes are rebuilt."""
        return int(self.bytes * (5 if self.format in ("custom", "directory") else 1.5))


def _major(version: str) -> int:
    m = re.match(r"(\d+)", version)
    return int(m.group(1)) if m else 0


def identify(opened: Opened) -> Dump:
    """The format and versions of an archive from its first bytes (DumpError when it is
    none of pg_dump's formats)."""
    head = opened.head
    if opened.is_dir:
        fmt, toc = "directory", head
    elif head[257:262] == b"ustar":
        fmt, toc = "tar", head[512:]
    elif head.startswith(b"PGDMP"):
        fmt, toc = "custom", head
    else:
        fmt, toc = "plain", b""
    if fmt == "plain":
        if b"\0" in head:
            raise DumpError("is not a pg_dump archive (custom, directory, tar) nor SQL text")
        found = dict(_PLAIN_VERSION.findall(head[:16384]))
        if not found:
            raise DumpError("is not a pg_dump archive: plain SQL without pg_dump's header "
                            "(\"-- Dumped from database version ...\")")  # fmt: skip
        versions = (found.get(b"from database", b"?"), found.get(b"by pg_dump", b"?"))
        server, by = (v.decode(errors="replace") for v in versions)
    else:
        server, by = _archive_versions(toc)
    return Dump(str(opened.path), fmt, opened.size, server, by)


def _archive_versions(toc: bytes) -> tuple[str, str]:
    """The dumped server's and pg_dump's versions from an archive header (pg_backup_
    archiver.c, ReadHead): PGDMP, version (3 bytes), int and offset sizes, format, the
    compression (an int; a byte from archive 1.15), the creation time (7 ints), then the
    database name and the two versions as strings. An int is a sign byte and intSize bytes,
    little-endian; a string its length (an int) and its bytes."""
    if not toc.startswith(b"PGDMP") or len(toc) < 12:
        raise DumpError("is not a pg_dump archive (no PGDMP header)")
    vmaj, vmin, isize = toc[5], toc[6], toc[8]
    if not 1 <= isize <= 8:
        raise DumpError("has a damaged pg_dump header")
    pos = 11 + (1 if (vmaj, vmin) >= (1, 15) else 1 + isize) + 7 * (1 + isize)
    out = []
    for _ in range(3):
        if pos + 1 + isize > len(toc):
            raise DumpError("has a damaged pg_dump header")
        n = int.from_bytes(toc[pos + 1:pos + 1 + isize], "little")
        pos += 1 + isize
        if n > 1024 or pos + n > len(toc):
            raise DumpError("has a damaged pg_dump header")
        out.append(toc[pos:pos + n].decode(errors="replace"))
        pos += n
    if (vmaj, vmin) < (1, 10):  # before PostgreSQL 9.0: no versions recorded
        raise DumpError(f"is an archive of format {vmaj}.{vmin}, older than pgsweep reads")
    return out[1], out[2]


def restore_argv(dump: Dump, pg_restore: str, psql: str, conn: list[str]) -> list[str]:
    """The command that restores `dump` into the database `postgres` as the role `conn`
    names: pg_restore -j where the format allows (custom, directory), psql for plain SQL.
    Nothing of the dumped cluster's roles, tablespaces, subscriptions (which would connect
    elsewhere) or publications is restored."""
    if dump.format == "plain":
        return [psql, "-X", "-q", *conn, "-d", "postgres", "-f", dump.path]
    argv = [pg_restore, *conn, "-d", "postgres", "--no-owner", "--no-privileges",
            "--no-tablespaces", "--no-subscriptions", "--no-publications", "--exit-on-error"]
    if dump.format != "tar":
        argv += ["-j", str(max(1, min(4, os.cpu_count() or 1)))]
    return [*argv, dump.path]


def restore_failure(dump: Dump, res: proc.Result) -> str | None:
    """Why a restore failed, or None. psql goes on after an error: its errors are in its
    output, and only those naming a missing role are expected (OWNER TO, GRANT)."""
    if dump.format != "plain":
        return None if res.ok else f"pg_restore failed: {res.describe_failure()}"
    errors = [line for line in res.stderr.splitlines() if "ERROR:" in line]
    other = [line for line in errors if not _ROLE_MISSING.search(line)]
    if other or not res.ok:
        return f"psql could not restore {Path(dump.path).name}: " + (
            other[0] if other else res.describe_failure())
    return None
