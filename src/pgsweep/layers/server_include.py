"""`server.include = "/abs/path/postgresql.conf"`: the user's own configuration file as
the base of every configuration's server settings.

The file and everything it includes (`include`, `include_if_exists`, `include_dir`, paths
relative to the including file, as PostgreSQL resolves them) is read here, once, at
validation, each file as a custom script is (host/userfile.py): opened without following
a link at its name, walked to without following one, and only when the server user could
read it and pass through every folder above it, so root reads nothing through it that the
server user could not. Each setting keeps the file and line it came from, for messages."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core import printable
from ..errors import PgsweepError
from ..host import userfile
from ..host.proc import RunAs
from .base import ValidationContext

MAX_BYTES = 1 << 20  # per file
MAX_DEPTH = 10  # nesting, as PostgreSQL allows
# name [=] value [# comment]; a value is quoted ('' and backslash escapes) or one token
_LINE = re.compile(r"""\s*(?P<name>[A-Za-z_][A-Za-z0-9_$.]*)\s*(?:=\s*)?
                       (?P<value>'(?:[^'\\]|''|\\.)*'|[^\s#']+)?\s*(?:\#.*)?$""", re.X)
_ESCAPES = {"b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
INCLUDES = {"include", "include_if_exists", "include_dir"}


@dataclass(frozen=True)
class Entry:
    name: str  # as written
    value: str
    where: str  # "FILE:LINE", for messages


def merge(base: dict[str, Any], factors: dict[str, list[Any]],
          ctx: ValidationContext, unused: Callable[[str], str | None],
          ) -> dict[str, tuple[str, str]]:  # fmt: skip
    """server.include's settings (name -> value and FILE:LINE) that the experiment does not
    set itself; what pgsweep manages is not used from it, and a note says what came from
    the file and what the experiment overrides. The key leaves `base`."""
    key = next((k for k in base if k.lower() == "include"), None)
    if key is None:
        return {}
    value, where = base.pop(key), ctx.source.where("server", key)
    if not isinstance(value, str):
        raise ctx.source.error(("server", key), "server.include must be a path",
                               expected='"/abs/path/postgresql.conf"')  # fmt: skip
    user = ctx.user if isinstance(ctx.user, RunAs) else None
    ours = {k.lower() for k in base} | {k.lower() for k in factors}
    out: dict[str, tuple[str, str]] = {}
    overridden: set[str] = set()
    for entry in read(Path(value), user, where):
        name = entry.name.lower()
        why = unused(name)
        if why:
            ctx.notes.append(f"{entry.where}: {name} = {printable(repr(entry.value))}: not "
                             f"used: {why}")  # fmt: skip
        elif name in ours:
            overridden.add(name)
        else:
            out[name] = (entry.value, entry.where)
    listed = ", ".join(f"{n} = {printable(repr(v))}" for n, (v, _) in sorted(out.items()))
    ctx.notes.append(f"{where}: {len(out)} setting(s) from {value}: {listed or 'none'}"
                     + (f"; set by the experiment instead: {', '.join(sorted(overridden))}"
                        if overridden else ""))  # fmt: skip
    return out


def read(path: Path, user: RunAs | None, where: str) -> list[Entry]:
    """Every setting of the file and of what it includes, in the order PostgreSQL reads
    them (a later one of a name wins). `where` names the key, for errors about the file."""
    if not path.is_absolute():
        raise PgsweepError(f"server.include {str(path)!r} is not an absolute path",
                           where=where, fix="name the file by its absolute path")  # fmt: skip
    out: list[Entry] = []
    _read(path, user, where, out, [])
    return out


def _read(path: Path, user: RunAs | None, where: str, out: list[Entry],
          chain: list[Path]) -> None:  # fmt: skip
    if len(chain) >= MAX_DEPTH or path in chain:
        raise PgsweepError(f"{path} is included again (a loop, or nested over {MAX_DEPTH} deep)",
                           where=where, fix="remove the include loop")  # fmt: skip
    try:
        opened = userfile.read(path, user, MAX_BYTES)
        text = opened.data.decode()
    except userfile.UserFileError as exc:
        raise PgsweepError(f"the configuration file cannot be read: {exc}", where=where,
                           fix="name a file (not a link) the server user may read, in "
                           "folders it may pass through") from None  # fmt: skip
    except UnicodeDecodeError:
        raise PgsweepError(f"{path} is not UTF-8 text", where=where,
                           fix="name a postgresql.conf file") from None  # fmt: skip
    for number, line in enumerate(text.splitlines(), 1):
        here = f"{opened.path}:{number}"
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        m = _LINE.match(line)
        if m is None or m.group("value") is None:
            raise PgsweepError(f"not a setting PostgreSQL reads: {line.strip()!r}", where=here,
                               expected="name = value, or name = 'quoted value'",
                               fix="fix the line (PostgreSQL would not start with it)")  # fmt: skip
        name, value = m.group("name"), _unquote(m.group("value"))
        if name.lower() not in INCLUDES:
            out.append(Entry(name, value, here))
            continue
        target = Path(value)
        target = target if target.is_absolute() else opened.path.parent / target
        if name.lower() == "include_dir":
            for conf in _conf_files(target, user, here):
                _read(conf, user, here, out, [*chain, opened.path])
        elif name.lower() == "include" or target.exists():
            _read(target, user, here, out, [*chain, opened.path])


def _conf_files(folder: Path, user: RunAs | None, where: str) -> list[Path]:
    """The `*.conf` files of an include_dir in the order PostgreSQL reads them (by name;
    hidden ones skipped)."""
    try:
        names = userfile.list_dir(folder, user)
    except userfile.UserFileError as exc:
        raise PgsweepError(f"include_dir cannot be read: {exc}", where=where,
                           fix="name a folder the server user may read") from None  # fmt: skip
    return [folder / n for n in sorted(names) if n.endswith(".conf") and not n.startswith(".")]


def _unquote(raw: str) -> str:
    if not raw.startswith("'"):
        return raw
    body = raw[1:-1]
    return re.sub(r"''|\\(.)", lambda m: "'" if m.group(0) == "''"
                  else _ESCAPES.get(m.group(1), m.group(1)), body)  # fmt: skip
