"""`workload.tool = "pgreplay"`: the captured csvlog `replay` names, checked at validation.
Read once, as a custom script is (without following a link, only if the server user may
read it, UTF-8 text, bounded), its span, roles and databases read here, and parsed by
pgreplay itself (`-f`, into no replay file) on a copy of the very text the run replays:
what it cannot parse is exit 2 naming the log's line."""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..errors import PgsweepError
from ..host import safefs, userfile
from ..postgres import pgreplay
from . import workload_tools as tools
from .base import ValidationContext

MAX_LOG_BYTES = 256 << 20
WHERE = ("workload", "replay")
EXPECTED = ('"/abs/path/postgresql.csv": a csvlog captured with log_statement = \'all\', '
            "log_connections and log_disconnections on, lc_messages = 'C'")  # fmt: skip
DATABASE = "postgres"  # where pgsweep loads the data: pgbench -i, or the restored dump


@dataclass(frozen=True)
class ReplayLog:
    path: Path  # as opened
    text: str
    facts: pgreplay.LogFacts


def check_replay(value: object, ctx: ValidationContext) -> ReplayLog:
    text_value = value if isinstance(value, str) else ""
    path = Path(text_value)
    if not path.is_absolute() or ".." in path.parts:
        raise ctx.source.error(WHERE, f"not a log to replay (got {value!r})", expected=EXPECTED,
                               fix="name the csvlog by its absolute path")  # fmt: skip
    try:
        opened = userfile.read(path, ctx.user, MAX_LOG_BYTES)
        text = opened.data.decode()
    except (userfile.UserFileError, UnicodeDecodeError) as exc:
        what = str(exc) if isinstance(exc, userfile.UserFileError) else "is not UTF-8 text"
        raise ctx.source.error(WHERE, f"the log cannot be replayed: {path} {what}",
                               expected=EXPECTED, fix="name a csvlog (not a link) the "
                               "server user may read, in folders it may pass through",
                               ) from None  # fmt: skip
    try:
        facts = pgreplay.facts(text)
    except pgreplay.LogError as exc:
        raise _refused(ctx, path, exc, "is not a csvlog") from None
    other = [d for d in facts.databases if d != DATABASE]
    if other:
        raise ctx.source.error(WHERE, f"{path}: its sessions connect to the database(s) "
                               f"{', '.join(map(repr, other))}; pgsweep's clusters hold the "
                               f"data in {DATABASE!r}", fix="capture the log on a "
                               f"database named {DATABASE}: cluster.from restores into it",
                               )  # fmt: skip
    if not facts.statements:
        raise ctx.source.error(WHERE, f"{path} logs no statement to replay",
                               expected=EXPECTED, fix="capture with log_statement = 'all'")
    _parse_check(ctx, path, text)
    return ReplayLog(opened.path, text, facts)


def _parse_check(ctx: ValidationContext, path: Path, text: str) -> None:
    """pgreplay parses the text (as the server user, who replays it) from a private copy:
    the server user's alone (0400), in a folder of root's that no one may list (0711), so
    no other user of the machine reads the captured statements while it is checked."""
    program = tools.require(ctx.source, "pgreplay")
    folder = Path(tempfile.mkdtemp(prefix="pgsweep-replay-check-"))
    try:
        folder.chmod(0o711)  # the server user reaches its copy; root's outputs stay root's
        copy = folder / "log.csv"
        owner = (ctx.user.uid, ctx.user.gid) if ctx.user is not None else None
        safefs.write_file(copy, text, 0o400, owner)
        res = ctx.host.run(pgreplay.parse_check_argv(str(program), str(copy)),
                           out=folder / "check.out", timeout=120, user=ctx.user)  # fmt: skip
        found = pgreplay.parse_error(res.stdout + res.stderr)
        if found is not None or not res.ok:
            raise _refused(ctx, path, found or pgreplay.LogError(0, res.describe_failure()),
                           "cannot be parsed by pgreplay")  # fmt: skip
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _refused(ctx: ValidationContext, path: Path, exc: pgreplay.LogError,
             what: str) -> PgsweepError:  # fmt: skip
    at = f"{path}:{exc.line}" if exc.line else str(path)
    return ctx.source.error(WHERE, f"{at}: the log {what}: {exc.what}", expected=EXPECTED,
                            fix="name the csvlog PostgreSQL wrote (log_destination = "
                            "'csvlog'), whole")  # fmt: skip
