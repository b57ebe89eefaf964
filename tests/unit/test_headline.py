"""The answer first, on results folders written through the real store with numbers the
test chooses (tests/synthetic.py): the headline restates the model's verdicts in words,
configurations are named by what differs from the baseline, and the terminal report fits
100 columns whatever the levels, with a legend when names are too long."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
from rich.console import Console

from pgsweep import analysis
from pgsweep.analysis.headline import percent_interval
from pgsweep.outputs import terminal
from pgsweep.outputs.show import open_store
from synthetic import make_results

LONG = "/opt/postgresql/patched-with-a-rather-long-branch-name/postgresql-17.2.tar.bz2"


def _analysis(tmp_path: Path, factors: dict[str, list[object]], effect: list[float],
              rounds: int = 6) -> analysis.Analysis:  # fmt: skip
    rng = np.random.default_rng(3)
    n = len(effect)
    tps = {(c, r): 1000 * effect[c] * float(np.exp(rng.normal(0, 0.02)))
           for c in range(n) for r in range(1, rounds + 1)}  # fmt: skip
    store = open_store(make_results(tmp_path / "res", factors, tps, rounds))
    try:
        return analysis.analyse(store)
    finally:
        store.close()


def test_percentages_read_with_as_many_digits_as_they_need() -> None:
    assert percent_interval(3.07, 2.84, 3.32, True) == "+207% [+184, +232]"
    assert percent_interval(0.995, 0.939, 1.054) == "-0.5% [-6.1, +5.4]"
    assert percent_interval(1.012, 1.0004, 1.024, True) == "+1.20% [+0.04, +2.40]"
    assert percent_interval(1.0, 0.9999, 1.0001) == "+0.00% [-0.01, +0.01]"


def test_headline_restates_each_factors_verdict(tmp_path: Path) -> None:
    """sync doubles TPS, name does nothing: one line per factor, the first with the
    model's ratio and interval, the second 'no significant difference' with what would
    have shown; with two factors, the configurations called different follow."""
    a = _analysis(tmp_path, {"server.application_name": ["a", "b"],
                             "server.synchronous_commit": ["on", "off"]},
                  [1.0, 2.0, 1.0, 2.0])  # fmt: skip
    lines = {h.get("factor"): h for h in a.headline if h["kind"] == "factor"}
    sync = next(e for e in a.main_effects() if e["factor"] == "server.synchronous_commit")
    expect = percent_interval(sync["ratio"], sync["ci_low"], sync["ci_high"], True)
    assert lines["server.synchronous_commit"]["text"] == (
        f"synchronous_commit off vs on: faster, {expect}")
    assert lines["server.synchronous_commit"]["tone"] == "faster"
    name = lines["server.application_name"]["text"]
    assert name.startswith("application_name b vs a: no significant difference, ")
    assert "would have shown (6 rounds)" in name
    configs = [h for h in a.headline if h["kind"] == "comparison"]
    assert sorted(h["config"] for h in configs) == ["c02", "c04"]  # the two that differ
    assert all(h["text"].endswith("]") and ": faster, +" in h["text"] for h in configs)
    assert a.names == {"c01": "baseline", "c02": "synchronous_commit off",
                       "c03": "application_name b",
                       "c04": "application_name b, synchronous_commit off"}
    assert a.explain == []


def test_terminal_fits_100_columns_with_a_legend_for_long_names(tmp_path: Path) -> None:
    """Three factors, one a build source path of 80 characters; clients 8 is 1.5x."""
    a = _analysis(tmp_path, {"build.source": ["installed", LONG],
                             "server.shared_buffers": ["128MB", "1GB"],
                             "workload.clients": [1, 8]},
                  [1.0, 1.5, 1.0, 1.5, 1.0, 1.5, 1.0, 1.5])  # fmt: skip
    out = io.StringIO()
    terminal.render_terminal(a, Console(file=out, width=100, no_color=True))
    lines = out.getvalue().splitlines()
    assert max(len(line) for line in lines) <= 100
    assert "…" not in out.getvalue() and all(line == line.rstrip() for line in lines)
    table = next(i for i, line in enumerate(lines) if line.startswith("id "))
    rows = lines[table + 1 : table + 9]
    assert [r.split()[0] for r in rows] == [f"c0{i}" for i in range(1, 9)]
    assert rows[-1].split()[1:4] == ["A2", "B2", "C2"]  # what differs, coded
    assert f"A = build.source: A1 installed, A2 {LONG}" in " ".join(out.getvalue().split())
    assert "faster +" in rows[1] and "no sig. diff." in rows[2]
    assert any(line.startswith(" • clients 8 vs 1: faster, +") for line in lines)


def test_terminal_codes_factors_but_keeps_levels_when_that_fits(tmp_path: Path) -> None:
    a = _analysis(tmp_path, {"server.shared_buffers": ["128MB", "512MB"],
                             "server.synchronous_commit": ["on", "off"]},
                  [1.0, 3.0, 1.0, 3.0])  # fmt: skip
    out = io.StringIO()
    terminal.render_terminal(a, Console(file=out, width=100, no_color=True))
    lines = out.getvalue().splitlines()
    row = next(line for line in lines if line.startswith("c04"))
    assert " A=512MB B=off " in row and "faster +" in row
    assert "A = server.shared_buffers" in lines and "B = server.synchronous_commit" in lines
    assert max(len(line) for line in lines) <= 100


def test_terminal_names_configurations_in_words_when_they_fit(tmp_path: Path) -> None:
    a = _analysis(tmp_path, {"workload.clients": [1, 8]}, [1.0, 1.5])
    out = io.StringIO()
    terminal.render_terminal(a, Console(file=out, width=100, no_color=True))
    text = out.getvalue()
    row = next(line for line in text.splitlines() if line.startswith("c02"))
    assert "clients 8" in row and "faster +" in row and " = workload.clients" not in text
