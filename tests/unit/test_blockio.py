"""Block-I/O latency (issue 26, [experiment] io_latency): `perf script` output of the block
request tracepoints paired into latencies and counted in quarter-octave buckets. The capture
(tests/data/proc/perf-block.script, its first 1,000 lines) is `perf record -a` filtered to an
ext4 loop device (7,2) while `dd oflag=dsync` wrote 8 kB blocks and `dd iflag=direct` read
them back: writes with flushes after them, the journal's metadata writes, cache flushes
(which the kernel issues at sector 0 and completes at sector -1) and completions of length 0
(a flush sequence's end). The real window is in tests/integration/test_storage.py."""

from __future__ import annotations

import math

from conftest import DATA
from pgsweep.collect import blockio

SCRIPT = (DATA / "proc" / "perf-block.script").read_text()
LOOP = {(7, 2): "loop2"}


def _lines(event: str, rwbs: str) -> list[str]:
    return [ln for ln in SCRIPT.splitlines() if f"block_rq_{event}: 7,2 {rwbs} " in ln]


def test_every_captured_line_is_an_event_the_parser_reads() -> None:
    lines = SCRIPT.splitlines()
    assert len(lines) == 1000
    assert all(blockio._EVENT.match(ln) for ln in lines)


def test_flushes_pair_in_order_though_their_sectors_differ() -> None:
    hist = blockio.histogram(SCRIPT, LOOP)
    flushes = sum(n for (_, k, _), n in hist.items() if k == "flush")
    issued, completed = len(_lines("issue", "FF")), len(_lines("complete", "FF"))
    assert flushes == min(issued, completed) and flushes > 100
    # pairing by sector would have found none: issued at 0, completed at -1
    assert all(" () 0 + 0 " in ln for ln in _lines("issue", "FF"))
    assert all(" () 18446744073709551615 + 0 " in ln for ln in _lines("complete", "FF"))


def test_a_write_counts_once_from_its_issue_to_its_data_completion() -> None:
    hist = blockio.histogram(SCRIPT, LOOP)
    writes = {b: n for (_, k, b), n in hist.items() if k == "write"}
    issued = len(_lines("issue", "WS")) + len(_lines("issue", "WSM"))
    zero = [ln for ln in _lines("complete", "WSM") if ln.split(" + ")[1].startswith("0 ")]
    assert zero, "the capture holds flush-sequence completions of length 0"
    assert sum(writes.values()) <= issued  # the length-0 ends are not a second request
    assert sum(writes.values()) >= issued - 5  # the window's last few may not complete
    # a completion paired with a stale issue of the same sector would be seconds long
    assert blockio.bounds_us(max(writes))[1] < 100_000


def test_other_devices_are_not_counted() -> None:
    assert blockio.histogram(SCRIPT, {(254, 0): "vda"}) == {}


def test_kinds_from_the_kernels_letters() -> None:
    cases = {"WS": "write", "WSM": "write", "FWS": "write", "WFS": "write", "FF": "flush",
             "F": "flush", "RA": "read", "RM": "read", "DS": "discard", "NS": "other"}
    assert {r: blockio.kind(r) for r in cases} == cases


def test_buckets_are_quarter_octaves_and_quantiles_fall_in_them() -> None:
    for k in range(1, 80):
        low, high = blockio.bounds_us(k)
        assert math.isclose(high / low, 2 ** 0.25)
        assert blockio.bucket(low * 1.01e-6) == k and blockio.bucket(high * 0.99e-6) == k
    assert blockio.bucket(0.4e-6) == 0
    hist = blockio.histogram(SCRIPT, LOOP)
    assert blockio.parse(blockio.to_text(hist)) == hist
    for lat in blockio.summaries(hist):
        assert lat.p50_us <= lat.p90_us <= lat.p99_us <= lat.max_us
    # a hand-made histogram: 90 requests near 10 us, 10 near 1 ms
    made = {("d", "write", blockio.bucket(10e-6)): 90, ("d", "write", blockio.bucket(1e-3)): 10}
    (lat,) = blockio.summaries(blockio.parse(blockio.to_text(made)))  # type: ignore[arg-type]
    assert lat.requests == 100
    assert 9 < lat.p50_us < 11.5 and 9 < lat.p90_us < 11.5 and 900 < lat.p99_us < 1150
