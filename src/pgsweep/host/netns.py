"""A private network for a primary and its standbys (replication.network): two network
namespaces of pgsweep's own, one for the primary's TCP side and one for the standbys,
joined by a veth pair whose both ends live inside them, optionally shaped by a tbf qdisc
on the primary's end (what the primary sends: the WAL stream). Nothing is added to the
host's own network: no address another user could bind first, no route, no port reachable
from outside. Clients still reach every server on its Unix socket, which namespaces do not
separate.

Both namespaces are journaled before they are made; deleting them takes the veth pair and
its qdisc along. Names carry the run id (PID and start time), so a dead run's journal never
names a live run's namespace. No latency emulation: netem is not in every kernel (not in
this machine's), and pgsweep refuses replication.delay rather than emulate it badly."""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import internal
from . import proc
from .api import Host, Recorder

NETNS = re.compile(r"^pgsweep-\d+-\d+-\d+-[ps]$")  # the namespaces pgsweep makes, no other
DEVICE = "pgsweep0"  # each end of the pair, inside its own namespace
PRIMARY_IP, STANDBY_IP = "10.213.0.1", "10.213.0.2"  # private to the two namespaces
RATE = re.compile(r"^(\d+(\.\d+)?)(kbit|mbit|gbit)$")
_RTT_PROBE = """
import socket, sys, time
addr, n = sys.argv[1], int(sys.argv[2])
times = []
for _ in range(n):
    s = socket.socket(); s.settimeout(5); t = time.perf_counter()
    s.connect((addr, 5432)); times.append(time.perf_counter() - t); s.close()
print(min(times) * 1000)
"""


def rate_bits(text: str) -> int:
    """ "10mbit" -> 10_000_000; ValueError for anything tc would not read the same way."""
    m = RATE.fullmatch(text)
    if not m:
        raise ValueError('a rate such as "10mbit", "500kbit" or "1gbit"')
    bits = float(m.group(1)) * {"kbit": 1e3, "mbit": 1e6, "gbit": 1e9}[m.group(3)]
    if not 8_000 <= bits <= 100e9:
        raise ValueError("a rate between 8kbit and 100gbit")
    return int(bits)


@dataclass
class Link:
    primary_ns: str  # the primary's TCP side lives here
    standby_ns: str  # the standbys live here
    scratch: Path  # root's folder for the commands' output
    host: Host  # the machine both namespaces are on: every command goes through it
    made: list[str] = field(default_factory=list)  # the namespaces this link created

    host_ip = PRIMARY_IP  # the address the primary listens on, in its namespace
    peer_ip = STANDBY_IP  # the standbys' address, the only one the primary trusts

    def destroy(self) -> None:
        for name in reversed(self.made):  # made by this link: no name check, no lookup
            _delete(name, self.scratch, self.host)
        self.made.clear()

    def rtt_ms(self, probes: int = 5) -> float:
        """The shortest TCP connect time from the standbys' namespace to the primary (a SYN
        and its answer: one round trip), in ms; needs the primary listening."""
        argv = ["nsenter", f"--net=/run/netns/{self.standby_ns}", sys.executable, "-I", "-c",
                _RTT_PROBE, PRIMARY_IP, str(probes)]  # fmt: skip
        res = self.host.run(argv, out=self.scratch / f"rtt-{self.standby_ns}.out", timeout=60)
        if not res.ok:
            raise internal(f"measuring the round trip failed: {res.last_line()}")
        return float(res.stdout.strip())


def create(journal: Recorder, run_id: str, number: int, rate: int | None,
           scratch: Path, host: Host) -> Link:  # fmt: skip
    """Both namespaces, the veth pair between them with its addresses, and the shaping, on
    `host`; each namespace journaled before it is made (`journal` is the run's UndoJournal
    there)."""
    base = f"pgsweep-{run_id}-{number}"
    link = Link(f"{base}-p", f"{base}-s", scratch, host)
    p, s = link.primary_ns, link.standby_ns
    host.private_dir_once(scratch, 0o700)
    try:
        for name in (p, s):
            journal.record({"netns": name})
            _step(host, ["ip", "netns", "add", name], scratch, f"netns-add-{name}")
            link.made.append(name)
        steps = [
            ["ip", "-n", p, "link", "add", DEVICE, "type", "veth", "peer", "name", DEVICE,
             "netns", s],
            ["ip", "-n", p, "addr", "add", f"{PRIMARY_IP}/30", "dev", DEVICE],
            ["ip", "-n", s, "addr", "add", f"{STANDBY_IP}/30", "dev", DEVICE],
            *(["ip", "-n", ns, "link", "set", dev, "up"]
              for ns in (p, s) for dev in ("lo", DEVICE)),
        ]  # fmt: skip
        if rate is not None:
            burst = max(32 * 1024, rate // 8 // 100)  # at least 10 ms of the rate
            steps.append(["tc", "-n", p, "qdisc", "add", "dev", DEVICE, "root", "tbf", "rate",
                          f"{rate}bit", "burst", str(burst), "latency", "100ms"])  # fmt: skip
        for i, argv in enumerate(steps):
            _step(host, argv, scratch, f"netns-{number}-{i}")
    except BaseException:
        link.destroy()
        raise
    return link


def _step(host: Host, argv: list[str], scratch: Path, name: str) -> None:
    res = host.run(argv, out=scratch / f"{name}.out", timeout=120)
    if not res.ok:
        raise internal(f"making the standbys' network failed: `{' '.join(argv)}`: "
                       f"{res.last_line()}")  # fmt: skip


def exists(name: str, host: Host) -> bool:
    return host.lstat(Path("/run/netns", name)) is not None


def undo_entry(entry: dict[str, str], scratch: Path, host: Host) -> str | None:
    """Delete a namespace pgsweep made (its name checked: a journal is data); the veth end
    inside it, its peer and its qdisc go with it. The journal's replay runs on the machine
    itself (`host` the local one); a run's own link passes its host."""
    name = entry.get("netns", "")
    if not NETNS.fullmatch(name):
        raise OSError("not a namespace pgsweep makes; the journal entry is refused")
    if not exists(name, host):
        return None
    _delete(name, scratch, host)
    return f"removed namespace {name}"


def _delete(name: str, scratch: Path, host: Host) -> None:
    """`ip netns delete`; one already gone is fine."""
    host.private_dir_once(scratch, 0o700)
    res = host.run(["ip", "netns", "delete", name], out=scratch / f"netns-delete-{name}.out",
                   timeout=120)  # fmt: skip
    if not res.ok and exists(name, host):
        raise OSError(f"ip netns delete {name}: {res.last_line()}")


def features() -> dict[str, str]:
    """What this machine offers for replication.network (for `doctor`)."""
    out = {}
    out["namespaces"] = "yes" if Path("/proc/self/ns/net").exists() else "no"
    out["ip"] = "yes" if _which("ip") else "no (apt-get install iproute2)"
    out["tc"] = "yes" if _which("tc") else "no (apt-get install iproute2)"
    out["nsenter"] = "yes" if _which("nsenter") else "no (apt-get install util-linux)"
    release = os.uname().release
    netem = any(Path(f"/lib/modules/{release}").glob("kernel/net/sched/sch_netem.ko*"))
    out["netem"] = "yes" if netem else "no: replication.delay is refused"
    return out


def _which(tool: str) -> bool:
    return any(Path(d, tool).exists() for d in proc.DEFAULT_PATH.split(":"))
