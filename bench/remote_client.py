"""The client (or a synchronous standby, or the server itself) on another host against the
same role beside the server (or the server here), and what the agent costs. Prints figures;
asserts nothing.

    .venv/bin/python bench/remote_client.py [--pairs 3] [--seconds 10] [--role standby]
        [--layers]  # with [os] (a sysctl) and [storage] (ext4 on a loop device), both sides

One host is made with tests/sshhosts.py (sshd in a network namespace of this machine).
Runs are paired, local then remote, each an ordinary `pgsweep run` of a select-only and a
tpcb-like configuration; per pair: TPS, the share of this machine's CPU that was busy
(host.cpu_busy_share: with pgbench elsewhere it no longer counts pgbench), the round
trip measured from the client, the agent's messages per trial and the time per message.

On this machine the "other host" shares the same two CPUs and kernel: pgbench's CPU moves
to another namespace, not to another machine, so the TPS difference here is the TCP path
against the Unix socket, not the CPU a real client host would free."""

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
sys.path.insert(0, str(ROOT / "tests"))
from sshhosts import SimHost, ssh_hosts  # noqa: E402

PGSWEEP = str(ROOT / ".venv" / "bin" / "pgsweep")


LAYERS = ('[os]\nsysctl."vm.dirty_writeback_centisecs" = 499\n'
          '[storage]\ndevice = "loop:2GiB"\nfilesystem = "ext4"\n')


def experiment(folder: Path, seconds: int, host: SimHost | None, role: str,
               layers: bool = False) -> Path:  # fmt: skip
    place = LAYERS if layers else ""
    if host is not None:
        place += (f'[hosts.loadgen]\nssh = "root@{host.address}"\nidentity_file = '
                 f'"{host.identity}"\nknown_hosts = "{host.known_hosts}"\npgsweep = '
                 f'"{PGSWEEP}"\n[roles]\n')  # fmt: skip
        place += {"client": 'client = "loadgen"\n', "standby": 'standbys = ["loadgen"]\n',
                  "server": 'server = "loadgen"\n'}[role]  # fmt: skip
    if role == "standby":
        place += '[replication]\nstandbys = 1\nmode = "sync"\n'
    path = folder / ("remote.toml" if host else "local.toml")
    path.write_text(f'[experiment]\nname = "{path.stem}"\nseed = 1\n{place}[cluster]\n'
                    f'scale = 5\n[workload]\nclients = 2\nduration = "{seconds}s"\n'
                    'warmup = "2s"\n[factors]\nworkload.script = ["select-only", '
                    '"tpcb-like"]\n[repeat]\nrounds = 1\n')  # fmt: skip
    return path


def run(path: Path, results: Path) -> dict[str, dict[str, float]]:
    began = time.monotonic()
    env = dict(os.environ, NO_COLOR="1")
    argv = [PGSWEEP, "run", str(path), "--results", str(results)]
    res = subprocess.run(argv, capture_output=True, text=True, env=env)
    if res.returncode != 0:
        raise SystemExit(res.stdout + res.stderr)
    db = sqlite3.connect(results / "results.db")
    out: dict[str, dict[str, float]] = {}
    for tid, levels, tps, effective in db.execute(
        "SELECT t.id, c.levels_json, t.tps, t.effective_json FROM trial t JOIN configuration c "
        "ON c.id = t.config_id"
    ):
        script = json.loads(levels)["workload.script"]
        m = dict(db.execute("SELECT name, value FROM metric WHERE trial_id = ?", (tid,)))
        e = json.loads(effective)
        out[script] = {"tps": tps, "busy": m.get("host.cpu_busy_share", float("nan")),
                       "rtt": m.get("client.rtt_ms", float(e.get("replication.rtt_ms", "nan"))),
                       "calls": m.get("client.agent_calls", float("nan")),
                       "server_calls": m.get("server.agent_calls", float("nan")),
                       "lag": m.get("replication.replay_lag_ms_mean", float("nan")),
                       "clone": float(e.get("replication.clone_seconds", "nan"))}  # fmt: skip
    out["_run"] = {"seconds": time.monotonic() - began}
    return out


def _detail(role: str, a: dict[str, float], b: dict[str, float]) -> str:
    if role == "client":
        return f"{b['calls']:.0f} agent messages in the window's trial"
    if role == "server":
        return f"{b['server_calls']:.0f} agent messages in the whole trial"
    return (f"replay lag {a['lag']:.1f} | {b['lag']:.1f} ms, clone {a['clone']:.1f} | "
            f"{b['clone']:.1f} s")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--role", choices=("client", "standby", "server"), default="client")
    ap.add_argument("--layers", action="store_true", help="[os] and [storage] on both sides")
    args = ap.parse_args()
    print(f"# bench/remote_client.py --pairs {args.pairs} --seconds {args.seconds} --role "
          f"{args.role}{' --layers' if args.layers else ''}, "
          f"{time.strftime('%Y-%m-%dT%H:%MZ', time.gmtime())}")  # fmt: skip
    rows: dict[str, list[tuple[float, float]]] = {}
    with ssh_hosts(1) as (host,), tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        folder.chmod(0o755)
        for n in range(args.pairs):
            local = run(experiment(folder, args.seconds, None, args.role, args.layers),
                        folder / f"l{n}")  # fmt: skip
            remote = run(experiment(folder, args.seconds, host, args.role, args.layers),
                         folder / f"r{n}")  # fmt: skip
            print(f"pair {n + 1} run: local {local['_run']['seconds']:.1f} s | remote "
                  f"{remote['_run']['seconds']:.1f} s (2 trials each, set-up included)")
            for script in ("select-only", "tpcb-like"):
                a, b = local[script], remote[script]
                rows.setdefault(script, []).append((b["tps"] / a["tps"], b["busy"] - a["busy"]))
                print(f"pair {n + 1} {script:11s}: local {a['tps']:9,.0f} tps busy "
                      f"{a['busy']:.0%} | remote {b['tps']:9,.0f} tps busy {b['busy']:.0%} "
                      f"rtt {b['rtt']:.3f} ms, " + _detail(args.role, a, b))  # fmt: skip
    for script, pairs in rows.items():
        ratio = statistics.median(r for r, _ in pairs)
        busy = statistics.median(d for _, d in pairs)
        print(f"{script:11s}: remote/local TPS median {ratio:.3f}; this machine's busy share "
              f"{busy:+.1%} (median of {len(pairs)} pairs)")  # fmt: skip


if __name__ == "__main__":
    main()
