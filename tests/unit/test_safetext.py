"""Data stays data in every output: a level is never terminal markup, a spreadsheet
formula, HTML or a link in Markdown, or a character XML forbids in the JUnit file; the
experiment file's text check refuses what would become one (noncharacters, surrogates,
line and paragraph separators). The reports run on real Results folders written through
the store (tests/synthetic.py); the real commands are tried in
tests/integration/test_readers.py."""

from __future__ import annotations

import csv
import io
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from rich.console import Console

from pgsweep import cli, spec
from pgsweep.analysis import analyse, compare
from pgsweep.errors import PgsweepError
from pgsweep.outputs import export, gate, report
from pgsweep.outputs.progress import ConsoleReporter
from pgsweep.outputs.safetext import csv_cell, md, term, xml
from pgsweep.plan import Configuration, Trial
from pgsweep.store import Results, TrialRecord
from synthetic import make_results

HOSTILE = ["[/x]", "=1+1", "<b>x</b>", "[link=http://evil.example]click[/link]"]


def test_term_is_never_markup() -> None:
    out = io.StringIO()
    console = Console(file=out, width=200, force_terminal=True, color_system="truecolor")
    for level in HOSTILE:
        console.print(term(level))  # rich.markup.MarkupError for "[/x]" as a plain str
    text = out.getvalue()
    assert "[/x]" in text and "[link=http://evil.example]click[/link]" in text
    assert "\x1b]8;" not in text  # no OSC 8 hyperlink reached the terminal
    assert term("a\x1b[31mred").plain == "a\\u001b[31mred"  # no escape sequence either


def test_markdown_text_holds_no_html_or_link() -> None:
    assert md("<b>x</b> & y") == "&lt;b&gt;x&lt;/b&gt; &amp; y"
    assert md("[click](http://evil.example)") == "\\[click\\](http://evil.example)"
    assert md("![img](http://t.example/p.png)") == "!\\[img\\](http://t.example/p.png)"
    assert md("a|b\nc") == "a\\|b c"  # one cell, one line
    assert md("\\[x]") == "\\\\\\[x\\]"  # a backslash cannot undo the escape
    assert md("`code`") == "\\`code\\`"


def test_csv_cells_are_never_formulas() -> None:
    for cell in ("=1+1", "+cmd", "-2+3", "@SUM(A1)", "\t=1", "\r=1", '=HYPERLINK("x")'):
        assert csv_cell(cell) == "'" + cell
    for cell in ("-1.5", "+3", "1e-3", "-.5e+2", "plain", "a=b", ""):
        assert csv_cell(cell) == cell  # numbers and ordinary text stay as they are


def test_xml_text_is_valid_xml_1_0() -> None:
    nasty = "a\x01b\x1b[31m\ufffe\uffff\ud800<&>\"'\u2028"
    assert xml(nasty) == "a\\u0001b\\u001b[31m\\ufffe\\uffff\\ud800<&>\"'\u2028"
    root = ET.Element("t", name=xml(nasty))
    root.text = xml(nasty)
    ET.fromstring(ET.tostring(root, encoding="unicode"))


def test_junit_file_parses_whatever_the_levels_and_paths(tmp_path: Path) -> None:
    """A results folder from an older pgsweep (its levels were not checked for
    noncharacters) or a folder name with a control character: the JUnit file stays XML."""
    levels = ["plain", "bad\ufffe", "ctl\x01", "<b>&amp;</b>"]
    tps = {(c, r): 100.0 + 10 * c + r for c in range(4) for r in (1, 2, 3)}
    folder = make_results(tmp_path / "res", {"server.application_name": levels}, tps, 3)
    with Results(folder) as r:
        result = compare.compare(r, r)  # no gate between two sessions: the XML alone
    text = gate.junit_xml(result, "/tmp/before\x1b\udcff", "after\x02")
    suite = ET.fromstring(text.encode())
    names = [case.get("name") for case in suite.iter("testcase")]
    assert "server.application_name=bad\\ufffe" in names
    assert "server.application_name=ctl\\u0001" in names
    assert "server.application_name=<b>&amp;</b>" in names  # shown as written
    before = suite.find("properties/property").get("value")  # type: ignore[union-attr]
    assert before == "/tmp/before\\u001b\\udcff"


def test_markdown_report_and_csv_export_of_hostile_levels(tmp_path: Path) -> None:
    tps = {(c, r): 100.0 + 10 * c + r for c in range(4) for r in (1, 2, 3)}
    folder = make_results(tmp_path / "res", {"server.application_name": HOSTILE}, tps, 3)
    with Results(folder) as r:
        text = report.render_markdown(analyse(r))
        table = export.table(r, "trials")
    assert "<b>" not in text and "&lt;b&gt;x&lt;/b&gt;" in text
    assert not re.search(r"(?<!\\)\[", text)  # no [ unescaped: no link, no image
    assert "\\[link=http://evil.example\\]click\\[/link\\]" in text
    rows = list(csv.DictReader(io.StringIO(export.encode(table, "csv").decode())))
    cells = {row["server.application_name"] for row in rows}
    assert cells == {"[/x]", "'=1+1", "<b>x</b>", "[link=http://evil.example]click[/link]"}
    assert not any(v.startswith(("=", "+", "@")) for row in rows for v in row.values())


def test_the_progress_bar_shows_levels_as_text() -> None:
    """On a terminal the run shows each trial's configuration in a progress bar, whose
    description rich would parse as markup: "[/x]" crashed the run between trials."""
    out = io.StringIO()
    console = Console(file=out, width=200, force_terminal=True)
    reporter = ConsoleReporter(console)
    config = Configuration("c01", {"server.application_name": "[/x]"}, 0)
    trial = Trial("r1-c01", 1, 1, "c01")
    plan = type("P", (), {"trials": [trial], "seed": 1})()
    reporter.started(plan, [trial], Path("/tmp/res[/x]"), ["a note [/y]"])  # type: ignore[arg-type]
    reporter.trial_started(trial, config, 0)
    record = TrialRecord("r1-c01", 1, 1, "c01", "ok", "a", "b", tps=5.0)
    reporter.trial_finished(trial, record, 1)
    reporter.finished()
    text = out.getvalue()
    assert "[/x]" in text and "a note [/y]" in text


def test_text_check_refuses_noncharacters_separators_and_bad_utf8(tmp_path: Path) -> None:
    cases = {
        'name = "x"\n[server]\napplication_name = "a\\uFFFFb"\n': ("noncharacter U+FFFF", 3),
        'name = "x"\n[factors]\n"server.a" = [["\\u2028"]]\n': ("separator U+2028", 3),
        'name = "x"\ndescription = "ok\\n\\tstill ok\\uFDEF"\n': ("noncharacter U+FDEF", 2),
    }
    for body, (words, line) in cases.items():
        path = tmp_path / "exp.toml"
        path.write_text("[experiment]\n" + body)
        with pytest.raises(PgsweepError) as err:
            spec.load(path)
        assert err.value.exit_code == 2 and words in err.value.what, err.value.render()
        assert err.value.where is not None and err.value.where.startswith(f"{path}:{line + 1}")
    path.write_bytes(b'[experiment]\nname = "x"\ndescription = "a\xed\xa0\x80"\n')
    with pytest.raises(PgsweepError) as err:  # an encoded surrogate: UnicodeDecodeError before
        spec.load(path)
    assert err.value.exit_code == 2 and err.value.where == f"{path}:3"
    assert "not UTF-8" in err.value.what


def test_no_escape_sequence_reaches_the_terminal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A results folder from elsewhere whose level is an OSC 8 hyperlink: `show` prints it
    as text, and an error quoting the levels (a baseline no configuration has) too."""
    link = "\x1b]8;;http://evil.example\x07click\x1b]8;;\x07"
    tps = {(c, r): 100.0 + c + r for c in range(2) for r in (1, 2, 3)}
    folder = make_results(tmp_path / "res", {"server.application_name": ["a", link]}, tps, 3)
    assert cli.main(["show", str(folder)]) == 0
    assert cli.main(["report", str(folder), "--baseline", "server.application_name=b"]) == 2
    out = capsys.readouterr()
    assert "\x1b" not in out.out + out.err and "\\u001b]8;;http://evil.example" in out.err
    assert "\\u001b]8;;http://evil.example" in out.out
