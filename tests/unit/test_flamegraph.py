"""CPU profiles (issue 26, [experiment] cpu_profile): `perf script` output folded into
stacks (captured here: tests/data/proc/perf-script.txt, `perf record -F 99 -a -g` of this
machine for a second, `perf script -F comm,pid,ip,sym`, its first 80 samples), the folded
artifact read back, and the differential flame graph: widths from the drawn profile's
shares, red where a frame's share grew, blue where it shrank, names escaped. The real
profile is in tests/integration/test_explain.py."""

from __future__ import annotations

import re
from collections import Counter

from conftest import DATA
from pgsweep.collect import perf
from pgsweep.outputs import flamegraph

SCRIPT = (DATA / "proc" / "perf-script.txt").read_text()


def test_only_the_named_process_is_folded_root_first_and_frameless_samples_dropped() -> None:
    headers = [ln.split()[0] for ln in SCRIPT.splitlines() if ln and ln[0] not in " \t"]
    assert headers.count("python") == 45 and headers.count("swapper") == 35
    py = perf.fold(SCRIPT, "python")
    assert sum(py.values()) == 44  # one python sample has no frame at all
    assert all(s.startswith("python;") for s in py)
    idle = perf.fold(SCRIPT, "swapper")
    (stack,) = idle  # every idle sample: one stack, from the kernel's entry to the halt
    assert stack.split(";")[1] == "common_startup_64" and stack.endswith(";pv_native_safe_halt")
    assert idle[stack] == 35
    assert perf.fold(SCRIPT) == Counter()  # no postgres in this capture
    assert perf.parse(perf.to_text(py)) == py  # the artifact reads back


def _boxes(svg: str) -> dict[str, tuple[float, str]]:
    out = {}
    for title, width, fill in re.findall(r"<title>([^:<]+):[^<]*</title><rect [^>]*width=\""
                                         r"([\d.]+)\"[^>]*fill=\"([^\"]+)\"", svg):
        out[title] = (float(width), fill)
    return out


def test_the_graph_is_as_wide_as_the_drawn_profile_and_coloured_by_the_change() -> None:
    before = Counter({"postgres;main;XLogFlush": 50, "postgres;main;ExecScan": 50})
    after = Counter({"postgres;main;XLogFlush": 10, "postgres;main;ExecScan": 90,
                     "postgres;main;tiny": 0})  # fmt: skip
    svg = flamegraph.svg(after, before, "off <against> on")
    boxes = _boxes(svg)
    width = flamegraph.WIDTH
    assert boxes["postgres"][0] == boxes["main"][0] == width - 0.5
    assert abs(boxes["ExecScan"][0] - 0.9 * width) < 1
    assert abs(boxes["XLogFlush"][0] - 0.1 * width) < 1
    # grew 50% -> 90%: red at full strength; shrank 50% -> 10%: blue; held: white
    assert boxes["ExecScan"][1] == "rgb(255,64,64)" and boxes["XLogFlush"][1] == "rgb(64,64,255)"
    assert boxes["main"][1] == "rgb(255,255,255)"
    assert "off &lt;against&gt; on" in svg and "<against>" not in svg  # escaped


def test_a_frame_with_markup_in_its_name_is_text_and_a_narrow_one_is_left_out() -> None:
    after = Counter({"postgres;<script>alert(1)</script>": 995, "postgres;narrow": 4})
    svg = flamegraph.svg(after, after, "t")
    assert "<script>" not in svg and "&lt;script&gt;" in svg
    assert "narrow" not in svg  # under MIN_SHARE of the samples
    assert flamegraph.svg(Counter(), after, "t") == ""
