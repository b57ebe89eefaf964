"""`pgsweep doctor` reads this machine's real kernel files and changes none of them."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

from conftest import pgsweep
from pgsweep.collect import devices
from pgsweep.layers.workload_tools import program


def _snapshot() -> dict[str, str]:
    files = [
        *Path("/sys/kernel/mm/transparent_hugepage").glob("*enabled"),
        *Path("/sys/kernel/mm/hugepages").glob("*/nr_hugepages"),
        *devices.SYS_BLOCK.glob("*/queue/scheduler"),
    ]
    return {str(f): f.read_text() for f in files}


def test_doctor_reports_kernel_files_verbatim_and_changes_nothing() -> None:
    before = _snapshot()
    res = pgsweep("doctor")
    assert res.returncode == 0, res.stderr
    out = " ".join(res.stdout.split())
    thp = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    if thp.exists():  # the bracketed choice survives the table (it is not rich markup)
        assert " ".join(thp.read_text().split()) in out
    for size in Path("/sys/kernel/mm/hugepages").glob("hugepages-*"):
        assert size.name.removeprefix("hugepages-") in out
        assert f"{(size / 'nr_hugepages').read_text().strip()} reserved" in out
    pools = {"2MB": 2048, "1GB": 1048576}
    root = Path("/sys/kernel/mm/hugepages")
    offered = ["off"] + [lv for lv, kb in pools.items() if (root / f"hugepages-{kb}kB").is_dir()]
    assert "os.huge_pages levels" in out and ", ".join(offered) in out
    for queue in devices.SYS_BLOCK.glob("*/queue/scheduler"):
        assert " ".join(queue.read_text().split()) in out
    assert "/usr/lib/postgresql" in out and "layers" in out
    # what the replication layer can use here: netem is absent on this kernel, tc is not
    netem = any(Path("/lib/modules").glob("*/kernel/net/sched/sch_netem.ko*"))
    rows = {" ".join(cells[2].split()): " ".join(cells[3].split())
            for line in res.stdout.splitlines() if len(cells := line.split("│")) >= 5}  # fmt: skip
    assert rows["network: netem"] == ("yes" if netem else "no: replication.delay is refused")
    assert rows["network: tc"] == ("yes" if shutil.which("tc") else "no (apt-get install iproute2)")
    assert rows["sysbench"] == str(program())  # workload.tool = "sysbench" (its package)
    assert rows["pgreplay"] == str(program("pgreplay"))
    for fs, tool in (("ext4", "mkfs.ext4"), ("xfs", "mkfs.xfs"), ("btrfs", "mkfs.btrfs")):
        found = shutil.which(tool)
        assert f"storage │ {fs} │ {found}" in out if found else f"no {tool}" in out
    assert _snapshot() == before


def test_doctor_says_how_many_1gb_pages_the_kernel_gives_now(state_dir: Path) -> None:
    """The one thing doctor asks the kernel (and gives back at once): the count matches
    what asking the pool directly gives, and nothing is left in the pool or the registry."""
    nr = Path("/sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages")
    if os.geteuid() != 0 or not nr.exists():
        pytest.skip("needs root and a 1 GB huge page pool")
    before = _snapshot()
    res = pgsweep("doctor")
    assert res.returncode == 0, res.stderr
    m = re.search(r"(\d+) more can be reserved \(asked for (\d+)", " ".join(res.stdout.split()))
    assert m, res.stdout
    said, asked = int(m.group(1)), int(m.group(2))
    start = int(nr.read_text())
    try:
        nr.write_text(str(start + asked))
        direct = int(nr.read_text()) - start
    finally:
        nr.write_text(str(start))
    assert abs(said - direct) <= 1 and said <= asked  # fragmentation may move by a page
    assert _snapshot() == before
    assert not list(state_dir.iterdir())  # no journal, no lock left behind
