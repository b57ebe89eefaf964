"""What starting one command as the server user costs a pgsweep process that holds its
usual libraries (numpy, scipy, DuckDB, pyarrow): Python's own user=/group= (a fork() of
the whole process) against setpriv (a vfork(), then setpriv drops to the user before it
execs the command: host/proc.start's way). Root only.

    .venv/bin/python bench/spawn.py [N]

Stop 47, this machine (2 cores, AMD EPYC, 126 MB resident): user= 13.6-17.9 ms of CPU
(parent and child) and 13-18 ms wall a command; setpriv 3.0-3.9 ms and 3.0-4.0 ms."""

from __future__ import annotations

import os
import pwd
import resource
import subprocess
import sys
import time

import pgsweep.analysis.core  # the libraries a run holds
import pgsweep.cli
import pgsweep.engine.run
import pgsweep.outputs.html  # noqa: F401


def _cpu() -> float:
    a, b = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return a.ru_utime + a.ru_stime + b.ru_utime + b.ru_stime


def cost(n: int, argv: list[str], **kw: object) -> tuple[float, float]:
    c, t = _cpu(), time.perf_counter()
    for _ in range(n):
        subprocess.run(argv, start_new_session=True, check=True, **kw)  # type: ignore[call-overload]
    return (_cpu() - c) / n * 1000, (time.perf_counter() - t) / n * 1000


def main() -> None:
    if os.geteuid() != 0:
        sys.exit("root only: the command runs as the account nobody")
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    pw = pwd.getpwnam("nobody")
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{n} runs of /bin/true as nobody from a process of {rss:.0f} MB resident")
    for _ in range(2):
        cpu, wall = cost(n, ["/bin/true"], user=pw.pw_uid, group=pw.pw_gid, extra_groups=[])
        print(f"  Python user=/group= (fork):   {cpu:5.2f} ms CPU, {wall:5.2f} ms wall")
        cpu, wall = cost(n, ["setpriv", f"--reuid={pw.pw_uid}", f"--regid={pw.pw_gid}",
                             "--clear-groups", "--", "/bin/true"])  # fmt: skip
        print(f"  setpriv (vfork, then exec):   {cpu:5.2f} ms CPU, {wall:5.2f} ms wall")


if __name__ == "__main__":
    main()
