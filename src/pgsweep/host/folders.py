"""Results folders the reader commands open, and the files they write.

`show`, `report`, `compare`, `export`, `plan --noise-from`, `run --against` and
`run --resume` open a results folder that may not be the one this run made. pgsweep, often
root, reads it and writes beside it (an export, a rolled-back journal), so it holds it to
the rule `run` holds its own folder to: every directory on its path owned by root or the
invoking user and writable by nobody else (sticky /tmp is fine above it), no link on the
path another user owns, and every file pgsweep reads there a regular file (no link) of
root's or the invoking user's that no one else may write. Otherwise another user could
swap a file for a link to one of root's between a check and a use, or rewrite a file while
it is read. Such a folder is refused (exit 2) with the way out: copy it.

Output files (exports, reports, JUnit) are written through a temporary file made without
following links and renamed into place (`safefs.write_file`), mode 0600, in a directory
no other user can change (or a sticky one, where nobody can rename over another's file);
a link at the output name is refused, never replaced or followed."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from ..errors import PgsweepError
from . import safefs

COPY_IT = ("copy it to a folder only you can change and name the copy (cp -rP DIR COPY: "
           "links are copied as links, which pgsweep then refuses too)")  # fmt: skip


def trusted_uids() -> set[int]:
    """Root, this process's user and the user who ran pgsweep through sudo."""
    uids = {0, os.geteuid()}
    if os.environ.get("SUDO_UID", "").isdigit():
        uids.add(int(os.environ["SUDO_UID"]))
    return uids


def results_folder(folder: Path, what: str = "the results folder") -> Path:
    """`folder` resolved, once it is one no other user can change; the caller uses the
    returned path from then on."""
    why = safefs.untrusted_link(folder) or safefs.untrusted_component(folder)
    if why:
        raise PgsweepError(
            f"{what} could be changed by another user ({why}): pgsweep reads it "
            "and writes beside it, and that user could swap a file in it for a link "
            "meanwhile", where=str(folder), fix=COPY_IT,
        )  # fmt: skip
    real = Path(os.path.realpath(folder))
    if real.is_dir() and not os.access(real, os.R_OK | os.X_OK):
        raise PgsweepError(
            f"{what} cannot be read by this user: results folders are private "
            "to the user who ran pgsweep (0700)", where=str(folder),
            fix="run the command as that user (or with sudo)",
        )  # fmt: skip
    return real


def check_file(path: Path, what: str) -> None:
    """A file pgsweep reads in a results folder: absent, or a regular file (never a link)
    owned by root or the invoking user that no other user may write."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    why = None
    if stat.S_ISLNK(st.st_mode):
        why = "is a symbolic link"
    elif not stat.S_ISREG(st.st_mode):
        why = "is not a regular file"
    elif st.st_uid not in trusted_uids():
        why = f"belongs to uid {st.st_uid}"
    elif st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        why = "is writable by other users"
    if why:
        raise PgsweepError(f"{what} {path.name} {why}: pgsweep reads only files no other user "
                           "can change or swap", where=str(path.parent),
                           fix=COPY_IT)  # fmt: skip


def write_output(path: Path, data: bytes | str, what: str) -> Path:
    """Write a command's output file (mode 0600) and return where it went: refused
    (exit 2) when a link sits at the name, or the directory is one another user could
    change; an existing file of yours is replaced whole, never written through."""
    target = output_target(path, what)
    safefs.write_file(target, data, 0o600)
    return target


def output_target(path: Path, what: str) -> Path:
    """Where `write_output` would write `path`, or the error it would give: a command that
    computes for a while checks its output name first (and write_output checks again)."""
    parent = Path(os.path.realpath(path.absolute().parent))
    if not parent.is_dir():
        raise PgsweepError(
            f"{what}: the folder {path.parent} does not exist",
            where=str(path),
            fix="make the folder first, or write elsewhere",
        )
    why = safefs.untrusted_link(path.absolute().parent) or _untrusted_dir(parent)
    if why:
        raise PgsweepError(
            f"{what} is not safe to write: {why}", where=str(path),
            fix="write it in a folder owned by you (or root) that other users cannot "
            "write to",
        )  # fmt: skip
    target = parent / path.name
    try:
        st = os.lstat(target)
    except FileNotFoundError:
        st = None
    if st is not None:
        why = None
        if stat.S_ISLNK(st.st_mode):
            why = "is a symbolic link: pgsweep writes no output through a link"
        elif not stat.S_ISREG(st.st_mode):
            why = "exists and is not a regular file"
        elif st.st_uid not in trusted_uids():
            why = f"belongs to uid {st.st_uid}"
        if why:
            raise PgsweepError(f"{what} {why}", where=str(path),
                               fix="remove it, or choose another file name")  # fmt: skip
    return target


def _untrusted_dir(directory: Path) -> str | None:
    """Why another user could swap what pgsweep writes in `directory` (resolved), or None:
    it and every directory above it owned by a trusted user and writable by no one else,
    unless sticky (/tmp): there, a file is renamed over by its owner (or root) only."""
    trusted = trusted_uids()
    for part in [directory, *directory.parents]:
        st = os.lstat(part)
        if st.st_uid not in trusted:
            return f"{part} belongs to uid {st.st_uid}"
        if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not st.st_mode & stat.S_ISVTX:
            return f"{part} is writable by other users"
    return None
