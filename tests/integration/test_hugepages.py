"""os.huge_pages on this machine's real kernel pools: the server maps its shared memory in
pages of the level's size (read from its smaps), the pools are sized from the server's own
count, a reservation larger than memory fails the trial and leaves the pool as it was, and
every pool is back to its original size after the run."""

from __future__ import annotations

import json
import os
import re
import sqlite3
from pathlib import Path

import pytest

from conftest import pgsweep, requires_pg, trials, write_experiment
from pgsweep.layers import hugepages

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="huge page pools need root")

WORK_ON_TMPFS = True  # see conftest: shared memory pages, not disks


def _pools() -> dict[int, int]:
    return {kb: int((hugepages.pool(kb) / "nr_hugepages").read_text())
            for kb in hugepages.LEVELS.values() if hugepages.pool(kb).is_dir()}  # fmt: skip


def _mem_available_gb() -> int:
    text = Path("/proc/meminfo").read_text()
    m = re.search(r"MemAvailable:\s+(\d+) kB", text)
    assert m
    return int(m.group(1)) // 1024**2


BODY = """
[experiment]
name = "huge"
seed = 11
[cluster]
scale = 1
[server]
shared_buffers = "64MB"
[workload]
script = "select-only"
clients = 1
duration = "2s"
warmup = "0s"
[repeat]
rounds = 2
[factors]
os.huge_pages = {levels}
"""


@requires_pg
@root_only
def test_each_level_is_mapped_by_the_server_and_pools_restored(
    tmp_path: Path, state_dir: Path
) -> None:
    levels = hugepages.offered()
    if "2MB" not in levels:
        pytest.skip("no 2 MB huge page pool")
    before = _pools()
    path = write_experiment(tmp_path, BODY.format(levels=json.dumps(levels)))
    res = pgsweep("run", str(path), "--results", str(tmp_path / "r"))
    assert res.returncode == 0, res.stderr + res.stdout
    db = sqlite3.connect(tmp_path / "r" / "results.db")
    configs = db.execute("SELECT id, levels_json FROM configuration").fetchall()
    config_level = {c: json.loads(lv)["os.huge_pages"] for c, lv in configs}
    mem = {(t, n): v for t, n, v in db.execute(
        "SELECT trial_id, name, value FROM metric WHERE name LIKE 'mem.hugepages%'")}  # fmt: skip
    db.close()
    rows = trials(tmp_path / "r")
    assert sorted(config_level[t["config_id"]] for t in rows) == sorted(levels * 2)
    assert all(t["status"] == "ok" for t in rows), [t["reason"] for t in rows]
    for t in rows:
        level, seen = config_level[t["config_id"]], json.loads(t["effective_json"])
        if level == "off":
            assert seen["huge_pages"] == "off"
            assert seen["os.huge_pages"].startswith("off")
            continue
        assert seen["huge_pages"] == "on" and seen["huge_page_size"] == (
            "2MB" if level == "2MB" else "1GB"
        )
        m = re.match(rf"{level}: (\d+) pages mapped \((\d+) kB\)", seen["os.huge_pages"])
        assert m, seen["os.huge_pages"]
        # 64MB of buffers plus the rest of shared memory: more than 64 MiB in those pages
        assert int(m.group(2)) > 64 * 1024
        # exactly the pages the server asked for are reserved, and it maps them all
        assert int(seen["os.huge_pages.reserved"]) == int(m.group(1))
        if level == "2MB":  # meminfo's HugePages_* count the default (2 MB) pool
            total = mem[(t["id"], "mem.hugepages_total")]
            assert total >= int(m.group(1))
            assert total - mem[(t["id"], "mem.hugepages_free")] > 0
    assert _pools() == before
    assert not list(state_dir.glob("*.undo"))


@requires_pg
@root_only
def test_more_pages_than_memory_fails_the_trial_and_leaves_the_pool(
    tmp_path: Path, state_dir: Path
) -> None:
    before = _pools()
    body = BODY.format(levels='["2MB"]').replace(
        'shared_buffers = "64MB"', f'shared_buffers = "{_mem_available_gb() + 2}GB"'
    )
    res = pgsweep("run", str(write_experiment(tmp_path, body)), "--results", str(tmp_path / "r"))
    assert res.returncode == 3, res.stderr + res.stdout  # the run finished, its trial failed
    rows = trials(tmp_path / "r")
    assert len(rows) == 2
    for row in rows:
        assert row["status"] == "failed"
        assert "os.huge_pages=2MB: the server's shared memory needs" in row["reason"]
        assert "nothing was reserved" in row["reason"]
    assert _pools() == before
    assert not list(state_dir.glob("*.undo"))


def test_smaps_parser_tells_hugetlb_from_thp() -> None:
    smaps = Path(__file__).parents[1] / "data" / "proc" / "postmaster-smaps-2MB.txt"
    assert hugepages.hugetlb_mappings(smaps.read_text()) == {2048: 147456}
