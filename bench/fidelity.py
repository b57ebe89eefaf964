"""bench/fidelity: does pgsweep measure what a bare pgbench command measures?

1. The same configuration (select-only, scale 10, 2 clients, 3 s warm-up + 10 s) run
   through `pgsweep run` and as a bare pgbench command on a cluster set up the same way,
   interleaved (ABBA order), N pairs: prints the ratio of median TPS.
2. The cost of per-transaction logging at a high rate: bare pgbench without -l, with -l,
   and with the --sampling-rate pgsweep's "auto" would choose, interleaved N rounds. TPS
   on a shared 2-core VM varies by 10-20% from run to run, more than the cost itself, so
   the script also prints pgbench's own CPU time per transaction (getrusage of the
   finished child), which other tenants disturb far less.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import sqlite3
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from pgsweep import spec
from pgsweep.engine.measure import sampling_rate
from pgsweep.host import proc
from pgsweep.postgres import binaries, pgbench
from pgsweep.postgres.cluster import Cluster

BINDIR = Path("/usr/lib/postgresql/15/bin")
SCALE, CLIENTS, WARMUP, SECONDS = 10, 2, 3, 10

EXPERIMENT = f"""
[experiment]
name = "fidelity"
seed = {{seed}}
[cluster]
scale = {SCALE}
[workload]
script = "select-only"
clients = {CLIENTS}
jobs = {CLIENTS}
duration = "{SECONDS}s"
warmup = "{WARMUP}s"
latency_log = {{latency_log}}
[repeat]
rounds = 1
"""


def via_pgsweep(folder: Path, seed: int, latency_log: str) -> tuple[float, float]:
    exp = folder / f"exp-{seed}.toml"
    exp.write_text(EXPERIMENT.format(seed=seed, latency_log=latency_log))
    results = folder / f"res-{seed}"
    cmd = [sys.executable, "-m", "pgsweep.cli", "run", str(exp), "--results", str(results)]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    db = sqlite3.connect(results / "results.db")
    ((tid, tps),) = db.execute("SELECT id, tps FROM trial")
    rate = db.execute(
        "SELECT value FROM metric WHERE trial_id = ? AND name = 'log.sampling_rate'", (tid,)
    ).fetchone()
    db.close()
    return tps, rate[0] if rate else 0.0


def bare(
    cluster: Cluster, work: Path, extra: list[str], seconds: int = SECONDS
) -> tuple[float, float]:
    """pgbench as a DBA would type it after a server restart (pgsweep's server is fresh
    too), a warm-up run of the same options first. Returns TPS and pgbench's CPU
    microseconds per transaction in the measured run."""
    cluster.stop()
    cluster.start()
    argv = [str(BINDIR / "pgbench"), *cluster.pgbench_conn_args(), "-b", "select-only"]
    argv += ["-c", str(CLIENTS), "-j", str(CLIENTS), "-P", "1", "-M", "simple", "-n"]
    for secs, stem in ((WARMUP, "warm"), (seconds, "run")):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        res = proc.run(
            [*argv, "-T", str(secs), *(extra if stem == "run" else []), "postgres"],
            out=work / f"{stem}.out", err=work / f"{stem}.err", timeout=secs + 60,
            user=cluster.user, cwd=work,
        )  # fmt: skip
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if not res.ok:
            raise SystemExit(res.describe_failure())
    for log in work.glob("tx.*"):
        log.unlink()
    summary = pgbench.parse_summary(res.stdout)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return summary.tps, cpu / summary.transactions * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--pairs", type=int, default=5, help="pgsweep/bare pairs (part 1)")
    ap.add_argument("--cost-rounds", type=int, default=10, help="rounds of part 2")
    ap.add_argument("--only", choices=("pairs", "cost"), help="run one part")
    args = ap.parse_args()
    user = proc.RunAs(spec.default_user()) if os.geteuid() == 0 else None
    with tempfile.TemporaryDirectory(prefix="pgsweep-fidelity-", dir="/var/tmp") as tmp:
        folder = Path(tmp)
        folder.chmod(0o755)
        bins = binaries.inspect(BINDIR, folder, user)
        sockets = Path(tempfile.mkdtemp(prefix="pgsweep-fid-sock-"))
        sockets.chmod(0o755)
        cluster = Cluster(bins, user, folder / "bare", sockets / "s")
        work = folder / "work"
        work.mkdir()
        if user:
            os.chown(work, user.uid, user.gid)
        try:
            cluster.create([])
            cluster.start()
            init = [str(BINDIR / "pgbench"), *cluster.pgbench_conn_args(), "-i", "-q"]
            proc.run([*init, "-s", str(SCALE), "postgres"], out=folder / "init.out",
                     timeout=300, user=user)  # fmt: skip
            if args.only != "cost":
                fidelity(folder, cluster, work, args.pairs)
            if args.only != "pairs":
                logging_cost(cluster, work, args.cost_rounds)
        finally:
            cluster.destroy()
            subprocess.run(["rm", "-rf", str(sockets)], check=False)


def fidelity(folder: Path, cluster: Cluster, work: Path, pairs: int) -> None:
    print(f"1. pgsweep vs bare pgbench: select-only, scale {SCALE}, {CLIENTS} clients, "
          f"{WARMUP} s warm-up + {SECONDS} s, {pairs} interleaved pairs")  # fmt: skip
    ours, theirs = [], []
    for i in range(pairs):
        order = ("pgsweep", "bare") if i % 2 == 0 else ("bare", "pgsweep")
        for side in order:
            if side == "pgsweep":
                tps, rate = via_pgsweep(folder, i + 1, '"auto"')
                ours.append(tps)
            else:
                theirs.append(bare(cluster, work, [])[0])
        print(f"   pair {i + 1}: pgsweep {ours[-1]:,.0f} tps (log sampling {rate:g}), "
              f"bare {theirs[-1]:,.0f} tps")  # fmt: skip
    ratio = statistics.median(ours) / statistics.median(theirs)
    print(f"   median: pgsweep {statistics.median(ours):,.0f}, bare "
          f"{statistics.median(theirs):,.0f} -> ratio {ratio:.3f} (goal >= 0.99)")  # fmt: skip
    # Pairs run back to back share the machine's state; their ratios, on a log scale,
    # give an interval that says whether the pairs could resolve a 1% difference at all.
    logs = [math.log(a / b) for a, b in zip(ours, theirs, strict=True)]
    if len(logs) >= 2:
        rng = np.random.default_rng(0)
        means = rng.choice(logs, (10_000, len(logs))).mean(axis=1)
        lo, hi = np.exp(np.percentile(means, [2.5, 97.5]))
        print(f"   per-pair ratio: geometric mean {math.exp(statistics.fmean(logs)):.3f}, "
              f"95% bootstrap interval [{lo:.3f}, {hi:.3f}]")  # fmt: skip


def logging_cost(cluster: Cluster, work: Path, rounds: int) -> None:
    print(f"2. logging cost, bare pgbench select-only, {CLIENTS} clients, {rounds} rounds")
    probe, _ = bare(cluster, work, [], seconds=3)
    auto = sampling_rate("auto", None, probe)
    assert auto is not None
    variants = {
        "no log": [],
        "-l (every transaction)": ["-l", f"--log-prefix={work / 'tx'}"],
        f"-l --sampling-rate={auto:g} (auto)": [
            "-l", f"--log-prefix={work / 'tx'}", f"--sampling-rate={auto:g}"],
    }  # fmt: skip
    got: dict[str, list[tuple[float, float]]] = {k: [] for k in variants}
    names = list(variants)
    for r in range(rounds):
        for name in names[r % 3 :] + names[: r % 3]:  # rotate the order every round
            got[name].append(bare(cluster, work, variants[name]))
        print("   round", r + 1, json.dumps({k: round(v[-1][0]) for k, v in got.items()}))
    base = statistics.median(t for t, _ in got["no log"])
    base_cpu = statistics.median(c for _, c in got["no log"])
    for name, values in got.items():
        med = statistics.median(t for t, _ in values)
        cpu = statistics.median(c for _, c in values)
        print(f"   {name:38s} median {med:9,.0f} tps  ratio {med / base:.3f}   "
              f"pgbench CPU {cpu:5.2f} us/tx ({cpu / base_cpu - 1:+.1%})")  # fmt: skip


if __name__ == "__main__":
    main()
