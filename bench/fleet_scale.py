"""How a fleet folder scales: G host groups' shard folders (10 configurations, 10 rounds
per group: G x 100 trials) merged by `pgsweep merge`, then opened by `pgsweep report
--format json` (the analysis every format shares, with the configuration x group test)
and `pgsweep export --format parquet`. Each command runs as its own process under
/usr/bin/time: wall seconds and peak memory (max RSS). Prints one line per G.

The shard folders are written through the real store (tests/synthetic.py: one plan of
G x 10 rounds, each shard keeping its own rounds, with the fleet facts a `run --shard`
records and each trial's group), so merge, report and export read what a real fleet
leaves; their numbers are drawn (TPS 1000 x a configuration effect x a group offset x
5% noise), not measured, which is all a scale test needs.

    .venv/bin/python bench/fleet_scale.py [--groups 10,30,100] [--keep DIR]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "src"))

from pgsweep.plan import round_spans, shard_rounds  # noqa: E402
from pgsweep.store import Store  # noqa: E402
from synthetic import make_results  # noqa: E402

CONFIGS = {"server.work_mem": ["4MB", "8MB"], "workload.clients": [1, 2, 4, 8, 16]}
ROUNDS_PER_GROUP = 10
PGSWEEP = str(ROOT / ".venv" / "bin" / "pgsweep")


def write_shards(folder: Path, groups: int, seed: int = 1) -> tuple[list[Path], float]:
    rng = np.random.default_rng(seed)
    rounds = groups * ROUNDS_PER_GROUP
    n_configs = 10
    effect = np.exp(rng.normal(0, 0.2, n_configs))
    offset = np.exp(rng.normal(0, 0.1, groups))
    spans = shard_rounds(rounds, groups)
    tps = {(c, r): 1000 * effect[c] * offset[k] * float(np.exp(rng.normal(0, 0.05)))
           for k, span in enumerate(spans) for r in span for c in range(n_configs)}  # fmt: skip
    began = time.monotonic()
    out = []
    for k, span in enumerate(spans, 1):
        mine = set(span)
        skip = {(c, r) for c in range(n_configs) for r in range(1, rounds + 1) if r not in mine}
        shard = make_results(folder / f"g{k:03d}", CONFIGS, tps, rounds, name="fleet",
                             skip=skip)  # fmt: skip
        store = Store(shard / "results.db")
        store.save_environment("fleet", {"shards": str(groups), "shard": str(k),
                                         "group": f"g{k:03d}", "rounds": round_spans(span)})
        store.close()
        _tag_trials(shard / "results.db", f"g{k:03d}", k)
        (shard / "experiment.toml").write_text('[experiment]\nname = "fleet"\n')
        out.append(shard)
    return out, time.monotonic() - began


def _tag_trials(db: Path, group: str, k: int) -> None:
    import sqlite3

    con = sqlite3.connect(db)
    con.execute("UPDATE trial SET host_group = ?, shard = ?", (group, k))
    con.commit()
    con.close()


def timed(argv: list[str]) -> tuple[float, float, str]:
    """Wall seconds and peak RSS (MB) of one command, and its output's tail on failure."""
    res = subprocess.run(["/usr/bin/time", "-f", "%e %M", *argv], capture_output=True,
                         text=True, check=False)  # fmt: skip
    wall, rss = res.stderr.strip().splitlines()[-1].split()
    tail = "" if res.returncode == 0 else res.stderr.strip().splitlines()[-2][:120]
    return float(wall), int(rss) / 1024, tail


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--groups", default="10,30,100")
    ap.add_argument("--keep", type=Path)
    args = ap.parse_args()
    print(f"# bench/fleet_scale.py, {time.strftime('%Y-%m-%dT%H:%MZ', time.gmtime())}, "
          f"{ROUNDS_PER_GROUP} rounds of 10 configurations per group")  # fmt: skip
    print(f"{'groups':>6} {'trials':>6} {'write s':>8} {'merge s':>8} {'merge MB':>8} "
          f"{'report s':>8} {'report MB':>9} {'export s':>8} {'export MB':>9}")
    for groups in (int(g) for g in args.groups.split(",")):
        base = Path(tempfile.mkdtemp(prefix="pgsweep-bench-fleet-", dir=args.keep))
        try:
            shards, wrote = write_shards(base / "shards", groups)
            fleet = base / "fleet"
            merge = timed([PGSWEEP, "merge", *map(str, shards), "--results", str(fleet)])
            report = timed([PGSWEEP, "report", str(fleet), "--format", "json", "-o",
                            str(base / "report.json")])  # fmt: skip
            export = timed([PGSWEEP, "export", str(fleet), "--format", "parquet", "-o",
                            str(base / "trials.parquet")])  # fmt: skip
            print(f"{groups:>6} {groups * ROUNDS_PER_GROUP * 10:>6} {wrote:>8.1f} "
                  f"{merge[0]:>8.1f} {merge[1]:>8.0f} {report[0]:>8.1f} {report[1]:>9.0f} "
                  f"{export[0]:>8.1f} {export[1]:>9.0f}", flush=True)  # fmt: skip
            for what, r in (("merge", merge), ("report", report), ("export", export)):
                if r[2]:
                    print(f"#   {what} failed: {r[2]}")
        finally:
            if args.keep is None:
                shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
