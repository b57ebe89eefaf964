"""Explain collection's parsers and the explain analysis, on data recorded from real runs
(tests/data/explain: /proc and pg_stat_activity of PostgreSQL 15 under pgbench; results
of a synchronous_commit run and of an A/A run). Touches nothing outside memory and the
test's own folder."""

from __future__ import annotations

import math
import re
import shutil
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from pgsweep.analysis import analyse
from pgsweep.analysis.explain import Design, judge, panel
from pgsweep.collect import processes, waits
from pgsweep.collect.processes import NAN, Snapshot, Usage
from pgsweep.host.recording import RecordingHost

DATA = Path(__file__).resolve().parents[1] / "data" / "explain"
PROC = DATA / "proc"
PM = 12598
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))


def _proc_host() -> RecordingHost:
    files = {f"/proc/{PM}/stat": (PROC / "postmaster.stat").read_text(),
             f"/proc/{PM}/task/{PM}/children": (PROC / "children").read_text()}  # fmt: skip
    for pid in (PROC / "children").read_text().split():
        for part in ("stat", "status", "cmdline"):
            files[f"/proc/{pid}/{part}"] = (PROC / f"{pid}.{part}").read_text()
    return RecordingHost(files=files)


def test_postmaster_children_are_read_and_classified_by_title() -> None:
    snap = processes.snapshot(_proc_host(), PM, None, frozenset({12616}))
    kinds = {pid: u.kind for pid, u in snap.processes.items()}
    assert kinds == {12599: "checkpointer", 12600: "background writer", 12602: "walwriter",
                     12603: "autovacuum launcher", 12604: "logical replication launcher",
                     12615: "client backend"}  # 12616 skipped: as the sampler's own  # fmt: skip
    backend = snap.processes[12615]
    # utime 47, stime 28 ticks; 14304 and 7036 switches; 1377 minor faults, none major
    assert backend.values == (0.47, 0.28, 14304.0, 7036.0, 1377.0, 0.0)
    assert snap.postmaster is not None and backend.started > snap.postmaster.started
    assert snap.postmaster.children == (0.11, 0.08, 13798.0, 0.0)  # cutime 11, cstime 8 ticks
    assert snap.client == ()  # no client host asked


def test_a_snapshot_reads_the_host_twice_whatever_the_number_of_processes() -> None:
    """Sampled 5 times a second: on a remote host each read is a message to its agent (a
    read per file was 32 messages a tick with ten processes). A process gone between the
    two reads is left out, the others kept."""

    class Counting(RecordingHost):
        def read_texts(self, paths: Sequence[Path]) -> list[str | None]:
            self.batches.append(len(paths))
            return super().read_texts(paths)

        def read_text(self, path: Path) -> str:
            if str(path) == "/proc/12599/status":  # the checkpointer exited after its stat
                raise FileNotFoundError(path)
            return super().read_text(path)

    host = Counting(files=_proc_host().files)
    host.batches = []
    snap = processes.snapshot(host, PM, None, frozenset({12616}))
    children = len((PROC / "children").read_text().split())
    assert host.batches == [2, 3 * (children - 1)]  # the postmaster's; its children's
    assert 12599 not in snap.processes and 12615 in snap.processes  # the checkpointer "gone"


@pytest.mark.parametrize(("title", "kind"), [
    ("postgres: walsender rep [local] streaming 0/3000148", "walsender"),
    ("postgres: main: autovacuum worker postgres", "autovacuum worker"),
    ("postgres: parallel worker for PID 4242", "parallel worker"),
    ("postgres: walwriter: user db [local] idle", "client backend"),  # cluster "walwriter"
    ("postgres: checkpointer", "checkpointer"),
    ("/usr/lib/postgresql/15/bin/postgres -D /x", "client backend"),  # not yet retitled
])  # fmt: skip
def test_titles_of_other_processes(title: str, kind: str) -> None:
    assert processes.classify(title) == kind


def _u(kind: str, started: int, *values: float, children: tuple[float, ...] = ()) -> Usage:
    return Usage(kind, started, tuple(values), children)


def test_window_delta_counts_births_exits_and_reused_pids() -> None:
    pm0 = _u("postmaster", 1, 0, 0, 0, 0, 0, 0, children=(1.0, 1.0, 100.0, 0.0))
    pm1 = _u("postmaster", 1, 0, 0, 0, 0, 0, 0, children=(3.5, 2.0, 700.0, 1.0))
    before = Snapshot(pm0, {10: _u("walwriter", 5, 1.0, 1.0, 50, 5, 10, 0),
                            11: _u("client backend", 6, 2.0, 1.0, 10, 1, 100, 0),
                            12: _u("checkpointer", 7, 0, 0, 0, 0, 0, 0)},
                      (0.1, 0.2, 30.0, 0.0))  # fmt: skip
    seen = {20: _u("client backend", 30, 1.0, 0.5, 400, 40, 300, 0),  # born, then gone
            12: _u("autovacuum worker", 31, 9, 9, 9, 9, 9, 9)}  # pid 12 reused, gone too
    after = Snapshot(pm1, {10: _u("walwriter", 5, 1.5, 1.25, 80, 6, 12, 0),
                           21: _u("client backend", 40, 0.5, 0.5, 100, 10, 50, 0)},
                     (1.1, 1.7, 90.0, 0.0))  # fmt: skip
    out = {k: (n, v) for k, n, v in processes.delta(before, after, seen)}
    assert out["walwriter"] == (1, (0.5, 0.25, 30.0, 1.0, 2.0, 0.0))
    assert out["checkpointer"] == (1, (0.0,) * 6)  # gone after the start, unseen since
    assert out["autovacuum worker"] == (1, (9.0,) * 6)  # pid 12 again: another process
    # 20 and 21 from their birth; 11, gone, seen at the start only
    assert out["client backend"] == (3, (1.5, 1.0, 500.0, 50.0, 350.0, 0.0))
    # the gone ones (11, 12 twice, 20) are of three types: what the postmaster reaped
    # (2.5 s, 1.0 s, 600 and 1 faults) beyond what was seen of them (12 s, 10.5 s, 409, 9)
    # is "exited": faults only here, and no context switches (/proc keeps none)
    n, ex = out["exited"]
    assert n == 4 and ex[:2] == (0.0, 0.0) and ex[4:] == (191.0, 0.0)
    assert math.isnan(ex[2]) and math.isnan(ex[3])
    pg = out["pgbench client"]
    assert pg[1][:2] == pytest.approx((1.0, 1.5)) and math.isnan(pg[1][2]) and pg[1][4] == 60
    assert processes.delta(Snapshot(), Snapshot()) == []


def test_what_gone_processes_used_after_last_seen_goes_to_their_type() -> None:
    pm0 = _u("postmaster", 1, 0, 0, 0, 0, 0, 0, children=(0.0, 0.0, 0.0, 0.0))
    pm1 = _u("postmaster", 1, 0, 0, 0, 0, 0, 0, children=(3.0, 1.0, 500.0, 0.0))
    seen = {20: _u("client backend", 30, 1.0, 0.5, 400, 40, 300, 0),
            21: _u("client backend", 31, 1.0, 0.25, 400, 40, 100, 0)}
    out = processes.delta(Snapshot(pm0, {}), Snapshot(pm1, {}), seen)
    # both born and gone inside the window: seen 2.0 s user, 0.75 s system, 400 faults;
    # reaped 3.0, 1.0, 500: the rest, 1.0, 0.25 and 100, is theirs too
    assert out == [("client backend", 2, (3.0, 1.0, 800.0, 80.0, 500.0, 0.0))]
    mixed = {**seen, 22: _u("autovacuum worker", 32, 0, 0, 0, 0, 0, 0)}
    kinds = [k for k, _, _ in processes.delta(Snapshot(pm0, {}), Snapshot(pm1, {}), mixed)]
    assert kinds == ["autovacuum worker", "client backend", "exited"]
    assert math.isnan(NAN)  # the marker of a figure /proc does not keep


def test_wait_samples_from_recorded_pg_stat_activity() -> None:
    rows = [tuple(None if v == "" else v for v in line.split("|"))
            for line in (PROC / "activity.txt").read_text().splitlines()]  # fmt: skip
    keys = Counter(waits.classify(r) for r in rows)
    assert keys[("client backend", "Lock", "transactionid")] == 2
    assert keys[("client backend", "Client", "ClientRead")] == 3
    assert keys[("client backend", "Idle", "idle in transaction")] == 5  # no wait event
    assert keys[("walwriter", "Activity", "WalWriterMain")] == 5
    assert waits.classify(("client backend", "active", None, None)) == (
        "client backend", "CPU", "CPU")  # fmt: skip
    prof = {(b, c, e): s for b, c, e, s in waits.profile(keys, 5)}
    assert prof[("client backend", "Client", "ClientRead")] == pytest.approx(0.6)
    assert sum(s for (b, _, _), s in prof.items() if b == "client backend") == pytest.approx(2)
    # the sampler on a (recording) connection: samples each time anew, own pid kept apart;
    # its query asks for each process's pid too (the capture predates it: one made up per
    # line), which it keeps with the process's type
    with_pid = [(*r, 100 + i) for i, r in enumerate(rows)]
    per = iter(range(10**6))
    host = RecordingHost(sql=lambda q, p: [(4242,)] if "pg_backend_pid()" in q.split("FROM")[0]
                         and "pg_stat_activity" not in q
                         else with_pid[next(per) % len(rows):][:7])  # fmt: skip
    ticks: list[int] = []
    sampler = waits.WaitSampler(lambda: host.connect({}), hz=200,
                                tick=lambda: ticks.append(1), tick_every=2)  # fmt: skip
    sampler.start()
    deadline = time.monotonic() + 30
    while sampler.samples < 6 and sampler.error is None and time.monotonic() < deadline:
        time.sleep(0.005)
    sampler.stop()
    assert sampler.pid == 4242 and sampler.error is None and sampler.samples >= 6
    assert sum(sampler.counts.values()) == 7 * sampler.samples and ticks
    assert sampler.rate() > 10
    assert sampler.types[100] == str(rows[0][0])
    assert set(sampler.seen) <= set(range(100, 100 + len(rows)))


def _copy(tmp_path: Path, name: str) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    shutil.copy(DATA / name / "results.db", folder / "results.db")
    return folder


def test_synchronous_commit_panel_names_the_wal_sync_first(tmp_path: Path) -> None:
    from pgsweep.store import Results

    with Results(_copy(tmp_path, "sc")) as r:
        a = analyse(r)
        p = panel(a, r, "c02")
    assert a.explain and a.explain[0]["config"] == "c02"  # TPS called different: a panel
    first = p.rows[0]
    assert (first.metric.key, first.decision, first.words()) == ("pg.wal_sync", "different",
                                                                 "lower")  # fmt: skip
    assert first.before > 0.9 and first.after < 0.01  # a sync per commit, or next to none
    called = [r for r in p.rows if r.decision == "different"]
    assert p.rows[: len(called)] == called  # the changes called different come first
    assert [r.size for r in called] == sorted((r.size for r in called), reverse=True)
    assert p.sentence.startswith("TPS faster, +") and "WAL syncs / tx -100%" in p.sentence
    walsync = next(r for r in p.rows if r.metric.key == "wait.client backend.IO:WALSync")
    assert walsync.before > 0.05 and walsync.after == 0 and walsync.scale == "difference"
    assert p.compared == len(p.rows) and p.alpha == 0.05
    assert any(w["label"] == "waits on IO:WALSync" and w["after"] == 0 for w in p.profile)
    # the one setting whose value in force differs (paths and ports of each cluster aside)
    assert p.settings == [{"name": "synchronous_commit", "before": "on (configuration file)",
                           "after": "off (configuration file)"}]  # fmt: skip


def test_a_a_panels_rarely_call_anything_different_and_see_an_injected_change() -> None:
    from explain_aa import draw, inject, load

    table, known, design, rounds = load(DATA / "aa")
    rng = np.random.default_rng(3)
    false, seen_wal, seen_cpu, n = 0, 0, 0, 60
    for _ in range(n):
        t, chosen = draw(table, rounds, 6, rng)
        rows, m = judge(design, t, known, "c02", "c01", chosen, 0.05)
        assert m >= 15 and len(rows) == m
        false += any(r.decision == "different" for r in rows)
        got, _ = judge(design, inject(t, "cpu.client backend.cpu_us", 1.5, False), known,
                       "c02", "c01", chosen, 0.05)  # fmt: skip
        wal = next(r for r in got if r.metric.key == "cpu.client backend.cpu_us")
        seen_wal += wal.decision == "different" and wal.change == pytest.approx(1.5, rel=0.1)
        got, _ = judge(design, inject(t, "wait.client backend.CPU:CPU", 0.25, True), known,
                       "c02", "c01", chosen, 0.05)  # fmt: skip
        cpu = next(r for r in got if r.metric.key == "wait.client backend.CPU:CPU")
        seen_cpu += cpu.decision == "different" and cpu.low < 0.25 < cpu.high
    assert false <= 0.12 * n  # 5% expected (bench/explain_aa: the full figure)
    assert seen_wal >= 0.9 * n and seen_cpu >= 0.9 * n


def test_design_alone_judges_without_a_results_folder() -> None:
    """judge() on a made-up table: a figure at 0 in one configuration and ~0.3 in the other
    is a difference, ranked before a 1% ratio change that is noise."""
    rng = np.random.default_rng(1)
    rounds = list(range(1, 7))
    from pgsweep.analysis.explain_data import PER_TX, SHARE, Metric

    known = {"w": Metric("w", "waits on IO:WALSync", "% of session time", SHARE, 0.005),
             "x": Metric("x", "WAL bytes / tx", "B", PER_TX, 1e-4)}  # fmt: skip
    table = {"w": {"c01": {r: 0.3 + rng.normal(0, 0.02) for r in rounds},
                   "c02": {r: 0.0 for r in rounds}},
             "x": {"c01": {r: 1000 * math.exp(rng.normal(0, 0.05)) for r in rounds},
                   "c02": {r: 1010 * math.exp(rng.normal(0, 0.05)) for r in rounds}}}
    design = Design({"c01": {"f": "a"}, "c02": {"f": "b"}})
    rows, m = judge(design, table, known, "c02", "c01", rounds, 0.05)
    assert m == 2 and [r.metric.key for r in rows] == ["w", "x"]
    assert rows[0].decision == "different" and rows[0].clause().startswith(
        "waits on IO:WALSync fell from 3")  # fmt: skip
    assert rows[1].decision != "different" and rows[1].scale == "ratio"


def test_panel_in_the_terminal_markdown_and_html(tmp_path: Path) -> None:
    import io

    from rich.console import Console

    from pgsweep.outputs import explain as out
    from pgsweep.outputs import html
    from pgsweep.outputs.report import render_markdown
    from pgsweep.store import Results

    with Results(_copy(tmp_path, "sc")) as r:
        a = analyse(r)
        buffer = io.StringIO()
        out.run(r, "c02", None, None, False, False, Console(file=buffer, width=100))
        page = html.render(a, r)
    lines = buffer.getvalue().splitlines()
    assert lines[0] == "c02 (synchronous_commit off) vs c01 (baseline), 4 rounds"
    assert max(len(line) for line in lines) <= 100
    assert any(line.startswith("WAL syncs / tx ") and line.endswith("lower") for line in lines)
    assert "explain figures judged as one family" in buffer.getvalue()
    assert "settings that differ: synchronous_commit on → off" in lines
    md = render_markdown(a)
    assert "## Why: what changed beside each verdict" in md and "| WAL syncs / tx |" in md
    assert "Settings that differ: synchronous_commit on → off" in md
    why = md[md.index("## Why"):]  # intervals "[-7, +36]" in cells: no Markdown link
    assert "\\[" in why and not re.search(r"(?<!\\)\[", why), why
    assert "<code>synchronous_commit</code> on (configuration file) → off" in page
    # before and after, stacked by wait state: the client backends' bars, then each other
    # process type's (this recording's: one more) folded under them
    client = page[:page.index('class="waits-other"')]
    assert client.count('class="wbar"') == 2
    assert page.count('class="wbar"') % 2 == 0 and page.count('class="wbar"') > 2
    assert "more figures without a significant change</summary>" in page
    assert 'title="waits on IO:WALSync: 0.0%"' not in page  # a state at 0 draws nothing


def test_pg_stat_io_cells_and_their_deltas() -> None:
    """pg_stat_io's form in PostgreSQL 16/17 (op_bytes; NULL where an operation cannot
    happen), as documented: only cells that counted something are kept, with bytes; a
    cell first seen in the closing snapshot counted 0 at the start."""
    from pgsweep.collect import counters

    def rows(q: str, p: object) -> list[tuple[object, ...]]:
        if "pg_attribute" in q:
            return [(1,)]
        assert q.startswith("SELECT backend_type, object, context, op_bytes, reads, writes")
        return [("client backend", "relation", "normal", 8192, 120, 3, 0, 7, 9000, 0, 0),
                ("checkpointer", "relation", "normal", 8192, None, 40, 0, None, None, None, 2),
                ("walwriter", "relation", "normal", 8192, 0, 0, 0, 0, 0, 0, 0)]

    with RecordingHost(sql=rows).connect({}) as conn:
        got = counters.stat_io(conn)
    assert got == {"io.client backend.relation.normal.reads": 120.0,
                   "io.client backend.relation.normal.read_bytes": 120.0 * 8192,
                   "io.client backend.relation.normal.writes": 3.0,
                   "io.client backend.relation.normal.write_bytes": 3.0 * 8192,
                   "io.client backend.relation.normal.extends": 7.0,
                   "io.client backend.relation.normal.extend_bytes": 7.0 * 8192,
                   "io.client backend.relation.normal.hits": 9000.0,
                   "io.checkpointer.relation.normal.writes": 40.0,
                   "io.checkpointer.relation.normal.write_bytes": 40.0 * 8192,
                   "io.checkpointer.relation.normal.fsyncs": 2.0}  # fmt: skip
    before = {"pg.wal_bytes": 10.0, "pg.io.checkpointer.relation.normal.writes": 30.0}
    after = {"pg.wal_bytes": 25.0, "pg.blks_read": 3.0,
             **{f"pg.{k}": v for k, v in got.items()}}  # fmt: skip
    d = counters.delta(before, after)
    assert d["pg.wal_bytes"] == 15 and "pg.blks_read" not in d  # not in both: no delta
    assert d["pg.io.checkpointer.relation.normal.writes"] == 10  # 40 - 30
    assert d["pg.io.checkpointer.relation.normal.fsyncs"] == 2  # 0 at the start
