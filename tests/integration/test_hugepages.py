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
from pgsweep.host.local import LOCAL
from pgsweep.layers import hugepages

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="huge page pools need root")



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
rate = 200  # conftest.MECHANICS
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
    levels = hugepages.offered(LOCAL)
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
    if res.returncode == 2:
        # the kernel refused even to map that much (more than RAM and swap, under its
        # overcommit heuristic): the start check of `plan` found it before anything was
        # made. Below RAM the scratch server starts, and the reservation fails each trial.
        assert "server.shared_buffers: a server with these settings does not start" in res.stderr
        assert not (tmp_path / "r").exists() and _pools() == before
        return
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


def _gigantic_pages_the_kernel_gives() -> int:
    """Ask the 1 GB pool for 24 more pages and give them back: how many it got."""
    nr = hugepages.pool(1024 * 1024) / "nr_hugepages"
    before = int(nr.read_text())
    try:
        nr.write_text(str(before + 24))
        return int(nr.read_text()) - before
    finally:
        nr.write_text(str(before))


@requires_pg
@root_only
def test_a_short_reservation_is_retried_after_making_room(
    tmp_path: Path, state_dir: Path
) -> None:
    """Ask for one 1 GB page more than the kernel gives right now: pgsweep drops the page
    cache (the trial warms up first), compacts memory and asks again; the trial runs if
    that made room, else fails saying what it got each time. Pools as they were after."""
    if "1GB" not in hugepages.offered(LOCAL):
        pytest.skip("no 1 GB huge page pool")
    got = _gigantic_pages_the_kernel_gives()
    if got >= 8 or _mem_available_gb() < got + 4:
        pytest.skip(f"the kernel gives {got} pages of 1 GB: too many to ask one more here")
    before = _pools()
    # shared memory of shared_buffers + ~150 MB: one page more than the kernel gave
    body = BODY.format(levels='["1GB"]').replace(
        'shared_buffers = "64MB"', f'shared_buffers = "{got * 1024 + 128}MB"'
    ).replace('warmup = "0s"', 'warmup = "1s"').replace("rounds = 2", "rounds = 1")
    res = pgsweep("run", str(write_experiment(tmp_path, body)), "--results", str(tmp_path / "r"))
    (row,) = trials(tmp_path / "r")
    events = json.loads(row["events_json"])
    assert "drop-caches" in events and "compact-memory" in events, events
    if row["status"] == "ok":  # the room made was enough
        assert res.returncode == 0, res.stderr + res.stdout
        assert json.loads(row["effective_json"])["os.huge_pages.reserved"] == str(got + 1)
    else:
        assert res.returncode == 3, res.stderr + res.stdout
        m = re.search(r"needs (\d+) pages of 1GB; the kernel reserved (\d+), then (\d+) after "
                      r"dropping the page cache and compacting memory", row["reason"])
        assert m, row["reason"]
        assert int(m.group(1)) == got + 1 and int(m.group(3)) <= got + 1
    assert _pools() == before
    assert not list(state_dir.glob("*.undo"))
