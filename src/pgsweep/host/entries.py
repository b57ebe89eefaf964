"""What a registry entry of a run may name, checked before `cleanup`/`restore` act on it.

Root stops processes, kills the server user's processes and deletes the work area a
registry entry names. The registry is root's, but an entry is data all the same (as a
journal entry is): it is held to the journal's rules. The run's name is `PID-STARTTIME`
(matched whole: a `$` would let a trailing newline through), the work area and socket
folder are real, root-owned directories named as pgsweep names them, each holding a
marker file of root's whose content is that run's name, and the server user is never
root (its processes are the ones killed)."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Any

RUN = re.compile(r"[0-9]{1,10}-[0-9]{1,20}|[0-9]{1,10}")  # PID-STARTTIME (a bare PID: older)
WORK_PREFIXES = (".pgsweep-work-", "pgsweep-work-")
SOCKET_PREFIX = "pgsweep-"


def run_ok(run: str) -> bool:
    return RUN.fullmatch(run) is not None


def refusal(data: dict[str, Any], run: str, marker: str) -> str | None:
    """Why the entry `data` of run `run` must not be acted on, or None."""
    if not run_ok(run) or str(data.get("run", data.get("pid"))) != run:
        return f"its run {run!r} is not a name pgsweep gives, or not the entry's own"
    try:
        uid = int(data.get("server_uid", -1))
    except (TypeError, ValueError):
        return "its server user is not a number"
    if uid <= 0:
        return f"its server user is uid {uid}: pgsweep never runs a server as root"
    for key, prefixes, parent in (("workdir", WORK_PREFIXES, None),
                                  ("socket_root", (SOCKET_PREFIX,), Path("/tmp"))):  # fmt: skip
        why = marked(Path(str(data.get(key, ""))), prefixes, parent, run, marker)
        if why:
            return f"its {key}: {why}"
    return None


def marked(path: Path, prefixes: tuple[str, ...], parent: Path | None, run: str,
           marker: str) -> str | None:  # fmt: skip
    """Why `path` is not a folder pgsweep made for `run`, or None (a folder already gone is
    fine: there is nothing left to remove)."""
    if not path.is_absolute() or Path(os.path.normpath(path)) != path:
        return f"{path} is not an absolute, normal path"
    if not path.name.startswith(prefixes) or (parent is not None and path.parent != parent):
        return f"{path} is not named as pgsweep names its folders"
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
        return f"{path} is not a directory of pgsweep's (a link, or another owner's)"
    if os.path.realpath(path) != str(path):
        return f"{path} lies behind a link"
    return None if holds_marker(path, run, marker) else f"{path}'s marker is not this run's"


def holds_marker(path: Path, run: str, marker: str) -> bool:
    """`path/marker` is a regular file of this process's user whose content is `run`."""
    try:
        fd = os.open(path / marker, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        st = os.fstat(fd)
        text = os.read(fd, 100).decode(errors="replace")
    finally:
        os.close(fd)
    return stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid() and text == run
