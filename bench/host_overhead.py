"""The local path before and after the Host interface: pgsweep's own time per trial (a
trial's wall time less its warm-up and measured window: the start, reload or restart,
the checks, the counters, the store) and a whole run's wall time, for the code just before
the Host came in (d08d32f^, or --before REV) and the working tree, run in alternating
pairs on one experiment. Prints figures; asserts nothing.

    .venv/bin/python bench/host_overhead.py [--pairs 4] [--before REV] [--storage]

The experiment: select-only at scale 1 for 2 s per trial, no warm-up, 2 x 2
configurations (synchronous_commit: a reload; shared_buffers: a restart) x 2 rounds;
with --storage the second factor is the filesystem instead (ext4 and xfs on a 1 GiB loop
device each: attach, mkfs, mount and their undoing in the trials that make them). Both
versions run with this checkout's virtual environment; the older one's source comes from
`git archive` into a temporary folder, first on PYTHONPATH."""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENT = """
[experiment]
name = "host-overhead"
seed = 7
[cluster]
scale = 1
[workload]
script = "select-only"
duration = "2s"
warmup = "0s"
[factors]
server.synchronous_commit = ["on", "off"]
server.shared_buffers = ["128MB", "256MB"]
[repeat]
rounds = 2
"""
STORAGE = EXPERIMENT.replace('server.shared_buffers = ["128MB", "256MB"]',
                             'storage.filesystem = ["ext4", "xfs"]') + """
[storage]
device = "loop:1GiB"
"""


def run(src: Path, exp: Path, results: Path) -> tuple[float, list[float]]:
    """The run's wall seconds and each trial's seconds beyond its window."""
    env = dict(os.environ, NO_COLOR="1", PYTHONPATH=str(src))
    began = time.monotonic()
    res = subprocess.run([sys.executable, "-m", "pgsweep.cli", "run", str(exp), "--results",
                          str(results)], capture_output=True, text=True, env=env)  # fmt: skip
    wall = time.monotonic() - began
    if res.returncode != 0:
        raise SystemExit(f"{src}: {res.stdout}{res.stderr}")
    db = sqlite3.connect(results / "results.db")
    rows = db.execute("SELECT started_at, finished_at, warmup_s, duration_s, status "
                      "FROM trial").fetchall()  # fmt: skip
    db.close()
    extra = []
    for started, finished, warmup, duration, status in rows:
        assert status == "ok", (src, status)
        span = dt.datetime.fromisoformat(finished) - dt.datetime.fromisoformat(started)
        extra.append(span.total_seconds() - (warmup or 0) - (duration or 0))
    return wall, extra


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=4)
    ap.add_argument("--before", default="d08d32f^")
    ap.add_argument("--storage", action="store_true",
                    help="the filesystem as the 2nd factor (for the storage change: "
                    "--before 3fa88a6)")
    args = ap.parse_args()
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True).stdout.strip()  # fmt: skip
    flag = " --storage" if args.storage else ""
    print(f"# bench/host_overhead.py --pairs {args.pairs} --before {args.before}{flag}; after = "
          f"the working tree at {head}; {time.strftime('%Y-%m-%dT%H:%MZ', time.gmtime())}")
    walls: dict[str, list[float]] = {"before": [], "after": []}
    extras: dict[str, list[float]] = {"before": [], "after": []}
    with tempfile.TemporaryDirectory(prefix="pgsweep-host-overhead-") as tmp:
        folder = Path(tmp)
        folder.chmod(0o755)
        old = folder / "before"
        old.mkdir()
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", args.before, "src"],
                                 capture_output=True, check=True).stdout  # fmt: skip
        subprocess.run(["tar", "-x", "-C", str(old)], input=archive, check=True)
        exp = folder / "exp.toml"
        assert "storage.filesystem" in STORAGE  # the replaced line is still there
        exp.write_text(STORAGE if args.storage else EXPERIMENT)
        sources = {"before": old / "src", "after": ROOT / "src"}
        for n in range(args.pairs):
            order = ("before", "after") if n % 2 == 0 else ("after", "before")
            for which in order:
                wall, extra = run(sources[which], exp, folder / f"{which}{n}")
                walls[which].append(wall)
                extras[which] += extra
                print(f"pair {n + 1} {which:6s}: run {wall:5.1f} s, pgsweep's seconds per "
                      f"trial median {statistics.median(extra):.2f} (of {len(extra)})")
    for which in ("before", "after"):
        print(f"{which:6s}: run median {statistics.median(walls[which]):.1f} s; per trial "
              f"median {statistics.median(extras[which]):.2f} s, mean "
              f"{statistics.fmean(extras[which]):.2f} s (n={len(extras[which])})")
    ratio = statistics.median(extras["after"]) / statistics.median(extras["before"])
    print(f"after/before, pgsweep's seconds per trial (medians): {ratio:.3f}")


if __name__ == "__main__":
    main()
