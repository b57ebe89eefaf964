"""What the default explain collection costs in TPS (issue 26: goal under 1% at about
50,000 TPS select-only): one run with `workload.explain = [true, false]` as its factor,
so the trials with and without collection are interleaved in every round and judged like
any verdict. Prints the run's verdict on TPS (without against with, and its interval) and
the median TPS of each side; asserts nothing.

    .venv/bin/python bench/explain_cost.py [--rounds 10] [--seconds 5] [--script select-only]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PGSWEEP = str(ROOT / ".venv" / "bin" / "pgsweep")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--seconds", type=int, default=5)
    ap.add_argument("--script", default="select-only")
    args = ap.parse_args()
    print(f"# bench/explain_cost.py --rounds {args.rounds} --seconds {args.seconds} --script "
          f"{args.script}; {time.strftime('%Y-%m-%dT%H:%MZ', time.gmtime())}")
    with tempfile.TemporaryDirectory(prefix="pgsweep-explain-cost-", dir="/var/tmp") as tmp:
        folder = Path(tmp)
        folder.chmod(0o755)
        exp = folder / "cost.toml"
        exp.write_text(f'[experiment]\nname = "explain-cost"\nseed = 11\n[cluster]\nscale = 1\n'
                       f'[workload]\nscript = "{args.script}"\nclients = 2\njobs = 2\n'
                       f'duration = "{args.seconds}s"\nwarmup = "1s"\n[factors]\n'
                       'workload.explain = [true, false]\n[repeat]\n'
                       f'rounds = {args.rounds}\n')  # fmt: skip
        env = dict(os.environ, NO_COLOR="1")
        results = folder / "res"
        run = subprocess.run([PGSWEEP, "run", str(exp), "--results", str(results)],
                             capture_output=True, text=True, env=env)  # fmt: skip
        if run.returncode != 0:
            sys.exit(run.stdout + run.stderr)
        report = subprocess.run([PGSWEEP, "report", str(results), "--format", "json"],
                                capture_output=True, text=True, env=env, check=True)  # fmt: skip
        data = json.loads(report.stdout)
        tps: dict[str, list[float]] = {}
        for c in data["configurations"]:
            values = c.get("values", {}).get("tps", {})
            tps[str(c["levels"]["workload.explain"])] = [float(v) for v in values.values()]
        for c in data["comparisons"]:
            if c["metric"] == "tps":
                print(f"TPS without the explain collection against with it: {c['verdict']} "
                      f"({c['error']} error, {c['replicates']} rounds)")  # fmt: skip
        for side, values in tps.items():
            if values:
                print(f"workload.explain = {side}: median TPS {statistics.median(values):,.0f} "
                      f"over {len(values)} trials")  # fmt: skip


if __name__ == "__main__":
    main()
