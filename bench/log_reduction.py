"""bench/log-reduction: reduce a generated pgbench per-transaction log (20 million lines by
default, two per-thread files, -R style with a lag column and 0.1% skipped) to exact
percentiles and per-second series, and compare with a plain Python loop over the same
files. Prints lines per second for both; checks that they agree."""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numba
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from pgsweep.collect import txlog

SECONDS = 600


def generate(path: Path, n: int, client: int, seed: int) -> None:
    """n lines shaped like pgbench's: lognormal latency around 1.5 ms, completions spread
    over SECONDS, 0.1% 'skipped'."""
    rng = np.random.default_rng(seed)
    lat = rng.lognormal(np.log(1500), 0.5, n).astype(np.int64)
    end = 1_795_000_000_000_000 + np.sort(rng.integers(2_000, SECONDS * 1_000_000, n))
    as_text = pa.array(lat).cast(pa.string())
    latency = pc.if_else(pa.array(rng.random(n) < 0.001), "skipped", as_text)
    table = pa.table({
        "client": np.full(n, client), "tx": np.arange(1, n + 1), "time": latency,
        "script": np.zeros(n, np.int64), "epoch": end // 1_000_000, "us": end % 1_000_000,
        "lag": rng.integers(0, 300, n),
    })  # fmt: skip
    opts = pacsv.WriteOptions(include_header=False, delimiter=" ", quoting_style="none")
    pacsv.write_csv(table, path, opts)


def plain_python(paths: list[Path]) -> tuple[list[float], int]:
    """The straightforward way: split every line, sort the latencies."""
    lat: list[int] = []
    starts: list[int] = []
    ends: list[int] = []
    skipped = 0
    for p in paths:
        with open(p) as f:
            for line in f:
                fields = line.split()
                if fields[2] == "skipped":
                    skipped += 1
                    continue
                v, e = int(fields[2]), int(fields[4]) * 1_000_000 + int(fields[5])
                lat.append(v)
                ends.append(e)
                starts.append(e - v)
    t0 = min(starts)
    per_second = [0] * SECONDS
    for e in ends:
        s = (e - t0) // 1_000_000
        if s < SECONDS:
            per_second[s] += 1
    lat.sort()
    out = []
    for q in txlog.PERCENTILES:
        h = (len(lat) - 1) * q / 100
        lo = int(h)
        out.append(lat[lo] + (h - lo) * (lat[min(lo + 1, len(lat) - 1)] - lat[lo]))
    return out, skipped


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--lines", type=int, default=20_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dir", type=Path, help="keep the generated files here (default: temp)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="pgsweep-bench-", dir="/var/tmp") as tmp:
        folder = args.dir or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        paths = [folder / "tx.1", folder / "tx.1.1"]
        if not all(p.exists() for p in paths):
            t = time.perf_counter()
            for i, p in enumerate(paths):
                generate(p, args.lines // 2, i, seed=i)
            print(f"generated {args.lines:,} lines in {time.perf_counter() - t:.1f} s")
        size = sum(p.stat().st_size for p in paths)
        txlog.reduce(txlog.parse(paths[:1]), SECONDS)  # compile (cached after the first run)
        times = []
        for _ in range(args.repeat):
            t = time.perf_counter()
            red = txlog.reduce(txlog.parse(paths), SECONDS)
            times.append(time.perf_counter() - t)
        lines = red.lines
        best, median = min(times), statistics.median(times)
        print(f"log: {lines:,} lines, {size / 1e6:,.0f} MB in 2 files")
        print(
            f"pgsweep (numba, {numba.get_num_threads()} threads): best {best:.2f} s = "
            f"{lines / best / 1e6:.1f} M lines/s; median {median:.2f} s = "
            f"{lines / median / 1e6:.1f} M lines/s"
        )
        t = time.perf_counter()
        pct, skipped = plain_python(paths)
        plain = time.perf_counter() - t
        print(f"plain Python loop: {plain:.1f} s = {lines / plain / 1e6:.2f} M lines/s")
        print(f"speed-up (median): {plain / median:.1f}x")
        got = [red.latency[f"p{q:g}"] * 1000 for q in txlog.PERCENTILES]
        agree = np.allclose(got, pct, rtol=1e-12) and skipped == red.skipped
        print(f"percentiles and skipped count agree with the plain loop: {agree}")
        if not agree:
            raise SystemExit(f"disagreement: {got} vs {pct}, skipped {red.skipped} vs {skipped}")


if __name__ == "__main__":
    main()
