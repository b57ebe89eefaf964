"""bench/log-small: what a short trial's log costs a fresh process to reduce, with the
numpy kernels (txlog_small) and with numba's (txlog_kernels, forced), at several log sizes:
the CPU seconds of parse + reduce in a new Python process (pgsweep's imports excluded),
the median of --repeat processes each (each kernel set forced). Shows numba's start-up,
which every `pgsweep run` paid before stop 41, and where the two meet (txlog.SMALL_BYTES)."""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT / "tests" / "data" / "pgbench" / "pg15-select-R3000-L1.txlog"  # 6,882 lines
CHILD = """
import sys, time
from pathlib import Path
from pgsweep.collect import txlog
if sys.argv[2] == "numba":
    txlog.SMALL_BYTES = txlog.SMALL_LINES = -1
else:
    txlog.SMALL_BYTES = txlog.SMALL_LINES = 1 << 40
t = time.process_time()
txlog.reduce(txlog.parse([Path(sys.argv[1])]), 3)
print(time.process_time() - t)
"""


def one(log: Path, kernels: str) -> float:
    out = subprocess.run([sys.executable, "-c", CHILD, str(log), kernels], check=True,
                         capture_output=True, text=True)  # fmt: skip
    return float(out.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    lines = REAL.read_bytes().splitlines(keepends=True)
    with tempfile.TemporaryDirectory() as tmp:
        for copies in (1, 3, 6, 15, 30):
            log = Path(tmp) / f"log{copies}"
            log.write_bytes(b"".join(lines * copies))
            size = log.stat().st_size
            row = {k: statistics.median(one(log, k) for _ in range(args.repeat))
                   for k in ("numpy", "numba")}  # fmt: skip
            print(f"{len(lines) * copies:>8,} lines {size / 2**20:6.2f} MiB: numpy kernels "
                  f"{row['numpy']:.3f} CPU-s, numba kernels {row['numba']:.3f} CPU-s "
                  f"(median of {args.repeat} processes)")  # fmt: skip
    from pgsweep.collect import txlog

    print(f"txlog.SMALL_BYTES = {txlog.SMALL_BYTES:,}, SMALL_LINES = {txlog.SMALL_LINES:,}: "
          "the numpy kernels at most that size")  # fmt: skip


if __name__ == "__main__":
    main()
