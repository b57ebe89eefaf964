"""What the default explain collection costs in TPS (issue 26: goal under 1% at about
50,000 TPS select-only): one run with `workload.explain = [true, false]` as its factor,
so the trials with and without collection are interleaved in every round and judged like
any verdict. Prints the run's verdict on TPS (without against with, and its interval), the
median TPS of each side, and what the collection itself took of the CPU (which a verdict
this noisy cannot resolve below a few percent): its sampling backend's and sampling
thread's CPU seconds, as each trial records them, against the machine's CPU over the
window and against the server's own; asserts nothing.

    .venv/bin/python bench/explain_cost.py [--rounds 10] [--seconds 5] [--script select-only]
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
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
        cpu_share(results)


def cpu_share(results: Path) -> None:
    """The collection's CPU (the sampling backend and the thread driving it) per trial,
    as a share of the machine's CPU over the measured window and of the server's CPU."""
    db = sqlite3.connect(results / "results.db")
    rows = db.execute(
        "SELECT t.id, t.duration_s, sum(m.value) FROM trial t JOIN metric m ON m.trial_id = t.id "
        "WHERE m.name IN ('explain.sampler_backend_cpu_s', 'explain.sampler_thread_cpu_s') "
        "AND t.status = 'ok' GROUP BY t.id").fetchall()  # fmt: skip
    server = dict(db.execute(
        "SELECT trial_id, sum(coalesce(user_s, 0) + coalesce(system_s, 0)) FROM process_cpu "
        "WHERE process_type != 'pgbench client' GROUP BY trial_id").fetchall())  # fmt: skip
    db.close()
    if not rows:
        print("no trial recorded the collection's CPU")
        return
    cores = os.cpu_count() or 1
    machine = [cost / (seconds * cores) for _, seconds, cost in rows if seconds]
    of_server = [cost / server[tid] for tid, _, cost in rows if server.get(tid)]
    costs = [cost for _, _, cost in rows]
    print(f"the collection's CPU (sampling backend + sampling thread): median "
          f"{statistics.median(costs):.3f} s per trial, {statistics.median(machine):.2%} of "
          f"the machine's CPU over the window ({cores} cores; max {max(machine):.2%})"
          + (f", {statistics.median(of_server):.2%} of the server's own CPU" if of_server
             else ""))  # fmt: skip


if __name__ == "__main__":
    main()
