"""Devices per second (collect.device_series), on /proc files captured here
(tests/data/proc: /proc/diskstats before and 1 s after a 64 MiB direct write to /tmp and a
sync, and /proc/meminfo; Linux 6.18, virtio disk vda): each figure as iostat derives it,
only the devices asked for, no await for a device that did no I/O, the memory row, and the
trial's summary over the data devices."""

from __future__ import annotations

import pytest

from conftest import DATA
from pgsweep.collect import device_series as ds

PROC = DATA / "proc"


def _samples() -> list[ds.Sample]:
    mem = ds.meminfo((PROC / "meminfo.txt").read_text())
    return [(10.0 + i, ds.diskstats((PROC / f"diskstats-{i}.txt").read_text(),
                                    ["vda", "loop0"]), mem) for i in (0, 1)]  # fmt: skip


def test_each_figure_is_the_difference_over_the_second_as_iostat_takes_it() -> None:
    rows = {r[0]: r for r in ds.rows(_samples())}
    vda, loop, memory = rows["vda"], rows["loop0"], rows[ds.MEMORY]
    # the captured vda lines: reads 2914526 -> 2915507, sectors read 298835723 -> 298967995,
    # ms reading 3172300 -> 3172728, writes 15036010 -> 15036161, sectors written
    # 1161655012 -> 1161790116, ms writing 11472447 -> 11472596, io ticks 2011452 ->
    # 2011604, weighted 15430259 -> 15430837
    assert vda[:2] == ("vda", 1)
    assert vda[2] == 981 and vda[3] == 151  # reads/s, writes/s
    assert vda[4] == pytest.approx(132272 * 512 / 1024)  # read kB/s
    assert vda[5] == pytest.approx(135104 * 512 / 1024)  # write kB/s: the 64 MiB and more
    assert vda[6] == pytest.approx((428 + 149) / (981 + 151))  # await, ms
    assert vda[7] == pytest.approx(578 / 1000)  # queue depth
    assert vda[8] == pytest.approx(152 / 10)  # utilisation, %
    assert loop[2:6] == (0.0, 0.0, 0.0, 0.0) and loop[6] is None  # no I/O: no await
    assert memory[2:9] == (None,) * 7 and memory[9] is not None and memory[10] is not None
    assert len(rows) == 3  # sda, nvme... the devices not asked for are not read


def test_the_trial_summary_takes_the_busiest_data_device_and_the_most_dirty_memory() -> None:
    a, b = _samples()
    third = (12.0, b[1], (a[2][0] or 0) + 1000, a[2][1])
    seconds = ds.rows([a, b, (third[0], third[1], (third[2], third[3]))])
    got = ds.summary(seconds, ["vda", "loop0"])
    # second 2 saw no I/O on vda (the same counters): its await is None, not 0
    assert got["device.await_ms_mean"] == pytest.approx((428 + 149) / (981 + 151))
    assert got["device.util_pct_mean"] == pytest.approx(152 / 10 / 2)  # vda, the busier
    assert got["memory.dirty_kb_max"] == (a[2][0] or 0) + 1000
    assert ds.summary([], ["vda"]) == {}
