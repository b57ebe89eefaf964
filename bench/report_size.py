"""How big the HTML report is and how fast it opens, at 10,000 trials.

Results folders of 10,000 trials in several shapes (configurations x rounds), written
through the real store with per-second series, latency and byte metrics
(tests/synthetic.py), are analysed and rendered as `pgsweep report --format html` does
(the seconds of each apart: the analysis is what every format shares); then each file is
opened in headless Chromium (tests/chromium.py) at 1280 px: the time from navigation to
the load event, and the time to lay out the page with every folded section opened (what a
reader who opens them all waits for). Prints one line per shape.

    .venv/bin/python bench/report_size.py [--shapes 20x500,100x100,1000x10]
                                          [--seconds 30] [--keep DIR]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from chromium import Page, browser  # noqa: E402
from pgsweep import analysis  # noqa: E402
from pgsweep.outputs import html  # noqa: E402
from pgsweep.outputs.show import open_store  # noqa: E402
from synthetic import make_results  # noqa: E402


def folder(where: Path, configs: int, rounds: int, seconds: int) -> Path:
    """configs configurations (factors of up to 10 levels), each a few percent apart."""
    rng = np.random.default_rng(7)
    factors: dict[str, list[object]] = {}
    left = configs
    for name in ("server.shared_buffers", "workload.clients", "server.work_mem"):
        if left <= 1:
            break
        n = min(left, 10)
        while left % n:
            n -= 1
        factors[name] = [f"{2 ** (k + 7)}MB" if "mem" in name or "buffers" in name else k + 1
                         for k in range(n)]  # fmt: skip
        left //= n
    effect = rng.normal(0, 0.05, configs)
    tps, metrics, per = {}, {}, {}
    for c in range(configs):
        for r in range(1, rounds + 1):
            v = 1000 * float(np.exp(effect[c] + rng.normal(0, 0.03)))
            tps[(c, r)] = v
            metrics[(c, r)] = {"latency.p50_ms": 2000 / v, "latency.p95_ms": 4000 / v,
                               "latency.p99_ms": 6000 / v,
                               "io.device_bytes_written_per_tx": 9000.0,
                               "io.wal_bytes_per_tx": 600.0}  # fmt: skip
            per[(c, r)] = list(v * np.exp(rng.normal(0, 0.1, seconds)))
    out = where / f"r{configs}x{rounds}"
    shutil.rmtree(out, ignore_errors=True)
    return make_results(out, factors, tps, rounds, metrics=metrics,
                        per_second=per)  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--shapes", default="20x500,100x100,1000x10")
    p.add_argument("--seconds", type=int, default=30, help="per-second samples per trial")
    p.add_argument("--keep", type=Path, help="write the folders and reports here")
    args = p.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="pgsweep-bench-report-"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"{'shape':>10} {'trials':>7} {'write s':>8} {'analyse s':>10} {'render s':>9} "
          f"{'HTML kB':>8} {'load ms':>8} {'open-all ms':>12}")  # fmt: skip
    for shape in args.shapes.split(","):
        configs, rounds = (int(x) for x in shape.split("x"))
        t0 = time.monotonic()
        res = folder(work, configs, rounds, args.seconds)
        t1 = time.monotonic()
        store = open_store(res)
        try:
            found = analysis.analyse(store)
            t2 = time.monotonic()
            text = html.render(found, store)
        finally:
            store.close()
        t3 = time.monotonic()
        out = work / f"report-{shape}.html"
        out.write_text(text)
        load = opened = float("nan")
        if browser() is not None:
            with Page(work) as page:
                load = page.open(out.as_uri(), 1280) * 1000
                opened = float(page.evaluate(
                    "(function () { var t = performance.now();"
                    " document.querySelectorAll('details').forEach(function (d) {"
                    " d.open = true; }); document.body.getBoundingClientRect();"
                    " return performance.now() - t; })()"))  # fmt: skip
                assert page.errors() == [], page.errors()
        print(f"{shape:>10} {configs * rounds:>7} {t1 - t0:>8.1f} {t2 - t1:>10.1f} "
              f"{t3 - t2:>9.1f} {len(text.encode()) / 1024:>8.0f} {load:>8.0f} {opened:>12.0f}",
              flush=True)  # fmt: skip
    print(f"folders and reports in {work}" if args.keep else "")


if __name__ == "__main__":
    main()
