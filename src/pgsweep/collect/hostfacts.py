"""What makes two machines the same machine for a benchmark, compared between a fleet's
host groups before anything is dispatched: the kernel, the CPU (model, microcode, how many
this process may use), memory (whole GiB: twins differ by a few MB of kernel reservations),
NUMA nodes and the PostgreSQL server the file runs. `pgsweep facts FILE` prints them as
JSON on each host; `differences` names what differs, and engine.fleet refuses groups that
differ unless the file allows those facts ([experiment] hosts_may_differ)."""

from __future__ import annotations

import os
import platform
import re
import tempfile
from collections.abc import Collection, Mapping
from pathlib import Path

from ..host.local import LOCAL

FACTS = ("kernel", "cpu_model", "microcode", "usable_cpus", "memory_gib", "numa_nodes",
         "postgres")  # fmt: skip


def gather(bindir: Path) -> dict[str, str]:
    """This machine's facts; `bindir` holds the server the experiment runs."""
    cpuinfo = Path("/proc/cpuinfo").read_text()
    meminfo = Path("/proc/meminfo").read_text()
    models = re.findall(r"^model name\s*:\s*(.+)$", cpuinfo, re.M)
    micro = sorted(set(re.findall(r"^microcode\s*:\s*(\S+)", cpuinfo, re.M)))
    total = re.search(r"^MemTotal:\s*(\d+) kB", meminfo, re.M)
    nodes = list(Path("/sys/devices/system/node").glob("node[0-9]*"))
    return {
        "kernel": platform.release(),
        "cpu_model": models[0].strip() if models else platform.processor() or "unknown",
        "microcode": ",".join(micro) or "unknown",
        "usable_cpus": str(len(os.sched_getaffinity(0))),  # a pinned or limited host has fewer
        "memory_gib": str(round(int(total.group(1)) / 2**20)) if total else "unknown",
        "numa_nodes": str(len(nodes) or 1),
        "postgres": _server_version(bindir),
    }


def _server_version(bindir: Path) -> str:
    with tempfile.TemporaryDirectory(prefix="pgsweep-facts-") as scratch:
        res = LOCAL.run([str(bindir / "postgres"), "--version"], out=Path(scratch) / "v.out",
                        timeout=30)  # fmt: skip
        return res.stdout.strip() if res.ok else f"(postgres --version failed: {res.tail(1)})"


def differences(by_group: Mapping[str, Mapping[str, str]],
                allowed: Collection[str]) -> dict[str, dict[str, str]]:  # fmt: skip
    """Fact -> {group: value} for every fact (not allowed to differ) on which the groups
    do not all agree; a fact a group did not report counts as differing."""
    out: dict[str, dict[str, str]] = {}
    for fact in FACTS:
        if fact in allowed:
            continue
        seen = {g: facts.get(fact, "(not reported)") for g, facts in by_group.items()}
        if len(set(seen.values())) > 1:
            out[fact] = seen
    return out


def describe(diff: Mapping[str, Mapping[str, str]]) -> list[str]:
    """One line per differing fact: `usable_cpus: alpha 2; beta 1`."""
    return [f"{fact}: " + "; ".join(f"{g} {v}" for g, v in sorted(values.items()))
            for fact, values in diff.items()]  # fmt: skip
