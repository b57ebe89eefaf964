"""Where the test suite's CPU goes, per test and per module: a pytest plugin that puts each
pytest process (each lane of scripts/test.sh) in a cgroup v1 cpuacct group of its own, so
everything a test starts is counted with it (servers, pgbench, cp, the simulated hosts'
sshd sessions, Ansible), even a daemon pg_ctl left behind; and a summary of what it wrote.

Root only, with the cpuacct controller mounted at /sys/fs/cgroup/cpuacct (cgroup v1).
A module-scoped fixture's CPU counts with the module's first test.

    mkdir -p /tmp/suite-cpu && cd <a fresh clone> && \\
    PGSWEEP_SUITE_CPU=/tmp/suite-cpu PYTHONPATH=$PWD/bench/suite-cpu \\
        PYTEST_ADDOPTS="-p suite_cpu" scripts/test.sh
    python3 bench/suite-cpu/suite_cpu.py /tmp/suite-cpu      # the table, largest first

Stop 46's figures (ci11, 12m15s with the plugin on): results-2026-12-07.txt."""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, TextIO

GROUP = Path("/sys/fs/cgroup/cpuacct/pgsweep-suite-cpu")
_state: dict[str, Any] = {}


def _usage(group: Path) -> float:
    return int((group / "cpuacct.usage").read_text()) / 1e9


def pytest_configure(config: Any) -> None:
    out = os.environ.get("PGSWEEP_SUITE_CPU")
    if not out:
        return
    group = GROUP / str(os.getpid())
    group.mkdir(parents=True, exist_ok=True)
    (group / "cgroup.procs").write_text(str(os.getpid()))
    _state["group"] = group
    _state["out"] = open(Path(out) / f"{os.getpid()}.tsv", "a")  # noqa: SIM115


def pytest_runtest_protocol(item: Any, nextitem: Any) -> None:
    if "group" in _state:
        _state["began"] = (_usage(_state["group"]), time.monotonic())


def pytest_runtest_logfinish(nodeid: str, location: Any) -> None:
    if "began" not in _state:
        return
    cpu, wall = _state.pop("began")
    out: TextIO = _state["out"]
    out.write(f"{nodeid}\t{_usage(_state['group']) - cpu:.2f}\t{time.monotonic() - wall:.2f}\n")
    out.flush()


def pytest_unconfigure(config: Any) -> None:
    if "group" not in _state:
        return
    group: Path = _state["group"]
    _state["out"].write(f"TOTAL\t{_usage(group):.2f}\t0\n")
    _state["out"].close()
    # out of the group, and the group removed once nothing it started is left in it
    (Path("/sys/fs/cgroup/cpuacct") / "cgroup.procs").write_text(str(os.getpid()))
    with contextlib.suppress(OSError):  # a process the lane started may still run there
        group.rmdir()


def summarize(folder: Path) -> None:
    modules: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    lanes = []
    for path in sorted(folder.glob("*.tsv")):
        first = None
        for line in path.read_text().splitlines():
            name, cpu, wall = line.split("\t")
            if name == "TOTAL":
                lanes.append((float(cpu), first or "?"))
                continue
            first = first or name.split("::")[0]
            modules[name.split("::")[0]][0] += float(cpu)
            modules[name.split("::")[0]][1] += float(wall)
    print("lanes (CPU-s, first module):")
    for lane_cpu, lane_first in sorted(lanes, reverse=True):
        print(f"  {lane_cpu:7.1f}  {lane_first}")
    print(f"  {sum(c for c, _ in lanes):7.1f}  all lanes")
    print("modules (CPU-s, wall s):")
    for module, (module_cpu, module_wall) in sorted(modules.items(), key=lambda kv: -kv[1][0]):
        print(f"  {module_cpu:7.1f} {module_wall:7.1f}  {module}")
    for g in [*GROUP.glob("[0-9]*"), GROUP]:  # the lanes' groups left, once empty
        with contextlib.suppress(OSError):
            g.rmdir()


if __name__ == "__main__":
    summarize(Path(sys.argv[1]))
