"""Line numbers for keys in a TOML file. tomllib keeps none, so errors would otherwise only
name the key; this scans the text for the table header and the `key =` line."""

from __future__ import annotations

import re

_HEADER = re.compile(r"^\s*\[\s*([^\[\]]+?)\s*\]\s*(#.*)?$")
_PART = r"""(?:[A-Za-z0-9_\-]+|"(?:[^"\\]|\\.)*"|'[^']*')"""
_KEY = re.compile(rf"^\s*({_PART}(?:\s*\.\s*{_PART})*)\s*=")


_ESCAPES = {"b": "\b", "t": "\t", "n": "\n", "f": "\f", "r": "\r", '"': '"', "\\": "\\"}


def _unescape(body: str) -> str:
    """A TOML basic string's escapes (\\n, \\u001b, ...) as the parser reads them."""
    return re.sub(
        r"\\(u[0-9A-Fa-f]{4}|U[0-9A-Fa-f]{8}|.)",
        lambda m: (
            chr(int(m.group(1)[1:], 16))
            if m.group(1)[0] in "uU" and len(m.group(1)) > 1
            else _ESCAPES.get(m.group(1), m.group(0))
        ),
        body,
    )


def _split_dotted(text: str) -> tuple[str, ...]:
    parts = re.findall(r"""[A-Za-z0-9_\-]+|"(?:[^"\\]|\\.)*"|'[^']*'""", text)
    return tuple(
        _unescape(p[1:-1]) if p[:1] == '"' else p[1:-1] if p[:1] == "'" else p for p in parts
    )


def key_line(text: str, path: tuple[str, ...]) -> int | None:
    """1-based line where `path` (table parts + key parts) is assigned, or its table begins."""
    table: tuple[str, ...] = ()
    prefix_line: int | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        header = _HEADER.match(line)
        if header:
            table = _split_dotted(header.group(1))
            if table == path:
                return number
            continue
        key = _KEY.match(line)
        if key:
            full = table + _split_dotted(key.group(1))
            # the key itself, or a dotted key under it (factors.server = ... names "server")
            if full == path:
                return number
            if full[: len(path)] == path and prefix_line is None:
                prefix_line = number
    return prefix_line
