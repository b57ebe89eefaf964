"""Explain collection and the explain panel on one real run with a known mechanism:
synchronous_commit on vs off. With "on" every commit waits for its WAL flush (a backend
syncs the WAL itself: wait event IO:WALSync, one WAL sync per transaction); with "off"
the walwriter writes and syncs in the background and no backend waits on it. The panel
must show that mechanism in its top lines, from figures stored per trial. The server
preloads pg_wait_sampling: the wait states are its profile (100 samples a second, each
process's type from pgsweep's own pg_stat_activity sampler). With cpu_profile, perf samples
the server's stacks after each configuration's round-1 window, and the HTML report draws
each panel's differential flame graph."""

from __future__ import annotations

import gzip
import json
import re
import sqlite3
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from conftest import pgsweep, requires_pg, run_shared
from pgsweep.collect import perf
from pgsweep.outputs import flamegraph

WORK_ON_DISK = True  # see conftest: WAL syncs and I/O waits a disk has and tmpfs has not

# 6 rounds, not 4: the panel judges its ~47 figures as one family (Bonferroni), and at 3
# degrees of freedom that asks a t of 12.7; one round's outlier on a loaded CI machine
# left the WAL syncs' hundredfold fall undecided (stop 42's CI, and ci49 before it). At 5
# degrees of freedom the critical t is 6.8.
ROUNDS = 6
EXPERIMENT = f"""
[experiment]
name = "explain"
seed = 7
cpu_profile = "2s"  # perf, after each configuration's round-1 window
[cluster]
scale = 1
[workload]
script = "tpcb-like"
clients = 2
jobs = 2
duration = "2s"
warmup = "0s"
[server]
# top statements too, and the wait states from pg_wait_sampling (Debian's package)
shared_preload_libraries = "pg_stat_statements,pg_wait_sampling"
[repeat]
rounds = {ROUNDS}
[factors]
server.synchronous_commit = ["on", "off"]
"""

# The work area stays on disk (not conftest's tmpfs): a WAL sync on tmpfs returns at once,
# and the waits on it this test looks for would not be there to see


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return run_shared(tmp_path_factory, "explain", EXPERIMENT)


def _rows(results: Path, sql: str) -> list[tuple]:  # type: ignore[type-arg]
    db = sqlite3.connect(results / "results.db")
    try:
        return db.execute(sql).fetchall()
    finally:
        db.close()


@requires_pg
def test_every_trial_stores_its_waits_and_cpu_by_process_type(results: Path) -> None:
    trials = [r[0] for r in _rows(results, "SELECT id FROM trial WHERE status = 'ok'")]
    assert len(trials) == 2 * ROUNDS
    waits = _rows(results, "SELECT trial_id, backend_type, wait_class, wait_event, sessions "
                           "FROM wait")  # fmt: skip
    hz = dict(_rows(results, "SELECT trial_id, value FROM metric "
                             "WHERE name = 'explain.wait_hz'"))  # fmt: skip
    cost = _rows(results, "SELECT trial_id, name, value FROM metric "
                          "WHERE name LIKE 'explain.sampler_%_cpu_s'")  # fmt: skip
    assert len(cost) == 2 * len(trials)  # the sampling backend's and thread's CPU
    assert all(0 <= v < 0.5 * 2 for _, _, v in cost), cost  # under half a core of a 2 s window
    source = dict(_rows(results, "SELECT trial_id, value FROM metric "
                                 "WHERE name = 'explain.wait_source'"))  # fmt: skip
    for tid in trials:
        assert hz[tid] == 100 and source[tid] == 1, (hz, source)  # pg_wait_sampling's 10 ms
        mine = [w for w in waits if w[0] == tid]
        # pgbench's two clients, every sample: about 2 client backend sessions in all
        clients = sum(w[4] for w in mine if w[1] == "client backend")
        assert 1.5 <= clients <= 2.1, mine
        aux = {w[1] for w in mine}
        assert {"walwriter", "checkpointer", "background writer"} <= aux, aux
        assert all(0 <= w[4] <= 2.1 for w in mine)
    cpu = _rows(results, "SELECT trial_id, process_type, processes, user_s + system_s, "
                         "voluntary_switches FROM process_cpu")  # fmt: skip
    for tid in trials:
        by = {r[1]: r for r in cpu if r[0] == tid}
        # pgbench's two backends, born and gone inside the window, are found and classified
        assert by["client backend"][2] >= 2 and by["client backend"][3] > 0, by
        assert by["client backend"][4] > 0, by
        assert by["pgbench client"][3] > 0 and by["pgbench client"][4] is None, by
        assert "walwriter" in by, by
    syncs = dict(_rows(results, "SELECT c.trial_id, c.value / m.value FROM counter c JOIN metric "
                                "m ON m.trial_id = c.trial_id AND m.name = 'tx.ok' "
                                "WHERE c.name = 'pg.wal_sync'"))  # fmt: skip
    config = dict(_rows(results, "SELECT id, config_id FROM trial"))
    on = [v for t, v in syncs.items() if config[t] == "c01"]
    off = [v for t, v in syncs.items() if config[t] == "c02"]
    assert min(on) > 0.5 and max(off) < 0.2, (on, off)  # a flush per commit, or not


@requires_pg
def test_top_statements_are_the_workloads_with_a_call_per_transaction(results: Path) -> None:
    """pg_stat_statements, preloaded by the file: each trial keeps pgbench's statements
    with their text, none of pgsweep's own sessions (their sampling and snapshots), and
    each of tpcb-like's updates ran once per transaction of the window."""
    tx = dict(_rows(results, "SELECT id, transactions FROM trial WHERE status = 'ok'"))
    calls = _rows(results, "SELECT trial_id, name, value FROM counter "
                           "WHERE name LIKE 'pg.stmt.%.calls'")  # fmt: skip
    for tid, n in tx.items():
        gz = _rows(results, f"SELECT gz FROM artifact WHERE trial_id = '{tid}' "
                            "AND name = 'statements.tsv'")  # fmt: skip
        text = dict(line.split("\t", 1) for line in gzip.decompress(gz[0][0]).decode()
                    .splitlines())  # fmt: skip
        assert 1 <= len(text) <= 5, text
        assert not [t for t in text.values() if "pg_stat" in t or "pg_current" in t], text
        update = next(h for h, t in text.items() if t.startswith("UPDATE pgbench_accounts"))
        mine = {name.split(".")[2]: v for t, name, v in calls if t == tid}
        assert abs(mine[update] - n) <= 2, (tid, n, mine[update])  # pgbench's 2 clients
    res = pgsweep("explain", str(results), "--config", "c02", "--all")
    rows = [r for r in res.stdout.splitlines() if r.startswith("`UPDATE pgbench_accounts SET")]
    assert any("`: ms / call" in r for r in rows), res.stdout


@requires_pg
def test_explain_names_the_mechanism_first(results: Path) -> None:
    res = pgsweep("explain", str(results), "--config", "c02", "--all")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0].startswith(f"c02 (synchronous_commit off) vs c01 (baseline), {ROUNDS} rounds")
    sentence = " ".join(" ".join(lines[1 : lines.index("")]).split())  # unwrapped
    assert sentence.startswith("TPS ") and "WAL syncs / tx -" in sentence, sentence
    table = lines[lines.index("") + 1:]
    # ranked: the changes called different first, largest first; the WAL syncs (a sync
    # per commit, or next to none) lead, and the walwriter that took them over wakes once a
    # commit or so (its rank moves: on a loaded machine CPU figures were called different
    # too; and once, in ci49, one round's outlier left its rise of +3,514% not called at 4
    # rounds: its size is checked here, not its call)
    called = [r for r in table[1:] if r.endswith(("lower", "higher"))]
    assert table[1:len(called) + 1] == called, table
    assert any(r.startswith("WAL syncs / tx") and r.endswith("lower") for r in table[1:4]), table
    rows = {r["key"]: r for r in json.loads(pgsweep(
        "explain", str(results), "--config", "c02", "--json").stdout)["rows"]}
    woke = rows["cpu.walwriter.voluntary_switches"]
    # several times as often (about 10x idle; 9.8x once under another process's load,
    # stop 37): a figure of another process type, or the sides swapped, is near 1x or below
    assert woke["after_value"] > 5 * woke["before_value"], woke
    # the model's estimate is a rise too (a ratio above 1, or a difference above 0)
    assert woke["change_value"] > (1 if woke["scale"] == "ratio" else 0), woke
    walsync = next(line for line in table if line.startswith("waits on IO:WALSync"))
    # with the commits async next to nobody waits on a WAL sync (a backend still flushes
    # when the WAL buffers fill: 0.3% of session time once, on a loaded machine)
    before, after = (float(v.rstrip("%")) for v in walsync.split()[3:5])
    assert before >= 5 and after < 2, walsync
    assert "explain figures judged as one family" in res.stdout
    assert "wait states sampled by pg_wait_sampling, 100 times a second." in res.stdout


@requires_pg
def test_explain_json_against_and_bad_names(results: Path) -> None:
    res = pgsweep("explain", str(results), "--config", "c01", "--against", "c02", "--json")
    assert res.returncode == 0, res.stderr
    p = json.loads(res.stdout)
    assert (p["config"], p["against"]) == ("c01", "c02") and p["family"] == len(p["rows"])
    row = next(r for r in p["rows"] if r["key"] == "pg.wal_sync")
    assert row["decision"] == "different" and row["change_value"] > 10  # the other way round
    assert p["profile"] and {"label", "before", "after"} <= set(p["profile"][0])
    res = pgsweep("explain", str(results), "--config", "c09")
    assert res.returncode == 2 and "no configuration c09" in res.stderr, res.stderr


@requires_pg
def test_export_and_reports_carry_the_explain_figures(results: Path, tmp_path: Path) -> None:
    out = tmp_path / "waits.parquet"
    res = pgsweep("export", str(results), "--what", "waits", "--format", "parquet", "-o", str(out))
    assert res.returncode == 0, res.stderr
    waits = pq.read_table(out).to_pylist()
    assert {"config_id", "server.synchronous_commit", "round", "trial_id", "backend_type",
            "wait_class", "wait_event", "sessions"} <= set(waits[0])  # fmt: skip
    rounds = range(1, ROUNDS + 1)
    assert {w["trial_id"] for w in waits} == {f"r{r}-c0{c}" for r in rounds for c in (1, 2)}
    res = pgsweep("export", str(results), "--what", "cpu", "-o", str(tmp_path / "cpu.csv"))
    assert res.returncode == 0 and "process_type" in (tmp_path / "cpu.csv").read_text()
    report = pgsweep("report", str(results), "--format", "json")
    data = json.loads(report.stdout)
    called = [c["config"] for c in data["comparisons"]
              if c["metric"] == "tps" and c["decision"] == "different"]  # fmt: skip
    assert [p["config"] for p in data["explain"]] == called  # a panel per verdict "different"
    md = pgsweep("report", str(results), "--format", "markdown").stdout
    assert ("## Why: what changed beside each verdict" in md) == bool(called)


@requires_pg
def test_round_one_trials_carry_a_cpu_profile_and_the_panel_its_flame_graph(
    results: Path, tmp_path: Path
) -> None:
    rows = _rows(results, "SELECT t.id, t.round, a.gz FROM trial t LEFT JOIN artifact a "
                          "ON a.trial_id = t.id AND a.name = 'profile.folded'")  # fmt: skip
    assert not _rows(results, "SELECT trial_id FROM artifact WHERE name = 'profile.err'")
    for tid, rnd, gz in rows:
        assert (gz is not None) == (rnd == 1), tid  # round 1 only
        if gz is None:
            continue
        stacks = [line.rsplit(" ", 1) for line in gzip.decompress(gz).decode().splitlines()]
        assert stacks and all(s.startswith("postgres;") and n.isdigit() for s, n in stacks)
        # a server's stacks, named: the backends' main loop under them
        assert any(";PostgresMain;" in s for s, _ in stacks), stacks[:5]
    # the differential graph of the two configurations' real profiles
    folded = {cfg: perf.parse(gzip.decompress(gz).decode()) for cfg, gz in _rows(
        results, "SELECT t.config_id, a.gz FROM trial t JOIN artifact a ON a.trial_id = t.id "
        "AND a.name = 'profile.folded'")}  # fmt: skip
    svg = flamegraph.svg(folded["c02"], folded["c01"], "off against on")
    assert svg.startswith('<svg class="flame"') and "PostgresMain" in svg
    fills = set(re.findall(r'fill="rgb\((\d+),(\d+),(\d+)\)"', svg))
    assert any(r == "255" and g != "255" for r, g, _ in fills)  # some frames grew (red)
    assert any(b == "255" and g != "255" for _, g, b in fills)  # some shrank (blue)
    out = tmp_path / "report.html"
    res = pgsweep("report", str(results), "--format", "html", "-o", str(out))
    assert res.returncode == 0, res.stderr
    html = out.read_text()
    called = '<section id="explain">' in html  # a panel where TPS was called different
    assert ('<svg class="flame"' in html) == called  # it carries the graph; nothing else does
    if called:  # beside the client backends' bars, the other process types' (walwriter's)
        others = html[html.index('class="waits-other"'):]
        assert "<figcaption>walwriter:" in others
        assert "<figcaption>client backend" not in others
    table = tmp_path / "profiles.parquet"
    res = pgsweep("export", str(results), "--what", "profiles", "--format", "parquet",
                  "-o", str(table))  # fmt: skip
    assert res.returncode == 0, res.stderr
    got = pq.read_table(table).to_pylist()
    assert {r["trial_id"] for r in got} == {tid for tid, rnd, _ in rows if rnd == 1}
    assert all(r["stack"].startswith("postgres;") and r["samples"] > 0 for r in got)
    assert "server.synchronous_commit" in got[0]
