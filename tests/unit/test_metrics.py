"""Derived per-trial figures and the sampling decision, on hand-worked numbers."""

from __future__ import annotations

import pytest

from pgsweep.collect import metrics
from pgsweep.engine.measure import AUTO_LOGGED_PER_S, sampling_rate


@pytest.mark.parametrize(
    ("setting", "rate", "warmup_tps", "expected"),
    [
        ("off", None, 50_000.0, None),
        (0.25, None, 50_000.0, 0.25),
        ("auto", None, None, 1.0),  # no warm-up to judge by: log everything
        ("auto", None, AUTO_LOGGED_PER_S / 2, 1.0),
        ("auto", None, AUTO_LOGGED_PER_S * 4.0, 0.25),
        ("auto", AUTO_LOGGED_PER_S * 2.0, 500.0, 0.5),  # -R is the expected rate
    ],
)
def test_sampling_rate(
    setting: str | float, rate: float | None, warmup_tps: float | None, expected: float | None
) -> None:
    assert sampling_rate(setting, rate, warmup_tps) == expected


def test_stability_counts_stalls_below_a_tenth_of_the_median() -> None:
    tps = [1000.0, 1010.0, 990.0, 99.0, 101.0, 1000.0]
    got = metrics.stability(tps, {"pg.checkpoints_timed": 1.0, "pg.checkpoints_req": 2.0})
    assert got["stability.stall_seconds"] == 1  # 99 < 0.1 * median (995); 101 is not
    mean = sum(tps) / len(tps)
    sd = (sum((x - mean) ** 2 for x in tps) / (len(tps) - 1)) ** 0.5
    assert got["stability.tps_cv"] == pytest.approx(sd / mean)
    assert got["stability.checkpoints"] == 3


def test_io_counts_only_the_devices_filesystems_sit_on() -> None:
    c = {
        "disk.loop0.sectors_written": 1000.0,
        "disk.vda.sectors_written": 5000.0,  # the disk under loop0's backing file
        "disk.loop0.sectors_read": 10.0,
        "pg.wal_bytes": 256_000.0,
        "pg.blks_hit": 90.0,
        "pg.blks_read": 10.0,
    }
    got = metrics.io(c, ["loop0"], ok=100)
    assert got["io.device_bytes_written"] == 512_000
    assert got["io.device_bytes_written_per_tx"] == 5120
    assert got["io.wal_bytes_per_tx"] == 2560
    assert got["io.device_bytes_per_wal_byte"] == 2
    assert got["pg.cache_hit_ratio"] == 0.9


def test_host_shares_and_memory_levels() -> None:
    c = {"host.cpu.user": 60.0, "host.cpu.system": 20.0, "host.cpu.idle": 10.0}
    c |= {"host.cpu.iowait": 5.0, "host.cpu.steal": 5.0}
    got = metrics.host_shares(c)
    assert got["host.cpu_busy_share"] == pytest.approx(0.85)
    assert got["host.iowait_share"] == pytest.approx(0.05)
    assert got["host.steal_share"] == pytest.approx(0.05)
    meminfo = "Cached:  1234 kB\nDirty:  56 kB\nHugePages_Total:  4\nHugePages_Rsvd:  1\n"
    arc = "name type data\nhits 4 100\nsize 4 4096\nc_max 4 8192\n"
    mem = metrics.memory(meminfo, arc)
    assert mem == {
        "mem.cached_kb": 1234,
        "mem.dirty_kb": 56,
        "mem.hugepages_total": 4,
        "mem.hugepages_rsvd": 1,
        "zfs.arc_size_bytes": 4096,
        "zfs.arc_c_max_bytes": 8192,
    }
