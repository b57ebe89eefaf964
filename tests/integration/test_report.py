"""Reports from one real 2x2 experiment: application_name (no effect on performance: an A/A
factor, with a level that is an HTML script tag) x synchronous_commit (a large effect: with
commit_delay = 10 ms and commit_siblings = 0 every commit that waits for its flush sleeps
10 ms first, so "on" runs at a tenth of "off" or less; a loaded CI machine gave one
configuration a CV of 62% between rounds, which a plain fsync's 2-3x effect did not
survive at 3 rounds).
Markdown has the seeds' rounds x configurations table; JSON follows its schema; the HTML
report is opened in headless Chromium."""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import struct
import subprocess
import sys
from pathlib import Path

import pytest

import chromium
from conftest import pgsweep, requires_pg, run_shared

WORK_ON_DISK = True  # see conftest: device bytes written per transaction, which tmpfs has not

SCRIPT = "<script>alert(1)</script>"
ROUNDS = 3  # two gave, once, a paired error on 1 degree of freedom: [-99%, +3,215,260%]
EXPERIMENT = f"""
[experiment]
name = "report-2x2"
seed = 11
[cluster]
scale = 1
[server]
commit_delay = 10000
commit_siblings = 0
[workload]
script = "tpcb-like"
clients = 1
jobs = 1
duration = "2s"  # the per-second plots need two seconds a trial to draw a line
warmup = "0s"
rate = 500  # far above the delayed commits' 100/s at most (conftest.MECHANICS)
[repeat]
rounds = {ROUNDS}
[factors]
server.application_name = ["plain", "{SCRIPT}"]
server.synchronous_commit = ["on", "off"]
"""
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One real run shared by the tests of this module."""
    return run_shared(tmp_path_factory, "report", EXPERIMENT)


def _json(results: Path) -> dict:
    res = pgsweep("report", str(results), "--format", "json")
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


@requires_pg
def test_a_a_factor_is_not_called_different(results: Path) -> None:
    """application_name cannot change performance. The effects family holds its false
    "different" rate at alpha (tests/unit/test_simulations measures it on recorded noise);
    here the test asks for no strong evidence (adjusted p > 0.001), which a broken analysis
    (per-second samples as replicates, unpaired rounds on a wandering machine) fails."""
    data = _json(results)
    main = {(e["factor"], e["metric"]): e for e in data["effects"] if e["kind"] == "main"}
    aa = main[("server.application_name", "tps")]
    assert aa["p_adjusted"] > 0.001, aa
    assert (aa["decision"] == "different") == (not aa["ci_low"] <= 1 <= aa["ci_high"]), aa
    sync = main[("server.synchronous_commit", "tps")]
    assert sync["verdict"].startswith("faster: +"), sync  # commits without waiting on fsync
    assert sync["decision"] == "different" and sync["ci_low"] > 1
    # pooled, or paired when one configuration was clearly noisier in this run (a loaded
    # machine): either way the rounds are the replicates
    assert sync["replicates"] == ROUNDS and sync["error"] in ("pooled", "paired")


@requires_pg
def test_json_schema_and_baseline_option(results: Path) -> None:
    data = _json(results)
    assert set(data) == {
        "experiment", "factors", "whole_plot_factors", "baseline", "configurations",
        "comparisons", "effects", "rounds", "drift", "method", "warnings", "replication",
        "builds", "phases", "names", "headline", "explain", "fleet",
    }  # fmt: skip
    # issue 26's explain panels: one per configuration called different, in that order,
    # each opening on the verdict and naming what changed beside it
    called = [c["config"] for c in data["comparisons"]
              if c["metric"] == "tps" and c["decision"] == "different"]  # fmt: skip
    assert called and [p["config"] for p in data["explain"]] == called
    for p in data["explain"]:
        assert p["sentence"].startswith("TPS faster, +") and p["rows"], p["sentence"]
        assert {"key", "name", "before", "after", "change", "verdict", "decision", "size"} <= set(
            p["rows"][0])
    assert data["names"] == {"c01": "baseline", "c02": "synchronous_commit off",
                             "c03": f"application_name {SCRIPT}",
                             "c04": f"application_name {SCRIPT}, synchronous_commit off"}
    # the headline restates the model's verdicts: a line per factor, first level as reference
    lines = {h.get("factor"): h for h in data["headline"] if h["kind"] == "factor"}
    assert list(lines) == data["factors"]
    sync = next(e for e in data["effects"] if e["kind"] == "main" and e["metric"] == "tps"
                and e["factor"] == "server.synchronous_commit")  # fmt: skip
    pct = f"{(sync['ratio'] - 1) * 100:+,.0f}%"  # thousands separated: "+10,354%"
    assert lines["server.synchronous_commit"]["text"].startswith(
        f"synchronous_commit off vs on: faster, {pct} [")
    assert lines["server.synchronous_commit"]["contrasts"] == [sync["contrast"]]
    assert data["replication"] == []  # no standbys in this run
    assert data["builds"] == []  # the installed PostgreSQL only: no builds table
    assert [p["config"] for p in data["phases"]] == ["c01", "c02", "c03", "c04"]
    for p in data["phases"]:  # one load (one cluster), every trial's run on disk
        assert p["load"]["wal_bytes"]["n"] == 1 and p["load"]["wal_bytes"]["mean"] > 0
        assert p["run"]["device_bytes_written_per_tx"]["n"] == ROUNDS
    assert data["baseline"] == "c01" and len(data["configurations"]) == 4
    assert data["method"]["alpha"] == 0.05 and data["whole_plot_factors"] == []
    for c in data["configurations"]:
        s = c["summary"]["tps"]
        assert s["n"] == ROUNDS and s["min"] <= s["mean"] <= s["max"]
        assert s["ci_low"] < s["level"] < s["ci_high"]
        assert sorted(c["values"]["tps"]) == [str(r) for r in range(1, ROUNDS + 1)]
        assert c["negligible"] == []  # tpcb-like writes hundreds of WAL bytes per transaction
    tps = [c for c in data["comparisons"] if c["metric"] == "tps"]
    assert sorted(c["config"] for c in tps) == ["c02", "c03", "c04"]
    for c in tps:  # simultaneous intervals: the decision and the interval never disagree
        assert c["ci_low"] <= c["ratio"] <= c["ci_high"] and 0 < c["p_adjusted"] <= 1
        assert (c["decision"] == "different") == (c["p_adjusted"] < 0.05), c
    (it,) = [e for e in data["effects"] if e["kind"] == "interaction" and e["metric"] == "tps"]
    assert [t["factor"] for t in it["terms"]] == data["factors"]
    assert [r["round"] for r in data["rounds"]] == list(range(1, ROUNDS + 1))
    res = pgsweep("report", str(results), "--format", "json",
                  "--baseline", "server.synchronous_commit=off", "--alpha", "0.01")  # fmt: skip
    other = json.loads(res.stdout)
    base = next(c for c in other["configurations"] if c["id"] == other["baseline"])
    assert base["levels"]["server.synchronous_commit"] == "off"
    assert other["method"]["alpha"] == 0.01
    wider = {c["config"]: c for c in other["comparisons"] if c["metric"] == "tps"}
    narrow = {c["config"]: c for c in data["comparisons"] if c["metric"] == "tps"}
    # the new baseline is c02 (plain, off): c01 against it is the pair c02 against c01 seen
    # from the other side, with a 99% interval that is wider than the 95% one
    flip, before = wider["c01"], narrow["c02"]
    assert abs(flip["ratio"] * before["ratio"] - 1) < 1e-9
    assert flip["ci_high"] / flip["ci_low"] > before["ci_high"] / before["ci_low"]
    bad = pgsweep("report", str(results), "--baseline", "nonsense")
    assert bad.returncode == 2 and "FACTOR=LEVEL" in bad.stderr
    bad = pgsweep("report", str(results), "--alpha", "0.5")
    assert bad.returncode == 2 and "--alpha" in bad.stderr


@requires_pg
def test_markdown_has_rounds_by_configurations_with_mean_and_median(results: Path) -> None:
    res = pgsweep("report", str(results), "--format", "markdown")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("|  | c01"))
    assert lines[header].count("| c0") == 4
    rows = [line.split("|")[1].strip() for line in lines[header + 2 : header + 5 + ROUNDS]]
    assert rows[0] == "levels" and rows[ROUNDS + 1 :] == ["**mean**", "**median**"]
    rounds = [r.split(" (")[0] for r in rows[1 : ROUNDS + 1]]
    assert rounds == [f"round {i}" for i in range(1, ROUNDS + 1)]
    data = _json(results)
    c01 = data["configurations"][0]["summary"]["tps"]
    mean_cell = lines[header + 3 + ROUNDS].split("|")[2].strip()
    assert mean_cell == f"{c01['mean']:,.1f}"
    assert "## Against the baseline" in res.stdout and "faster: +" in res.stdout


@requires_pg
def test_terminal_report_fits_100_columns_headline_first(results: Path) -> None:
    """In 100 columns: the headline before the table, no line longer, every configuration
    on one line with its verdict; names too long for the column become factor letters and
    level numbers, with a legend."""
    res = subprocess.run([sys.executable, "-m", "pgsweep.cli", "report", str(results)],
                         capture_output=True, text=True, timeout=300,
                         env=dict(os.environ, NO_COLOR="1", COLUMNS="100"))  # fmt: skip
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert max(len(line) for line in lines) <= 100, res.stdout
    table = next(i for i, line in enumerate(lines) if line.startswith("id "))
    first = next(i for i, line in enumerate(lines) if line.startswith(" • "))
    assert first < table and "…" not in res.stdout
    joined = " ".join(res.stdout.split())
    assert "synchronous_commit off vs on: faster, +" in joined
    rows = {line.split()[0]: line for line in lines[table + 1 : table + 5]}
    assert sorted(rows) == ["c01", "c02", "c03", "c04"]
    assert rows["c01"].rstrip().endswith("baseline")
    assert re.search(r" (B2|B=off) ", rows["c02"]) and "faster +" in rows["c02"]
    assert any(line.startswith("B = server.synchronous_commit") for line in lines)


@requires_pg
def test_html_report_in_headless_chromium(results: Path, tmp_path: Path) -> None:
    """The report answers first (headline, then its plot, then folded details), is one
    offline file, and in a real browser at 1280 and 390 px draws every plot, throws no
    error, fits the phone's width, and zooms the per-second plots on a drag."""
    if chromium.browser() is None:
        pytest.skip("chromium is not installed (scripts/setup.sh --dev installs it)")
    html = tmp_path / "report.html"
    res = pgsweep("report", str(results), "--format", "html", "-o", str(html))
    assert res.returncode == 0, res.stderr
    text = html.read_text()
    # self-contained: nothing to fetch (xmlns names are identifiers, not requests)
    assert not re.search(r"""(?:src|href)\s*=\s*["']?(?:https?:)?//""", text)
    assert "<link" not in text and "@import" not in text and "url(" not in text
    assert SCRIPT not in text and "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    # the answer first: headline sentences, their plot, then the details, folded
    order = [text.index(m) for m in ('id="headline"', 'data-plot="tps-change"',
                                     'id="explain"', 'id="details"')]  # fmt: skip
    assert order == sorted(order) and "<details open" not in text
    assert text.index("<details", order[3]) > order[3]  # the details fold (the explain
    # panels fold their figures without a significant change too)
    assert "synchronous_commit off vs on: faster, +" in text
    # tpcb-like writes: its bytes-per-transaction plot is drawn
    assert 'data-plot="bytes"' in text and "data-plot-left-out" not in text
    ARTIFACTS.mkdir(exist_ok=True)
    with chromium.Page(tmp_path) as page:
        for width in (1280, 390):
            page.open(html.as_uri(), width)
            seen = chromium.probe(page)
            _drawn_and_zoomable(seen, width)
            page.screenshot(ARTIFACTS / f"report-{width}.png", width)
        assert page.errors() == []  # no script error, console error or warning
    for width in (1280, 390):  # the whole page: as wide as the window, long, not blank
        png = (ARTIFACTS / f"report-{width}.png").read_bytes()
        shape = struct.unpack(">II", png[16:24])  # the IHDR chunk: width, height
        assert shape[0] == width and shape[1] > 2000 and len(png) > 100_000, shape


def _drawn_and_zoomable(seen: dict, width: int) -> None:
    assert seen["viewport"] == width and seen["scrollWidth"] <= width, seen  # no sideways page
    names = [p["name"] for p in seen["plots"]]
    expected = {"tps", "latency", "bytes", "tps-over-time", "p99-over-time", "dirty-over-time"}
    assert names[0] == "tps-change" and expected <= set(names), names
    for p in seen["plots"]:  # drawn: marks laid out with a size, tooltips on them
        assert p["svgs"] >= 2 and p["drawn"] >= 4 and p["titles"] >= 4, p
        assert p["width"] > 0.8 * min(width, 1100) - 40 and p["height"] > 60, p
        assert p["right"] <= width, p
    zoom = seen["zoom"]  # a drag from 1/4 to 1/2 of the plot zooms into that stretch
    lo, hi = (float(v.replace(",", "")) for v in zoom["before"].split())
    zlo, zhi = (float(v.replace(",", "")) for v in zoom["after"].split())
    assert abs(zlo - (lo + (hi - lo) / 4)) < 0.05 * (hi - lo), zoom
    assert abs(zhi - (lo + (hi - lo) / 2)) < 0.05 * (hi - lo), zoom
    assert zoom["labelsAfter"] != zoom["labelsBefore"] and zoom["reset"] == zoom["before"]
    assert "second" in zoom["readout"] and "TPS" in zoom["readout"], zoom


@requires_pg
def test_compare_two_folders_warns_when_environments_differ(results: Path, tmp_path: Path) -> None:
    """A copy of the real results, as if measured after a kernel upgrade that tripled the
    TPS of c02: between two sessions compare shows that but gives no verdict (their drift
    is not measured); with an A/A calibration (the results and a copy 1% faster) it calls
    c02 faster and leaves the others alone; it warns about the kernel either way."""
    after, calib = tmp_path / "after", tmp_path / "calib"
    for folder, sql in ((after, "UPDATE trial SET tps = tps * 3 WHERE config_id = 'c02'"),
                        (calib, "UPDATE trial SET tps = tps * 1.01")):  # fmt: skip
        shutil.copytree(results, folder, ignore=shutil.ignore_patterns(".pgsweep-work-*"))
        db = sqlite3.connect(folder / "results.db")
        with db:
            db.execute(sql)
            db.execute(
                "UPDATE environment SET value = '9.9.9' WHERE scope = 'host' AND name = 'kernel'"
            )
        db.close()
    res = pgsweep("compare", str(results), str(after), "--json")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    by = {(r["levels"]["server.application_name"], r["levels"]["server.synchronous_commit"]): r
          for r in data["matched"]}  # fmt: skip
    assert len(by) == 4 and not data["only_in_a"] and not data["only_in_b"]
    assert by[("plain", "off")]["verdict"].startswith("+200.0%, drift between the sessions")
    assert all(r["decision"] == "drift not measured" and r["ci_low"] is None for r in by.values())
    assert any("differ in kernel" in w and "'9.9.9'" in w for w in data["warnings"])
    assert data["warnings"][0].startswith("the folders ran in different sessions")
    res = pgsweep("compare", str(results), str(after), "--json", "--calibration", str(results),
                  "--calibration", str(calib))  # fmt: skip
    data = json.loads(res.stdout)
    by = {(r["levels"]["server.application_name"], r["levels"]["server.synchronous_commit"]): r
          for r in data["matched"]}  # fmt: skip
    assert by[("plain", "off")]["verdict"].startswith("faster: +200.0%")
    others = [r for k, r in by.items() if k != ("plain", "off")]
    assert all(r["verdict"].startswith("no significant difference (+0.0%") for r in others)
    assert "calibration" in data["notes"][0]
    for r in data["matched"]:  # simultaneous intervals: verdict and interval agree
        assert (r["decision"] == "no significant difference") == (r["ci_low"] <= 1 <= r["ci_high"])
    text = pgsweep("compare", str(results), str(after))
    assert text.returncode == 0 and "warning: the environments differ in kernel" in text.stdout
