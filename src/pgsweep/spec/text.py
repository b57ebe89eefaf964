"""The text check of an experiment file: which characters no key or string may hold."""

from __future__ import annotations

import unicodedata
from typing import Any

from ..layers.base import Source


def check_text(source: Source, doc: dict[str, Any], path: tuple[str, ...] = ()) -> None:
    """No control or invisible formatting character in any key or string of the file: they
    would break the configuration files pgsweep writes (a newline in a setting), reach the
    terminal (ANSI escapes) or hide what a level says (bidi overrides). Nor surrogates,
    noncharacters (U+FFFE: invalid in the JUnit file's XML) or the line and paragraph
    separators U+2028/U+2029 (a line break to JSON, JavaScript and some editors). The
    description alone may hold newlines and tabs."""
    for key, value in doc.items():
        here = (*path, str(key))
        texts = [("key", str(key))]
        if isinstance(value, str):
            texts.append(("value", value))
        elif isinstance(value, list):
            texts += [("level", v) for v in _strings(value)]
        for kind, text in texts:
            free = "\n\t" if here == ("experiment", "description") and kind == "value" else ""
            bad = [c for c in text if c not in free and _unsafe_char(c)]
            if bad:
                raise source.error(
                    here, f"this {kind} holds the {_char_kind(bad[0])} U+{ord(bad[0]):04X}",
                    expected="printable text", fix="remove it (and any escape sequence)",
                )  # fmt: skip
        if isinstance(value, dict):
            check_text(source, value, here)
        elif isinstance(value, list):
            for item in value:
                if isinstance(item, dict):
                    check_text(source, item, here)


def _strings(values: list[Any]) -> list[str]:
    """Every string in a list, nested lists included."""
    out: list[str] = []
    for v in values:
        out += [v] if isinstance(v, str) else _strings(v) if isinstance(v, list) else []
    return out


def _noncharacter(n: int) -> bool:
    return 0xFDD0 <= n <= 0xFDEF or n & 0xFFFE == 0xFFFE


def _unsafe_char(c: str) -> bool:
    category = unicodedata.category(c)
    return category in ("Cc", "Cf", "Cs", "Zl", "Zp") or _noncharacter(ord(c))


def _char_kind(c: str) -> str:
    category = unicodedata.category(c)
    if category in ("Zl", "Zp"):
        return "line or paragraph separator"
    if category == "Cs":
        return "surrogate"
    return "noncharacter" if _noncharacter(ord(c)) else "control character"
