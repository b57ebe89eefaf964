"""bench/gate.py: the calibrated compare gate on this machine's recorded noise
(tests/data/noise). Back-to-back sessions of one unchanged configuration are cut from the
recording: K calibration sessions, then BEFORE, then AFTER (n trials each); compare judges
AFTER against BEFORE on session means with the calibration's spread, as `pgsweep compare
BEFORE AFTER --calibration ... --fail-if-slower X` does. Prints how often the gate fails
such A/A pairs (every start of the recording that fits: they overlap, so the rates are
indicative) and the median slowdown it says it catches with 80% power. Without a
calibration the gate refuses (exit 2); bench/guarantees.py has the bootstrap version.

Run: .venv/bin/python bench/gate.py [THRESHOLD]   (default 0.03)"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from pgsweep.analysis.compare import _row
from pgsweep.verdict import simulate

NOISE = Path(__file__).resolve().parents[1] / "tests" / "data" / "noise"


def main() -> None:
    threshold = float(sys.argv[1]) if len(sys.argv) > 1 else 0.03
    for workload in ("tpcb", "select"):
        series = np.asarray(simulate.load(NOISE, workload), float)
        for n in (3, 5, 10):
            for k in (2, 3, 5):
                need = (k + 2) * n
                if need > len(series):
                    continue
                rows = []
                for i in range(len(series) - need + 1):
                    s = series[i : i + need].reshape(k + 2, n)
                    rows.append(_row({}, [list(s[-2])], [list(s[-1])],
                                     [list(x) for x in s[:-2]], 0.05, 1, threshold))  # fmt: skip
                fails = sum(r.slower_beyond_threshold for r in rows) / len(rows)
                catches = float(np.median([r.catches for r in rows if r.catches is not None]))
                print(f"{workload:6} {n:2} trials per session, calibration of {k}: gate at "
                      f"{threshold:.0%} fails {fails:5.1%} of A/A pairs ({len(rows)} starts); "
                      f"catches a slowdown of {catches:.0%} with 80% power (median)")  # fmt: skip


if __name__ == "__main__":
    main()
