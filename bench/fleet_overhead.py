"""What a fleet costs beyond its shards: `pgsweep run FILE --inventory INV` (facts playbook,
dispatch, async polling, fetch, merge) against the time the shards themselves ran. Prints
figures; asserts nothing.

    .venv/bin/python bench/fleet_overhead.py [--groups 2,3] [--rounds-per-group 1,3]

Hosts are tests/sshhosts.py's (sshd in network namespaces of this machine, one host per
group). Each fleet runs a select-only experiment of two configurations (1 s trials, no
warm-up) with ROUNDS-PER-GROUP x GROUPS rounds. Per fleet: its wall time, the longest
shard's own span (the shard's experiment start to its last trial's end, as its folder
records them), the overhead (the difference), and a `pgsweep merge` of the shard folders
the fleet kept, timed on its own. The overhead per group and per trial follow from the
rows; on this machine every "host" shares the same two CPUs, so the shards of a fleet run
side by side on 2 cores and Ansible's own CPU competes with them."""

from __future__ import annotations

import argparse
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from sshhosts import SimHost, ssh_hosts  # noqa: E402

PGSWEEP = str(ROOT / ".venv" / "bin" / "pgsweep")


def inventory(folder: Path, hosts: list[SimHost]) -> Path:
    lines = []
    for i, h in enumerate(hosts, 1):
        args = (f"-F /dev/null -o UserKnownHostsFile={h.known_hosts} "
                "-o StrictHostKeyChecking=yes -o IdentitiesOnly=yes")  # fmt: skip
        lines.append(f"[g{i}]\ng{i}-{h.name} ansible_host={h.address} ansible_user=root "
                     f"ansible_ssh_private_key_file={h.identity} "
                     f"ansible_ssh_common_args='{args}' pgsweep_bin={PGSWEEP} "
                     "ansible_python_interpreter=/usr/bin/python3\n")  # fmt: skip
    path = folder / "inventory.ini"
    path.write_text("\n".join(lines))
    return path


def experiment(folder: Path, rounds: int) -> Path:
    path = folder / f"fleet-{rounds}.toml"
    path.write_text(f'[experiment]\nname = "fleet-overhead"\nseed = 1\n[cluster]\nscale = 1\n'
                    '[workload]\nscript = "select-only"\nclients = 1\nduration = "1s"\n'
                    'warmup = "0s"\n[factors]\nserver.synchronous_commit = ["on", "off"]\n'
                    f'[repeat]\nrounds = {rounds}\n')  # fmt: skip
    return path


def _t(stamp: str) -> float:
    return datetime.fromisoformat(stamp).timestamp()


def shard_span(folder: Path) -> tuple[float, int]:
    db = sqlite3.connect(folder / "results.db")
    try:
        created = db.execute("SELECT created_at FROM experiment").fetchone()[0]
        end, n = db.execute("SELECT max(finished_at), count(*) FROM trial").fetchone()
    finally:
        db.close()
    return _t(end) - _t(created), int(n)


def fleet(hosts: list[SimHost], work: Path, rounds_per_group: int) -> dict[str, float]:
    groups = len(hosts)
    path = experiment(work, rounds_per_group * groups)
    out = work / f"fleet-{groups}-{rounds_per_group}"
    began = time.monotonic()
    res = subprocess.run([PGSWEEP, "run", str(path), "--inventory", str(inventory(work, hosts)),
                          "--results", str(out)], capture_output=True, text=True,
                         env=dict(os.environ, NO_COLOR="1"))  # fmt: skip
    wall = time.monotonic() - began
    if res.returncode != 0:
        raise SystemExit(res.stdout + res.stderr)
    spans = [shard_span(out / "shards" / f"g{i}") for i in range(1, groups + 1)]
    began = time.monotonic()
    merged = work / f"merged-{groups}-{rounds_per_group}"
    subprocess.run([PGSWEEP, "merge", *(str(out / "shards" / f"g{i}")
                                        for i in range(1, groups + 1)),
                    "--results", str(merged)], check=True, capture_output=True)  # fmt: skip
    merge_s = time.monotonic() - began
    longest = max(s for s, _ in spans)
    return {"groups": groups, "trials": sum(n for _, n in spans), "wall": wall,
            "shard": longest, "overhead": wall - longest, "merge": merge_s}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--groups", default="2,3")
    ap.add_argument("--rounds-per-group", default="1,3")
    args = ap.parse_args()
    sizes = [int(g) for g in args.groups.split(",")]
    per = [int(r) for r in args.rounds_per_group.split(",")]
    print(f"bench/fleet_overhead: groups {sizes}, rounds per group {per}, 2 configurations, "
          "1 s select-only trials")
    print(f"{'groups':>6} {'trials':>6} {'fleet s':>8} {'longest shard s':>15} "
          f"{'overhead s':>10} {'per group s':>11} {'merge s':>7}")
    with (tempfile.TemporaryDirectory(prefix="pgsweep-fleet-bench-") as tmp,
          ssh_hosts(max(sizes)) as hosts):  # fmt: skip
        for g in sizes:
            for r in per:
                row = fleet(hosts[:g], Path(tmp), r)
                print(f"{g:>6} {row['trials']:>6.0f} {row['wall']:>8.1f} "
                      f"{row['shard']:>15.1f} {row['overhead']:>10.1f} "
                      f"{row['overhead'] / g:>11.1f} {row['merge']:>7.2f}", flush=True)


if __name__ == "__main__":
    main()
