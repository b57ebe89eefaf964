"""What rebuilding a standby costs after a writing trial, two ways, on pgsweep's own
clusters: `pg_basebackup -X stream -R -c fast` from the running primary (what the
replication layer does: Standby.clone), and a copy of the primary's loaded snapshot made
while it is stopped (`cp -a --reflink=auto`, what restoring the primary itself costs).
A standby cannot instead catch up with a restored primary: restoring moves the primary's
WAL back behind what the standby already replayed."""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from pgsweep import spec
from pgsweep.host import proc, safefs
from pgsweep.host.local import LOCAL
from pgsweep.postgres import binaries
from pgsweep.postgres.cluster import Cluster
from pgsweep.postgres.standby import Standby, upstream_socket

BINDIR = binaries.locate("auto", where="bench")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--scales", default="10,50", help="pgbench scales, comma-separated")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    user = proc.RunAs(spec.default_user()) if os.geteuid() == 0 else None
    proc.become_subreaper()
    with tempfile.TemporaryDirectory(prefix="pgsweep-clone-", dir="/var/tmp") as tmp:
        folder = Path(tmp)
        folder.chmod(0o755)
        bins = binaries.inspect(BINDIR, folder, user)
        sockets = Path(tempfile.mkdtemp(prefix="pgsweep-clone-sock-"))
        sockets.chmod(0o755)
        try:
            for scale in (int(s) for s in args.scales.split(",")):
                measure(folder / f"s{scale}", bins, user, sockets, scale, args.repeat)
        finally:
            subprocess.run(["rm", "-rf", str(sockets)], check=False)


def measure(folder: Path, bins: binaries.Binaries, user: proc.RunAs | None, sockets: Path,
            scale: int, repeat: int) -> None:  # fmt: skip
    safefs.private_dir(folder, 0o711)
    primary = Cluster(bins, user, folder / "primary", sockets / f"p{scale}", host=LOCAL)
    try:
        primary.create([])
        primary.start()
        init = [bins.path("pgbench"), *primary.pgbench_conn_args(), "-i", "-q", "-s", str(scale)]
        proc.run([*init, "postgres"], out=primary.scratch / "init.out", timeout=900, user=user)
        primary.take_snapshot()
        primary.start()
        backup = []
        for i in range(repeat):
            standby = Standby(bins, user, folder / f"b{i}", sockets / f"b{scale}{i}", "s1",
                              upstream_socket(primary), host=LOCAL)  # fmt: skip
            os.sync()
            backup.append(standby.clone(primary))
            standby.destroy()
        primary.stop()
        copy = []
        for i in range(repeat):
            os.sync()
            began = time.monotonic()
            primary._copy(primary.snapshot_dir, folder / f"c{i}")
            copy.append(time.monotonic() - began)
            safefs.remove_tree(folder / f"c{i}")
        size = sum(f.stat().st_size for f in primary.snapshot_dir.rglob("*") if f.is_file())
        print(f"scale {scale} ({size / 1024**2:,.0f} MiB loaded): pg_basebackup "
              f"{statistics.median(backup):.2f} s, snapshot copy {statistics.median(copy):.2f} s "
              f"(medians of {repeat}; all: {[round(v, 2) for v in backup]} / "
              f"{[round(v, 2) for v in copy]})")  # fmt: skip
    finally:
        primary.destroy()


if __name__ == "__main__":
    main()
