"""`pgsweep doctor` reads this machine's real kernel files and changes none of them."""

from __future__ import annotations

import shutil
from pathlib import Path

from conftest import pgsweep
from pgsweep.collect import devices


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
    for fs, tool in (("ext4", "mkfs.ext4"), ("xfs", "mkfs.xfs"), ("btrfs", "mkfs.btrfs")):
        found = shutil.which(tool)
        assert f"storage │ {fs} │ {found}" in out if found else f"no {tool}" in out
    assert _snapshot() == before
