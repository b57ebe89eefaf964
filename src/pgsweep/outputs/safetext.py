"""Text from a results folder, a level or the machine, made safe for where it is shown.

A level is whatever the experiment file said (`"[/x]"`, `"=1+1"`, `"<b>x</b>"` are valid
application_name values), and a results folder may come from an older pgsweep or another
machine: its text is data everywhere it goes, never markup (rich's `[link=...]` hides a
hyperlink, `[/x]` crashes the table), a spreadsheet formula (`=HYPERLINK(...)` in a CSV
cell), HTML or a link in the Markdown report, or a character XML forbids in the JUnit
file. Each output uses the one function for its format."""

from __future__ import annotations

import re
from typing import Any

from rich.text import Text

from ..core import printable


def term(value: Any) -> Text:
    """A table cell or title for rich: plain text (never parsed as markup), control and
    formatting characters shown as escapes."""
    return Text(printable(str(value)))


_MD_SPECIAL = re.compile(r"([\\`\[\]|])")
_MD_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}


def md(value: Any) -> str:
    """Text for a Markdown line or table cell: no HTML (`<`, `>` and `&` as entities), no
    link, image or code span (`[`, `]`, backtick and backslash escaped), no cell break
    (`|` escaped, a newline becomes a space)."""
    text = printable(str(value)).replace("\n", " ")
    text = "".join(_MD_ENTITIES.get(c, c) for c in text)
    return _MD_SPECIAL.sub(r"\\\1", text)


def _xml_char(c: str) -> bool:
    n = ord(c)
    return c in "\t\n\r" or 0x20 <= n <= 0xD7FF or 0xE000 <= n <= 0xFFFD or 0x10000 <= n <= 0x10FFFF


def xml(value: Any) -> str:
    """Text an XML 1.0 document may hold: characters outside its Char production (control
    characters, surrogates, U+FFFE and U+FFFF) as visible escapes; ElementTree escapes
    `<`, `&` and quotes itself."""
    return "".join(c if _xml_char(c) else f"\\u{ord(c):04x}" for c in str(value))


_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: str) -> str:
    """A text cell of a CSV file: one a spreadsheet would read as a formula (it starts
    with = + - @, a tab or a carriage return, and is not a plain number) gets a leading
    apostrophe, which spreadsheets show as text (the OWASP advice)."""
    if value.startswith(_FORMULA_START) and not _NUMBER.fullmatch(value):
        return "'" + value
    return value
