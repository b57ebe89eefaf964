"""bench/gate.py: how often `compare --fail-if-slower` fails an A/A pair of sessions run back
to back, on the recorded noise of one unchanged configuration (tests/data/noise): every
pair of consecutive windows of n trials is a "before" and an "after". Prints the gate's
false-fail rate beside the rate of plain "different" verdicts. The windows overlap, so the
rates are indicative, not independent samples."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from pgsweep.compare import _row
from pgsweep.verdict import simulate

NOISE = Path(__file__).resolve().parents[1] / "tests" / "data" / "noise"


def main() -> None:
    threshold = float(sys.argv[1]) if len(sys.argv) > 1 else 0.03
    for workload in ("tpcb", "select"):
        series = np.asarray(simulate.load(NOISE, workload), float)
        for n in (3, 5, 10):
            rows = [_row({}, list(series[i : i + n]), list(series[i + n : i + 2 * n]), 0.05, 1,
                         threshold) for i in range(len(series) - 2 * n + 1)]  # fmt: skip
            fails = sum(r.slower_beyond_threshold for r in rows) / len(rows)
            different = sum(r.decision != "no significant difference" for r in rows) / len(rows)
            print(
                f"{workload:6} {n:2} trials per session: gate at {threshold:.0%} fails "
                f"{fails:5.1%} of A/A pairs; 'different' {different:5.1%} ({len(rows)} pairs)"
            )


if __name__ == "__main__":
    main()
