"""bench/fidelity: does pgsweep measure what a bare pgbench command measures?

1. The same configuration (select-only, scale 10, 2 clients, 3 s warm-up + 10 s) run
   through `pgsweep run` and as bare commands, interleaved (ABBA order), N pairs. The arms
   differ only in pgsweep itself: each bare trial also gets a fresh cluster made with the
   same recipe (initdb through pgsweep's Cluster, `pgbench -i -q`, CHECKPOINT, the data
   directory copied aside, which stops the server, then a start), the same warm-up (with
   pgbench's vacuum), and the measured run with pgsweep's own argv, transaction log and
   the sampling rate pgsweep's "auto" picks from that warm-up. (The first version compared
   against one long-lived cluster without logging and read 5-9% in pgsweep's favour.)
   Prints each pair, and the geometric mean ratio with a paired t interval.
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
from scipy import stats as sps

from pgsweep import spec
from pgsweep.engine.measure import sampling_rate
from pgsweep.host import proc
from pgsweep.host.local import LOCAL
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


def via_pgsweep(folder: Path, seed: int, latency_log: str) -> tuple[float, float, list[str]]:
    exp = folder / f"exp-{seed}.toml"
    exp.write_text(EXPERIMENT.format(seed=seed, latency_log=latency_log))
    results = folder / f"res-{seed}"
    cmd = [sys.executable, "-m", "pgsweep.cli", "run", str(exp), "--results", str(results)]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    db = sqlite3.connect(results / "results.db")
    ((tid, tps, argv),) = db.execute("SELECT id, tps, pgbench_argv FROM trial")
    rate = db.execute(
        "SELECT value FROM metric WHERE trial_id = ? AND name = 'log.sampling_rate'", (tid,)
    ).fetchone()
    db.close()
    return tps, rate[0] if rate else 0.0, json.loads(argv)


def bare(
    cluster: Cluster, work: Path, extra: list[str], seconds: int = SECONDS
) -> tuple[float, float]:
    """pgbench as a DBA would type it after a server restart, a warm-up run of the same
    options first. Returns TPS and pgbench's CPU microseconds per transaction in the
    measured run (part 2)."""
    cluster.stop()
    cluster.start()
    argv = [str(BINDIR / "pgbench"), *cluster.pgbench_conn_args(), "-b", "select-only"]
    argv += ["-c", str(CLIENTS), "-j", str(CLIENTS), "-P", "1", "-M", "simple", "-n"]
    for secs, stem in ((WARMUP, "warm"), (seconds, "run")):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        res = _pgbench([*argv, "-T", str(secs), *(extra if stem == "run" else []), "postgres"],
                       work, stem, cluster.user, secs)  # fmt: skip
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    for log in work.glob("tx.*"):
        log.unlink()
    summary = pgbench.parse_summary(res.stdout)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return summary.tps, cpu / summary.transactions * 1e6


def _pgbench(argv: list[str], work: Path, stem: str, user: proc.RunAs | None,
             seconds: int) -> proc.Result:  # fmt: skip
    res = proc.run(argv, out=work / f"{stem}.out", err=work / f"{stem}.err",
                   timeout=seconds + 60, user=user, cwd=work)  # fmt: skip
    if not res.ok:
        raise SystemExit(res.describe_failure())
    return res


def bare_like_pgsweep(
    bins: binaries.Binaries, user: proc.RunAs | None, folder: Path, sockets: Path, n: int,
    pgsweep_argv: list[str],
) -> tuple[float, float]:  # fmt: skip
    """One bare trial made the way pgsweep makes one: a fresh cluster by the same recipe,
    a warm-up with pgbench's vacuum, then the measured run with the argv pgsweep ran
    (connection and log prefix swapped) at the sampling rate "auto" picks from this
    warm-up. Returns TPS and the sampling rate."""
    cluster = Cluster(bins, user, folder / f"bare-{n}", sockets / f"b{n}", host=LOCAL)
    work = folder / f"work-{n}"
    work.mkdir()
    if user:
        os.chown(work, user.uid, user.gid)
    try:
        cluster.create([])
        cluster.start()
        init = [str(BINDIR / "pgbench"), *cluster.pgbench_conn_args(), "-i", "-q"]
        _pgbench([*init, "-s", str(SCALE), "postgres"], work, "init", user, 300)
        with cluster.connect() as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_prewarm")
            conn.execute("CHECKPOINT")
        cluster.take_snapshot()  # stops the server, as pgsweep's build does
        cluster.start()
        conn_args = cluster.pgbench_conn_args()
        common = [str(BINDIR / "pgbench"), *conn_args, "-b", "select-only", "-c", str(CLIENTS),
                  "-j", str(CLIENTS), "-P", "1", "-M", "simple"]  # fmt: skip
        warm = _pgbench([*common, "-T", str(WARMUP), "postgres"], work, "warm", user, WARMUP)
        rate = sampling_rate("auto", None, pgbench.parse_summary(warm.stdout).tps)
        argv = _swap(pgsweep_argv, conn_args, work / "tx", rate)
        res = _pgbench(argv, work, "run", user, SECONDS)
        return pgbench.parse_summary(res.stdout).tps, rate or 0.0
    finally:
        cluster.destroy()


def _swap(argv: list[str], conn: list[str], prefix: Path, rate: float | None) -> list[str]:
    """pgsweep's measured argv on another cluster: its connection options and its log
    prefix replaced, the sampling rate set to `rate` (no log when None)."""
    out, skip = [argv[0], *conn], 0
    for i, arg in enumerate(argv[1:], start=1):
        if skip:
            skip -= 1
        elif arg in ("-h", "-p", "-U"):
            skip = 1
        elif arg.startswith(("--log-prefix=", "--sampling-rate=")) or arg == "-l":
            pass
        elif i == len(argv) - 1:  # the database name
            if rate is not None:
                out += ["-l", f"--log-prefix={prefix}", f"--sampling-rate={rate:g}"]
            out.append(arg)
        else:
            out.append(arg)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--pairs", type=int, default=8, help="pgsweep/bare pairs (part 1)")
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
        cluster = Cluster(bins, user, folder / "bare", sockets / "s", host=LOCAL)
        work = folder / "work"
        work.mkdir()
        if user:
            os.chown(work, user.uid, user.gid)
        try:
            if args.only != "cost":
                fidelity(folder, bins, user, sockets, args.pairs)
            if args.only != "pairs":
                cluster.create([])
                cluster.start()
                init = [str(BINDIR / "pgbench"), *cluster.pgbench_conn_args(), "-i", "-q"]
                proc.run([*init, "-s", str(SCALE), "postgres"], out=folder / "init.out",
                         timeout=300, user=user)  # fmt: skip
                logging_cost(cluster, work, args.cost_rounds)
        finally:
            cluster.destroy()
            subprocess.run(["rm", "-rf", str(sockets)], check=False)


def fidelity(folder: Path, bins: binaries.Binaries, user: proc.RunAs | None, sockets: Path,
             pairs: int) -> None:  # fmt: skip
    print(f"1. pgsweep vs bare commands, equal recipe: select-only, scale {SCALE}, "
          f"{CLIENTS} clients, {WARMUP} s warm-up + {SECONDS} s, {pairs} pairs (ABBA)")  # fmt: skip
    ours, theirs = [], []
    argv: list[str] = []
    order = [("pgsweep", "bare"), ("bare", "pgsweep")]
    for i in range(pairs):
        rates = {}
        for side in order[i % 2] if argv else order[0]:  # the first pair learns the argv
            if side == "pgsweep":
                tps, rates["pgsweep"], argv = via_pgsweep(folder, i + 1, '"auto"')
                ours.append(tps)
            else:
                tps, rates["bare"] = bare_like_pgsweep(bins, user, folder, sockets, i, argv)
                theirs.append(tps)
        print(f"   pair {i + 1}: pgsweep {ours[-1]:,.0f} tps, bare {theirs[-1]:,.0f} tps, "
              f"ratio {ours[-1] / theirs[-1]:.3f} (log sampling {rates['pgsweep']:g} / "
              f"{rates['bare']:g})", flush=True)  # fmt: skip
    logs = np.log(np.array(ours) / np.array(theirs))
    mean = float(logs.mean())
    if len(logs) >= 2:
        half = float(sps.t.ppf(0.975, len(logs) - 1) * logs.std(ddof=1) / math.sqrt(len(logs)))
        print(f"   pgsweep / bare: geometric mean ratio {math.exp(mean):.3f}, 95% paired t "
              f"interval [{math.exp(mean - half):.3f}, {math.exp(mean + half):.3f}] "
              f"(pair-to-pair SD {logs.std(ddof=1):.1%}; goal: inside [0.99, 1.01])")  # fmt: skip


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
