"""Which program drives the workload (`workload.tool`): pgbench, the default, sysbench or
pgreplay. The checks of the keys each tool owns, the tool's presence on this machine
(named with the Debian package that provides it), and sysbench's own test names; the
workload layer calls these from `validate`."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..host import proc, safefs
from ..host.wire import MAX_PAYLOAD
from ..postgres import pgreplay, sysbench
from ..postgres.access import hba_name_ok
from ..tomlpos import key_line
from .base import Source, ValidationContext

TOOLS = ("pgbench", "sysbench", "pgreplay")
PACKAGES = {"sysbench": sysbench.PACKAGE, "pgreplay": pgreplay.PACKAGE}
# Each tool's own options: with another tool they would silently mean nothing, so they are
# refused; a replay's log decides who connects, when and for how long, so it refuses these
# of pgbench's and sysbench's too
OWN_KEYS = {
    "pgbench": ("script", "jobs", "protocol", "latency_limit", "latency_log", "max_tries",
                "standby_script", "standby_clients", "prewarm"),
    "sysbench": ("test", "tables", "table_size"),
    "pgreplay": ("replay", "replay_speed"),
}  # fmt: skip
NOT_REPLAYED = ("clients", "duration", "warmup", "rate")
# a replayed log goes to the client's host in one message to its agent
MAX_REMOTE_LOG = MAX_PAYLOAD - (1 << 20)
DATA_KEYS = ("tool", "tables", "table_size", "replay")  # they shape the data: not factors
DEFAULT_TEST = "oltp_read_write"


def check_keys(base: Mapping[str, Any], factors: Mapping[str, list[Any]], tool: str,
               source: Source) -> None:  # fmt: skip
    """Each key belongs to its tool; the data's shape is one per experiment file."""
    for key in DATA_KEYS:
        if key in factors:
            raise source.error(("factors", "workload", key), f"workload.{key} cannot be a "
                               "factor: it decides the data every configuration is loaded "
                               "with", fix="compare it in two experiment files")  # fmt: skip
    for owner, keys in OWN_KEYS.items():
        for key in keys if owner != tool else ():
            if key in base or key in factors:
                raise source.error(_path(key, factors), f"workload.{key} is an option of "
                                   f"{owner}, and workload.tool is {tool!r}",
                                   fix=f'set workload.tool = "{owner}", or remove '
                                   f"workload.{key}")  # fmt: skip
    for key in NOT_REPLAYED if tool == "pgreplay" else ():
        if key in base or key in factors:
            raise source.error(_path(key, factors), f"workload.{key} does not apply to a "
                               "replay: the captured log says who connects, when and for "
                               "how long", fix=f"remove workload.{key}; replay_speed sets "
                               "the pace")  # fmt: skip


def _path(key: str, factors: Mapping[str, list[Any]]) -> tuple[str, ...]:
    return ("factors", "workload", key) if key in factors else ("workload", key)


def check_tests(tests: Sequence[tuple[tuple[str, ...], str]], ctx: ValidationContext) -> None:
    """sysbench's test names: one of the OLTP tests that share oltp_common's tables, and
    offered by the sysbench installed here. Only a name: never a path or a Lua file, which
    sysbench would run as a script."""
    expected = f"one of {', '.join(sysbench.TESTS)}"
    for path, test in tests:
        if test not in sysbench.TESTS:
            raise ctx.source.error(path, f"{test!r} is not a sysbench test pgsweep runs",
                                   expected=expected, fix="name one of sysbench's OLTP tests; "
                                   "a path or a Lua script of your own is not run")  # fmt: skip
        if ctx.host.lstat(sysbench.SCRIPTS / f"{test}.lua") is None:
            raise ctx.source.error(path, f"the sysbench installed here does not offer {test!r} "
                                   f"(no {sysbench.SCRIPTS}/{test}.lua)", expected=expected,
                                   fix=f"apt-get install {sysbench.PACKAGE}, or name a test "
                                   "it offers")  # fmt: skip


def program(name: str = "sysbench") -> Path | None:
    """The tool in the standard system folders (not root's own PATH): a root-owned
    program on a path no other user can change, or None."""
    for folder in proc.DEFAULT_PATH.split(":"):
        path = Path(folder) / name
        if path.is_file() and os.access(path, os.X_OK) and not safefs.untrusted_component(path):
            return path
    return None


def require(source: Source, tool: str) -> Path:
    """The tool's path, or exit 2 naming the package that provides it."""
    found = program(tool)
    if found is None:
        raise source.error(("workload", "tool"), f"workload.tool is {tool}, which is not "
                           "installed on this machine", fix=f"apt-get install "
                           f"{PACKAGES[tool]} (scripts/setup.sh installs it)")  # fmt: skip
    return found


def check_data(tool: str, source: Source) -> None:
    """sysbench loads its own tables (`sysbench TEST prepare`): cluster.scale, size and
    from set pgbench's data or a dump's, so with sysbench they are refused (a replay runs
    on either: the data the log was captured on)."""
    if tool != "sysbench":
        return
    for key in ("from", "size", "scale"):
        for path in (("cluster", key), ("factors", "cluster", key)):
            if key_line(source.text, path):
                raise source.error(path, f"cluster.{key} sets the data, and workload.tool is "
                                   "sysbench, which loads its own tables",
                                   fix=f"remove cluster.{key}; workload.tables and "
                                   "table_size size sysbench's data")  # fmt: skip


def check_remote_client(source: Source, configs: list[dict[str, Any]], remote: bool) -> None:
    """A client on another host runs each tool there over TCP. A replay's log is copied
    there (in one message to its agent: at most MAX_REMOTE_LOG bytes), and its sessions'
    roles log in by name: pg_hba.conf holds each quoted, so a name with a quote or control
    character cannot be admitted."""
    if not remote:
        return
    for config in configs:
        w = config.get("workload")
        if w is None or w.tool != "pgreplay":
            continue
        if w.replay_bytes > MAX_REMOTE_LOG:
            raise source.error(("workload", "replay"), f"{w.replay} holds {w.replay_bytes:,} "
                               f"bytes; a replay on the client's host ([roles] client) "
                               f"copies it there, at most {MAX_REMOTE_LOG:,}",
                               fix="replay a shorter capture, or remove [roles] client to "
                               "replay beside the server")  # fmt: skip
        bad = [r for r in w.replay_roles if not hba_name_ok(r)]
        if bad:
            raise source.error(("workload", "replay"), f"{w.replay}: its sessions log in as "
                               f"{bad[0]!r}, a role name pg_hba.conf cannot hold (a double "
                               "quote or a control character), and a replay on the client's "
                               "host is admitted by name", fix="remove [roles] client to "
                               "replay beside the server")  # fmt: skip


def replay_notes(configs: Sequence[Mapping[str, Any]]) -> list[str]:
    """A replay's statement time as the server measured it comes from pg_stat_statements,
    which changes the server, so pgsweep loads it only when the file preloads it: `plan`
    says so for the replayed configurations that do not."""
    without = [c for c in configs if getattr(c.get("workload"), "tool", "") == "pgreplay"
               and "pg_stat_statements" not in str(
                   (c.get("server") or {}).get("shared_preload_libraries", ""))]  # fmt: skip
    if not without:
        return []
    return [f"{len(without)} replayed configuration(s) without pg_stat_statements: their "
            "statement time is pgreplay's (the client's) only; for the server's own "
            "(statements.exec_ms_mean), set server.shared_preload_libraries = "
            "'pg_stat_statements' (a recorded setting: it changes the server)"]
