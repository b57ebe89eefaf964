"""`pgsweep explain DIR --config c03 [--against c01]`: the explain panel of one comparison
in the terminal (the sentence, then every explain metric ranked by its change, with its
interval; analysis.explain judges them), and the explain panels of the Markdown report."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from .. import spec
from ..analysis import analyse
from ..analysis import explain as ex
from ..core import printable
from ..store import Results
from .safetext import md
from .terminal import print_table, say

MAX_ROWS = 25  # rows the terminal shows without --all: the largest changes
UNITS_SHOWN = ("µs", "B")  # the others are what the name counts ("WAL syncs / tx")


def run(results: Results, config: str, against: str | None, alpha: float | None,
        as_json: bool, every: bool, console: Console) -> None:  # fmt: skip
    """Judge as `pgsweep report` does (the file's [report] baseline, margin and alpha, or
    the alpha given), then print the panel of `config` against `against`."""
    options = spec.report_options(results.experiment().file_text)
    alpha = options.alpha if alpha is None else alpha
    a = analyse(results, dict(options.baseline) or None, options.margin_fraction(), alpha)
    p = ex.panel(a, results, config, against, alpha).as_dict()
    if as_json:
        console.print_json(json.dumps(p, allow_nan=False, default=str))
        return
    render(p, a.names, console, every)


def render(p: dict[str, Any], names: dict[str, str], console: Console, every: bool) -> None:
    config, against = p["config"], p["against"]
    console.print(Text(printable(f"{config} ({names.get(config, config)}) vs {against} "
                                 f"({names.get(against, against)}), {p['rounds']} rounds"),
                       style="bold"))  # fmt: skip
    say(console, p["sentence"])
    if p.get("settings"):
        say(console, "settings that differ: " + settings_words(p["settings"]))
    console.print()
    rows = p["rows"] if every else p["rows"][:MAX_ROWS]
    if not rows:
        say(console, "no explain figures in this folder (a run from before pgsweep collected "
                     "them, or trials without them)")  # fmt: skip
        _latency(p, console)  # one window each: shown whatever the rounds
        return
    table = Table(box=None, pad_edge=False, show_edge=False)
    table.add_column("metric", ratio=1)
    for head in ("before", "after", "change [interval]"):
        table.add_column(head, justify="right", no_wrap=True)
    table.add_column("", no_wrap=True)
    for r in rows:
        unit = f" ({r['unit']})" if r["unit"] in UNITS_SHOWN else ""
        # a Text, never markup: a statement's text is the workload's ("[/x]", "[link=...]")
        table.add_row(Text(printable(r["name"] + unit)), r["before"], r["after"],
                      r["change"], r["verdict"])  # fmt: skip
    print_table(console, table)
    left = len(p["rows"]) - len(rows)
    tail = f"; {left} smaller changes not shown (--all shows them)" if left else ""
    say(console, f"{p['family']} explain figures judged as one family: each interval at "
                 f"{p['alpha']:g} / {p['family']}, so any false \"different\" in this panel "
                 f"has at most a {p['alpha']:.0%} chance{tail}")  # fmt: skip
    if p.get("waits_from"):
        say(console, f"{p['waits_from']}.")
    _latency(p, console)


def _latency(p: dict[str, Any], console: Console) -> None:
    if p.get("io_latency"):
        console.print()
        print_table(console, latency_table(p["io_latency"]))
        say(console, IO_NOTE)


IO_NOTE = ("block-I/O latency: every request on the server's devices in one profile window "
           "per configuration ([experiment] io_latency), quantiles to within 10% (its "
           "quarter-octave buckets); one window each: no interval, not judged")
IO_SENTENCE = IO_NOTE[0].upper() + IO_NOTE[1:] + "."  # the reports' form of it


def latency_cells(r: dict[str, Any]) -> tuple[str, ...]:
    """device and kind, then requests, p50 and p99 each as "before → after"."""
    def side(s: dict[str, Any] | None, key: str) -> str:
        if s is None:
            return "-"
        return f"{s[key]:,}" if key == "requests" else _us(s[key])

    pairs = [f"{side(r['before'], k)} → {side(r['after'], k)}"
             for k in ("requests", "p50_us", "p99_us")]  # fmt: skip
    return (f"{r['device']} {r['kind']}", *pairs)


def _us(v: float) -> str:
    return f"{v / 1000:,.2f} ms" if v >= 1000 else f"{v:,.0f} µs"


def latency_table(rows: list[dict[str, Any]]) -> Table:
    table = Table(box=None, pad_edge=False, show_edge=False)
    table.add_column("device, kind", ratio=1)
    for head in ("requests", "p50", "p99"):
        table.add_column(head, justify="right", no_wrap=True)
    for r in rows:
        table.add_row(*(Text(printable(c)) for c in latency_cells(r)))
    return table


def markdown(panels: list[dict[str, Any]], names: dict[str, str]) -> list[str]:
    """The explain panels as a Markdown section ([] when there is none)."""
    if not panels:
        return []
    out = ["\n## Why: what changed beside each verdict\n"]
    for p in panels:
        out.append(f"### {md(names.get(p['config'], p['config']))}\n")
        out.append(md(p["sentence"]) + "\n")
        if p.get("settings"):
            out.append(md("Settings that differ: " + settings_words(p["settings"])) + "\n")
        out.append("| metric | baseline | this | change | verdict |")
        out.append("| --- | --- | --- | --- | --- |")
        for r in p["rows"][:MAX_ROWS]:
            cells = (r["name"], r["before"], r["after"], r["change"], r["verdict"])
            out.append("| " + " | ".join(md(str(c)) for c in cells) + " |")  # "[-7, +36]"
        out.append("")
        if p.get("io_latency"):
            out += ["| block requests | count | p50 | p99 |", "| --- | --- | --- | --- |"]
            out += ["| " + " | ".join(md(c) for c in latency_cells(r)) + " |"
                    for r in p["io_latency"]]  # fmt: skip
            out += ["", md(IO_SENTENCE), ""]
    return out


def settings_words(settings: list[dict[str, str]]) -> str:
    """`synchronous_commit on → off; work_mem 4096 kB → 8192 kB` (each value as its
    server showed it, without where it came from)."""
    def bare(v: str) -> str:
        return v.rsplit(" (", 1)[0] if v.endswith(")") else v

    return "; ".join(f"{s['name']} {bare(s['before'])} → {bare(s['after'])}" for s in settings)
