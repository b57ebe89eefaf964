"""pgreplay (Debian's package, 1.2): what a captured csvlog holds (its span, the roles and
databases its sessions use), the command lines that check and replay it, and its replay
statistics read into pgsweep's names. The statistics' form is that of output captured
from real runs (tests/data/pgreplay/)."""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

PACKAGE = "pgreplay"
_PARSE_ERROR = re.compile(r"Error parsing line (\d+): (.*)")
_TIME = "%Y-%m-%d %H:%M:%S.%f"
_SESSION = ("statement: ", "execute ", "connection authorized", "disconnection: ")
_STAT = re.compile(r"^(Speed factor for replay|Maximum lag behind schedule|Calls to the server|"
                   r"Total number of connections|SQL statements executed|"
                   r"Average SQL statement duration|Maximum SQL statement duration): "
                   r"([\d.]+)", re.M)  # fmt: skip
_RUN_TIME = re.compile(r"^Total run time:(?: (\d+) hours)?(?: (\d+) minutes)? ([\d.]+) seconds",
                       re.M)  # fmt: skip
_ERRORS = re.compile(r"^\((\d+) or [\d.]+% of these completed with error\)", re.M)
_NAMES = {"Speed factor for replay": "speed", "Maximum lag behind schedule": "lag_max_s",
          "Calls to the server": "calls", "Total number of connections": "connections",
          "SQL statements executed": "statements",
          "Average SQL statement duration": "statement_mean_s",
          "Maximum SQL statement duration": "statement_max_s"}  # fmt: skip


class LogError(Exception):
    """The log is not one pgreplay can replay here; `line` is its 1-based line, or 0."""

    def __init__(self, line: int, what: str) -> None:
        super().__init__(what)
        self.line, self.what = line, what


class ReplayParseError(Exception):
    """pgreplay's output holds no replay statistics."""


@dataclass(frozen=True)
class LogFacts:
    seconds: float  # from the first entry to the last
    users: tuple[str, ...]  # the roles its sessions connect as
    databases: tuple[str, ...]
    statements: int  # entries that log a statement


def facts(text: str) -> LogFacts:
    """The span, roles and databases of a csvlog's sessions (PostgreSQL's columns:
    log_time, user_name, database_name, ..., the message 14th)."""
    first = last = None
    users: set[str] = set()
    dbs: set[str] = set()
    statements = 0
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    for row in _rows(reader):
        if len(row) < 14:
            raise LogError(reader.line_num, f"{len(row)} columns, where a csvlog has 22 or more")
        try:
            at = datetime.strptime(row[0].rsplit(" ", 1)[0], _TIME)
        except ValueError:
            raise LogError(reader.line_num, f"{row[0][:40]!r} is not a csvlog time") from None
        if not row[13].startswith(_SESSION):
            continue  # the server's own messages: no part of the replayed schedule
        first, last = first or at, at
        users.update([row[1]] if row[1] else [])
        dbs.update([row[2]] if row[2] else [])
        statements += row[13].startswith(("statement: ", "execute "))
    if first is None or last is None:
        raise LogError(0, "the log holds no session (no connection, statement or "
                       "disconnection)")
    return LogFacts((last - first).total_seconds(), tuple(sorted(users)), tuple(sorted(dbs)),
                    statements)  # fmt: skip


def _rows(reader: Any) -> Iterator[list[str]]:
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise LogError(reader.line_num, f"not CSV: {exc}") from None
        yield row


def parse_check_argv(program: str, log: str) -> list[str]:
    """Parse the csvlog only (-f: into a replay file, here none): what pgreplay cannot read
    it names by line."""
    return [program, "-f", "-c", "-o", "/dev/null", log]


def parse_error(output: str) -> LogError | None:
    m = _PARSE_ERROR.search(output)
    return LogError(int(m.group(1)), m.group(2).strip()) if m else None


@dataclass(frozen=True)
class Replay:
    """One configuration's replay: the frozen log, at `speed` times the captured pace."""

    log: str
    speed: float
    seconds: int  # the log's span at that speed: the window's length

    def argv(self, program: str, host: str, port: int) -> list[str]:
        return [program, "-c", "-h", host, "-p", str(port), "-s", f"{self.speed:g}", self.log]


def version(output: str) -> str:
    m = re.search(r"pgreplay (\S+)", output)
    return m.group(1) if m else "?"


def parse(output: str) -> dict[str, float]:
    """pgreplay's replay statistics (its print_replay_statistics): speed, seconds,
    lag_max_s, calls, connections, statements, errors, statement_mean_s, statement_max_s."""
    if "Replay statistics" not in output:
        raise ReplayParseError("no replay statistics in pgreplay's output")
    out = {_NAMES[m.group(1)]: float(m.group(2)) for m in _STAT.finditer(output)}
    run = _RUN_TIME.search(output)
    if run:  # "Total run time: 1 hours 2 minutes 3.456 seconds", the parts above zero
        hours, minutes, secs = run.groups()
        out["seconds"] = int(hours or 0) * 3600 + int(minutes or 0) * 60 + float(secs)
    errors = _ERRORS.search(output)
    out["errors"] = float(errors.group(1)) if errors else 0.0
    missing = {"seconds", "statements"} - set(out)
    if missing:
        raise ReplayParseError(f"pgreplay's statistics lack {', '.join(sorted(missing))}")
    return out
