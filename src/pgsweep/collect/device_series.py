"""Devices per second (issue 26): once a second over the measured window, the server's
devices' /proc/diskstats (reads and writes per second, kB/s, await, queue depth,
utilisation, as iostat derives them) and the machine's Dirty and Writeback memory
(/proc/meminfo), read through the server's host on a thread of its own. Second N covers
the N-th second after the window began; the memory row of a second is named "memory"."""

from __future__ import annotations

import itertools
import statistics
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..host.api import Host

MEMORY = "memory"  # the device name of the machine's Dirty/Writeback rows
SECTOR = 512  # /proc/diskstats counts 512-byte sectors whatever the device's own size
# columns of a stored second, after (device, second)
COLUMNS = ("reads_s", "writes_s", "read_kb_s", "write_kb_s", "await_ms", "queue_depth",
           "util_pct", "dirty_kb", "writeback_kb")  # fmt: skip


def diskstats(text: str, devices: Sequence[str]) -> dict[str, tuple[float, ...]]:
    """Device -> (reads, sectors read, ms reading, writes, sectors written, ms writing,
    ms doing I/O, weighted ms doing I/O) for the devices named."""
    out: dict[str, tuple[float, ...]] = {}
    for line in text.splitlines():
        f = line.split()
        if len(f) >= 14 and f[2] in devices:
            r, _, rs, rms, w, _, ws, wms, _, ticks, weighted = (float(v) for v in f[3:14])
            out[f[2]] = (r, rs, rms, w, ws, wms, ticks, weighted)
    return out


def meminfo(text: str) -> tuple[float | None, float | None]:
    """Dirty and Writeback, kB."""
    got = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        if name in ("Dirty", "Writeback"):
            got[name] = float(rest.split()[0])
    return got.get("Dirty"), got.get("Writeback")


Sample = tuple[float, dict[str, tuple[float, ...]], tuple[float | None, float | None]]


def rows(samples: list[Sample]) -> list[tuple[Any, ...]]:
    """(device, second, *COLUMNS) for each second between two samples."""
    out: list[tuple[Any, ...]] = []
    for second, (a, b) in enumerate(itertools.pairwise(samples), 1):
        dt = b[0] - a[0]
        if dt <= 0:
            continue
        for dev, new in b[1].items():
            old = a[1].get(dev)
            if old is None:
                continue
            d = [max(n - o, 0.0) for n, o in zip(new, old, strict=True)]
            ios = d[0] + d[3]
            out.append((dev, second, d[0] / dt, d[3] / dt, d[1] * SECTOR / 1024 / dt,
                        d[4] * SECTOR / 1024 / dt, (d[2] + d[5]) / ios if ios else None,
                        d[7] / 1000 / dt, min(d[6] / 10 / dt, 100.0), None, None))  # fmt: skip
        out.append((MEMORY, second, *([None] * 7), *b[2]))
    return out


def summary(seconds: list[tuple[Any, ...]], primary: Sequence[str]) -> dict[str, float]:
    """Per-trial figures of the window: the data devices' mean await (over the seconds
    with I/O), queue depth and utilisation (the busiest device's), the largest Dirty and
    Writeback."""
    out: dict[str, float] = {}
    mine = [r for r in seconds if r[0] in primary]
    for i, name in ((6, "await_ms"), (7, "queue_depth"), (8, "util_pct")):
        per_device = [statistics.fmean(v) for dev in primary
                      if (v := [r[i] for r in mine if r[0] == dev and r[i] is not None])]
        if per_device:
            out[f"device.{name}_mean"] = max(per_device)
    for i, name in ((9, "dirty_kb"), (10, "writeback_kb")):
        values = [r[i] for r in seconds if r[0] == MEMORY and r[i] is not None]
        if values:
            out[f"memory.{name}_max"] = max(values)
    return out


class DeviceSeries:
    """Samples on a thread of its own from `start` to `stop` (which returns the rows)."""

    def __init__(self, host: Host, devices: Sequence[str], interval: float = 1.0) -> None:
        self.host, self.devices, self.interval = host, list(devices), interval
        self.samples: list[Sample] = []
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _sample(self) -> None:
        stats = diskstats(self.host.read_text(Path("/proc/diskstats")), self.devices)
        memory = meminfo(self.host.read_text(Path("/proc/meminfo")))
        self.samples.append((time.monotonic(), stats, memory))

    def _loop(self) -> None:
        try:
            began = time.monotonic()
            self._sample()
            n = 0
            while not self._stop.wait(max(0.0, began + (n + 1) * self.interval
                                          - time.monotonic())):  # fmt: skip
                n += 1
                self._sample()
        except Exception as exc:  # reported by the caller, which records why
            self.error = exc

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="device-series", daemon=True)
        self._thread.start()

    def stop(self) -> list[tuple[Any, ...]]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        return rows(self.samples)
