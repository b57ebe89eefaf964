"""`pgsweep report` in a terminal: the answer first (the headline sentences, wrapped under
their bullet), then one table of the configurations that fits the console (100 columns is
the target): every configuration named by the levels that differ from the baseline's, or,
when such names do not fit, by factor letters and level numbers ("A2 B1") with a legend
under the table. Cells never wrap: a verdict is one line."""

from __future__ import annotations

import re
import string
import textwrap

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..analysis import Analysis
from ..analysis.headline import baseline_text, short_verdict
from ..analysis.workload import workload_line
from ..core import printable
from ..plan import short_names
from .safetext import term
from .sentences import adaptive_line, fleet_lines

_INTERVAL = re.compile(r"\[[^\]\s]*, [^\]\s]*\]")  # "[-6.1, +5.4]" stays on one line
TONES = {"faster": "green", "lower": "green", "slower": "red", "higher": "red"}


def _num(v: float | None, digits: int = 0) -> str:
    return "-" if v is None else f"{v:,.{digits}f}"


def _tps_digits(a: Analysis) -> int:
    """No decimals for TPS in the thousands; one below 100 (a slow custom script)."""
    levels = [(c.summary.get("tps") or {}).get("mean") or 0 for c in a.configurations]
    return 1 if levels and min(levels) < 100 else 0


def letters(factors: list[str]) -> dict[str, str]:
    """A, B, ... Z, then AA, AB, ...: one per factor, in file order."""
    up = string.ascii_uppercase
    return {f: up[i] if i < 26 else up[i // 26 - 1] + up[i % 26] for i, f in enumerate(factors)}


def _levels(a: Analysis) -> dict[str, list[str]]:
    """Each factor's levels as text, in the order configurations first show them."""
    order: dict[str, list[str]] = {f: [] for f in a.factors}
    for c in a.configurations:
        for f in a.factors:
            if str(c.levels.get(f)) not in order[f]:
                order[f].append(str(c.levels.get(f)))
    return order


def coded_names(a: Analysis, numbered: bool) -> tuple[dict[str, str], list[str]]:
    """Configuration id -> what differs from the baseline with factor letters: "A=512MB
    B=off", or with level numbers too ("A2 B1") when `numbered`; and the legend that reads
    them (one line per factor)."""
    code, order = letters(a.factors), _levels(a)
    base = next((c for c in a.configurations if c.id == a.baseline), None)
    names = {}
    for c in a.configurations:
        if c.id == a.baseline:
            names[c.id] = "baseline"
            continue
        differs = [f for f in a.factors if base is None or str(c.levels.get(f))
                   != str(base.levels.get(f))]  # fmt: skip
        names[c.id] = " ".join(
            f"{code[f]}{order[f].index(str(c.levels.get(f))) + 1}" if numbered
            else f"{code[f]}={c.levels.get(f)}" for f in differs)  # fmt: skip
    legend = [f"{code[f]} = {f}" + (": " + ", ".join(f"{code[f]}{i} {lv}" for i, lv in
                                                      enumerate(order[f], start=1))
                                    if numbered else "") for f in a.factors]  # fmt: skip
    return names, legend


def _rows(a: Analysis) -> list[dict[str, str]]:
    verdicts = {c["config"]: c for c in a.comparisons if c["metric"] == "tps"}
    digits = _tps_digits(a)
    out = []
    for c in a.configurations:
        s = c.summary.get("tps") or {}
        p99 = c.summary.get("latency.p99_ms") or {}
        row = verdicts.get(c.id)
        verdict = "baseline" if c.id == a.baseline else (short_verdict(row) if row else "-")
        level = s.get("level") if s.get("level") is not None else s.get("mean")
        ci = ("-" if s.get("ci_low") is None
              else f"{_num(s['ci_low'], digits)}-{_num(s['ci_high'], digits)}")  # fmt: skip
        out.append({
            "id": c.id, "n": str(s.get("n", 0)), "tps": _num(level, digits), "ci": ci,
            "cv": f"{s['cv']:.1%}" if s.get("cv") is not None else "-",
            "p99": _num(p99.get("median"), 2), "verdict": verdict,
            "tone": TONES.get(verdict.split(" ")[0], ""),
        })  # fmt: skip
    return out


COLUMNS = (("id", "left"), ("name", "left"), ("n", "right"), ("tps", "right"),
           ("ci", "right"), ("cv", "right"), ("p99", "right"), ("verdict", "left"))  # fmt: skip


def _table(a: Analysis, rows: list[dict[str, str]], names: dict[str, str]) -> Table:
    alpha = a.method["alpha"]
    headers = {"id": "id", "name": "configuration", "n": "n", "tps": "TPS",
               "ci": f"{1 - alpha:.0%} CI", "cv": "CV", "p99": "p99 ms",
               "verdict": "TPS vs baseline"}  # fmt: skip
    table = Table(box=None, pad_edge=False, padding=(0, 1), show_edge=False,
                  header_style="bold", title_justify="left")  # fmt: skip
    for key, justify in COLUMNS:
        table.add_column(headers[key], justify=justify, no_wrap=True)  # type: ignore[arg-type]
    for row in rows:
        cells = [term(row[k]) if k != "name" else term(names[row["id"]]) for k, _ in COLUMNS]
        if row["tone"]:
            cells[-1].stylize(row["tone"])
        table.add_row(*cells)
    return table


def _fits(a: Analysis, rows: list[dict[str, str]], names: dict[str, str], width: int) -> bool:
    headers = ("id", "configuration", "n", "TPS", "95% CI", "CV", "p99 ms",
               "TPS vs baseline")  # fmt: skip
    cols = [max([len(h)] + [len(printable(names[r["id"]]) if k == "name" else r[k])
                            for r in rows]) for (k, _), h in zip(COLUMNS, headers, strict=True)]
    return sum(cols) + 2 * (len(cols) - 1) <= width


def say(console: Console, text: str, indent: str = "  ") -> None:
    """A line of text wrapped to the console (at most 100 columns) with a hanging indent,
    no trailing blanks, never read as markup."""
    width = max(40, min(console.width, 100))
    console.print(Text(textwrap.fill(printable(text), width, subsequent_indent=indent,
                                     break_on_hyphens=False, break_long_words=False)))


def _headline(a: Analysis, console: Console) -> None:
    """Each sentence under its bullet, wrapped with a hanging indent (no trailing blanks
    in a log file)."""
    alpha = a.method["alpha"]
    console.print(Text(f"TPS, with simultaneous {1 - alpha:.0%} intervals:", style="bold"))
    width = max(40, min(console.width, 100))
    for line in a.headline:
        first = " • " if line["kind"] != "more" else "   "
        kept = _INTERVAL.sub(lambda m: m.group(0).replace(" ", "\0"), printable(line["text"]))
        text = textwrap.fill(kept, width, initial_indent=first, subsequent_indent="   ",
                             break_on_hyphens=False).replace("\0", " ")  # fmt: skip
        console.print(Text(text, style=TONES.get(line["tone"], "")))


def render_terminal(a: Analysis, console: Console) -> None:
    exp = a.experiment
    console.print(Text(printable(f"{exp['name']} · PostgreSQL {exp['postgres_version']} · "
                                 f"{exp['rounds']} rounds"), style="bold"))  # fmt: skip
    console.print(Text(printable(f"baseline {a.baseline}: {baseline_text(a)}")))
    if workload_line(exp):
        say(console, workload_line(exp))
    console.print()
    _headline(a, console)
    if "adaptive" in a.method:
        say(console, adaptive_line(a.method["adaptive"]))
    for panel in a.explain:  # issue 26's explain panels: their sentence, when filled
        say(console, f"why {a.names.get(str(panel.get('config')), panel.get('contrast', ''))}"
                     f": {panel.get('sentence', '')}")
    console.print()
    rows = _rows(a)
    names, legend = dict(a.names), list[str]()
    width = min(console.width, 100)
    for numbered in (False, True):  # words; factor letters with levels; letters and numbers
        if _fits(a, rows, names, width):
            break
        names, legend = coded_names(a, numbered)
    print_table(console, _table(a, rows, names))
    for line in legend:
        say(console, line, "    ")
    _effects_note(a, console)
    for line in fleet_lines(a):
        say(console, line)
    for w in a.warnings:
        say(console, f"warning: {w}")
    for n in a.experiment.get("run_notes", []):
        say(console, f"note: {n}")


def print_table(console: Console, table: Table) -> None:
    """A table without the blanks rich pads its last column with (a log stays clean)."""
    for line in console.render_lines(table, pad=False, new_lines=False):
        text = Text()
        for seg in line:
            if not seg.control:
                text.append(seg.text, seg.style)
        text.rstrip()
        console.print(text, soft_wrap=True)


def _effects_note(a: Analysis, console: Console) -> None:
    """Interactions the headline does not name (none was called different) in one line."""
    inter = a.interactions()
    quiet = [e for e in inter if e["decision"] != "different"]
    if quiet and len(quiet) == len(inter):
        short = short_names(a.factors)
        pairs = sorted({" x ".join(short.get(t["factor"], t["factor"]) for t in e["terms"])
                        for e in quiet})  # fmt: skip
        say(console, f"no interaction called different ({len(quiet)} judged: "
                     f"{', '.join(pairs)}); --format markdown lists them")

