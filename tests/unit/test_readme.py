"""The README says what the code does: its experiment file is examples/quickstart.toml as it
is, its report fits the 100 columns it claims, the commands it lists are pgsweep's, and
every link in README.md, SECURITY.md and docs/ reaches a file (and a heading) that exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from conftest import ROOT
from pgsweep import cli

README = (ROOT / "README.md").read_text()
PAGES = [ROOT / "README.md", ROOT / "SECURITY.md", *sorted((ROOT / "docs").glob("*.md"))]


def _block(kind: str, after: str) -> str:
    start = README.index(f"```{kind}\n", README.index(after)) + len(kind) + 4
    return README[start : README.index("```", start)]


def test_the_readme_shows_the_quickstart_file_as_it_is() -> None:
    shown = _block("toml", "examples/quickstart.toml")
    assert shown == (ROOT / "examples" / "quickstart.toml").read_text()


def test_the_readme_report_fits_100_columns_headline_first() -> None:
    report = _block("text", "`pgsweep report` opens on the answer")
    lines = report.splitlines()
    assert lines[0].startswith("$ .venv/bin/pgsweep report results/quickstart-")
    assert max(len(line) for line in lines[1:]) <= 100
    assert lines.index("TPS, with simultaneous 95% intervals:") < next(
        i for i, line in enumerate(lines) if line.startswith("id "))  # the answer first


def test_every_command_the_readme_lists_is_pgsweeps() -> None:
    commands = set(re.findall(r"^\$ \.venv/bin/pgsweep (\w+)", README, re.M))
    known = set(cli.COMMANDS)
    assert commands and commands <= known, commands - known
    assert {"plan", "run", "report", "show", "schema", "compare"} <= commands


def _anchors(page: Path) -> set[str]:
    heads = re.findall(r"^#+ (.+)$", page.read_text(), re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in heads}


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_every_link_reaches_a_file_and_heading(page: Path) -> None:
    for link in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
        if link.startswith(("http://", "https://", "mailto:")):
            continue
        path, _, anchor = link.partition("#")
        target = (page.parent / path).resolve() if path else page
        assert target.exists(), f"{page.name}: {link}"
        if anchor and target.suffix == ".md":
            assert anchor in _anchors(target), f"{page.name}: {link}"
