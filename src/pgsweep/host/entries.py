"""What a registry entry of a run may name, checked before `cleanup`/`restore` act on it.

Root stops processes, kills the server user's processes and deletes the work area a
registry entry names. The registry is root's, but an entry is data all the same (as a
journal entry is): it is held to the journal's rules. The run's name is `PID-STARTTIME`
(matched whole: a `$` would let a trailing newline through), the work area and socket
folder are real, root-owned directories named as pgsweep names them, each holding a
marker file of root's whose content is that run's name, the server user is never root
(its processes are the ones killed), and a results folder to make private again is the
one the work area was made in."""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path
from typing import Any

RUN = re.compile(r"[0-9]{1,10}-[0-9]{1,20}|[0-9]{1,10}")  # PID-STARTTIME (a bare PID: older)
WORK_PREFIXES = (".pgsweep-work-", "pgsweep-work-")
SOCKET_PREFIX = "pgsweep-"


def read(path: Path, marker: str) -> tuple[dict[str, Any] | None, str]:
    """The registry entry at `path` (`RUN.json`, read without following a link) when it
    passes these rules, its run under "run"; (None, why) when refused, (None, "") when
    there is none."""
    run = path.name.removesuffix(".json")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None, ""
    try:
        data = json.loads(os.read(fd, 1 << 16))
    except ValueError:
        return None, "not a registry entry pgsweep wrote"
    finally:
        os.close(fd)
    why = refusal(data, run, marker) if isinstance(data, dict) else "not an object"
    return (None, why) if why else ({**data, "run": run}, "")


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
    workdir, results = Path(str(data.get("workdir"))), Path(str(data.get("results", "")))
    if data.get("opened") == "True" and workdir.parent != results:
        # cleanup makes an opened results folder private again (0700): only the folder
        # the run's own work area was made in
        return f"its results folder {results} is not the one its work area {workdir} is in"
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
