"""What makes two machines the same machine for a benchmark, compared between a fleet's
host groups before anything is dispatched: the kernel, the CPU (model, microcode, how many
this process may use), memory (whole GiB: twins differ by a few MB of kernel reservations),
NUMA nodes and the PostgreSQL server the file runs. `pgsweep facts FILE` prints them as
JSON on each host; `differences` names what differs, and engine.fleet refuses groups that
differ unless the file allows those facts ([experiment] hosts_may_differ)."""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from pathlib import Path

from ..host.api import Host, scratch_path
from ..host.local import LOCAL

FACTS = ("kernel", "cpu_model", "microcode", "usable_cpus", "memory_gib", "numa_nodes",
         "postgres")  # fmt: skip


def gather(bindir: Path, host: Host = LOCAL) -> dict[str, str]:
    """The facts of the machine `host` reaches; `bindir` holds the server the experiment
    runs. Usable CPUs are this process's (a pinned or limited host has fewer)."""
    cpuinfo = host.read_text(Path("/proc/cpuinfo"))
    models = re.findall(r"^model name\s*:\s*(.+)$", cpuinfo, re.M)
    micro = sorted(set(re.findall(r"^microcode\s*:\s*(\S+)", cpuinfo, re.M)))
    total = re.search(r"^MemTotal:\s*(\d+) kB", host.read_text(Path("/proc/meminfo")), re.M)
    allowed = re.search(r"^Cpus_allowed_list:\s*(\S+)",
                        host.read_text(Path("/proc/self/status")), re.M)  # fmt: skip
    return {
        "kernel": host.read_text(Path("/proc/sys/kernel/osrelease")).strip(),
        "cpu_model": models[0].strip() if models else "unknown",
        "microcode": ",".join(micro) or "unknown",
        "usable_cpus": str(count_list(allowed.group(1))) if allowed else "unknown",
        "memory_gib": str(round(int(total.group(1)) / 2**20)) if total else "unknown",
        "numa_nodes": str(count_list(host.read_text(Path("/sys/devices/system/node/online")))),
        "postgres": _server_version(host, bindir),
    }


def count_list(text: str) -> int:
    """How many numbers a kernel list names: `0-3,8,10-11` -> 7."""
    n = 0
    for part in filter(None, text.strip().split(",")):
        lo, _, hi = part.partition("-")
        n += int(hi or lo) - int(lo) + 1
    return n


def _server_version(host: Host, bindir: Path) -> str:
    scratch = host.private_dir(scratch_path("pgsweep-facts-"))
    try:
        res = host.run([str(bindir / "postgres"), "--version"], out=scratch / "v.out",
                       timeout=30)  # fmt: skip
        return res.stdout.strip() if res.ok else f"(postgres --version failed: {res.tail(1)})"
    finally:
        host.remove_tree(scratch)


def only_facts(reported: object) -> dict[str, str]:
    """What a host reported, kept only where it is one of FACTS with a text value: a host
    cannot add keys (a `loadgen:kernel` of a server's would hide its copy's) or crash the
    comparison with another shape."""
    if not isinstance(reported, dict):
        return {}
    return {k: v for k, v in reported.items() if k in FACTS and isinstance(v, str)}


def differences(by_group: Mapping[str, Mapping[str, str]],
                allowed: Collection[str]) -> dict[str, dict[str, str]]:  # fmt: skip
    """Fact -> {group: value} for every fact (not allowed to differ) on which the groups
    do not all agree; a fact a group did not report counts as differing. The facts of a
    group's copy of another role's host are NAME:FACT (engine/fleet_topology.py), each
    compared with the other groups' copies and allowed by its FACT."""
    roles = sorted({k.split(":", 1)[0] for facts in by_group.values() for k in facts
                    if ":" in k and k.split(":", 1)[1] in FACTS})  # fmt: skip
    out: dict[str, dict[str, str]] = {}
    for prefix in ("", *(f"{r}:" for r in roles)):
        for fact in FACTS:
            if fact in allowed:
                continue
            key = prefix + fact
            seen = {g: facts.get(key, "(not reported)") for g, facts in by_group.items()}
            if len(set(seen.values())) > 1:
                out[key] = seen
    return out


def describe(diff: Mapping[str, Mapping[str, str]]) -> list[str]:
    """One line per differing fact: `usable_cpus: alpha 2; beta 1`."""
    return [f"{fact}: " + "; ".join(f"{g} {v}" for g, v in sorted(values.items()))
            for fact, values in diff.items()]  # fmt: skip
