"""A merged fleet folder's report names each group's host facts and the ones that differ
(as `run --inventory` keeps them after comparing them before dispatch): folders written
through the real store and joined by the real merge (tests/synthetic.py)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from pgsweep.analysis import analyse
from pgsweep.outputs.sentences import fleet_lines
from pgsweep.plan import round_spans, shard_rounds
from pgsweep.store import Results, Store, merge
from synthetic import make_results

FACTORS = {"server.work_mem": ["4MB", "8MB"]}


def _fleet(tmp_path: Path, groups: int = 2, rounds: int = 4) -> Path:
    spans = shard_rounds(rounds, groups)
    tps = {(c, r): 1000.0 + 10 * c + r for c in range(2) for r in range(1, rounds + 1)}
    shards = []
    for k, span in enumerate(spans, 1):
        skip = {(c, r) for c in range(2) for r in range(1, rounds + 1) if r not in span}
        folder = make_results(tmp_path / f"g{k}", FACTORS, tps, rounds, name="f", skip=skip)
        store = Store(folder / "results.db")
        store.save_environment("fleet", {"shards": str(groups), "shard": str(k),
                                         "group": f"g{k}", "rounds": round_spans(span)})
        store.close()
        db = sqlite3.connect(folder / "results.db")
        db.execute("UPDATE trial SET host_group = ?, shard = ?", (f"g{k}", k))
        db.commit()
        db.close()
        (folder / "experiment.toml").write_text('[experiment]\nname = "f"\n')
        shards.append(folder)
    return merge.merge(shards, tmp_path / "fleet").folder


def test_each_groups_facts_and_the_ones_that_differ_are_reported(tmp_path: Path) -> None:
    fleet = _fleet(tmp_path)
    store = Store(fleet / "results.db")
    store.save_environment("hostfacts", {"kernel@g1": "6.1.0", "kernel@g2": "6.1.0",
                                         "microcode@g1": "0xa1", "microcode@g2": "0xa5"})
    store.save_environment("fleet", {"facts_differ": "microcode: g1 0xa1; g2 0xa5"})
    store.close()
    with Results(fleet) as r:
        a = analyse(r)
    assert a.fleet["facts"] == {"g1": {"kernel": "6.1.0", "microcode": "0xa1"},
                                "g2": {"kernel": "6.1.0", "microcode": "0xa5"}}
    lines = fleet_lines(a)
    assert any("different machines, as the file allows" in x and "microcode: g1 0xa1; g2 0xa5"
               in x for x in lines), lines  # fmt: skip


def test_a_fleet_merged_without_the_check_reports_no_facts(tmp_path: Path) -> None:
    with Results(_fleet(tmp_path)) as r:
        a = analyse(r)
    assert a.fleet["groups"] == ["g1", "g2"] and a.fleet["facts"] == {}
    assert not any("different machines" in x for x in fleet_lines(a))
