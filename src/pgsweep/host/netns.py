"""A private network link for standbys (replication.network): a network namespace of
pgsweep's own, joined to the host by a veth pair with private addresses on a /30 that no
interface or route of the machine uses, optionally shaped by a tbf qdisc on the host side
(what the primary sends: the WAL stream). The namespace is journaled before it is made;
deleting it takes the veth pair and its qdisc along, so undoing is one `ip netns delete`.

No latency emulation: netem is not in every kernel (not in this machine's), and pgsweep
refuses replication.delay rather than emulate it badly."""

from __future__ import annotations

import ipaddress
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from ..errors import internal
from . import proc

NETNS = re.compile(r"^pgsweep-\d+-\d+$")  # the namespaces pgsweep makes, and no other
LINK = re.compile(r"^pgs\d+x\d+$")  # the host side of their veth pairs
PEER = "pgsweep0"  # the standby side, inside the namespace
# private /30s tried in turn: 10.213.N.0/30, the first one nothing on the machine uses
_BASE = ipaddress.ip_network("10.213.0.0/16")
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
    m = RATE.match(text)
    if not m:
        raise ValueError('a rate such as "10mbit", "500kbit" or "1gbit"')
    bits = float(m.group(1)) * {"kbit": 1e3, "mbit": 1e6, "gbit": 1e9}[m.group(3)]
    if not 8_000 <= bits <= 100e9:
        raise ValueError("a rate between 8kbit and 100gbit")
    return int(bits)


@dataclass
class Link:
    netns: str
    host_if: str
    host_ip: str
    peer_ip: str
    scratch: Path

    def destroy(self) -> None:
        undo_entry({"netns": self.netns, "link": self.host_if}, self.scratch)

    def rtt_ms(self, probes: int = 5) -> float:
        """The shortest TCP connect time to the primary from inside the namespace (a SYN
        and its answer: one round trip), in ms; needs the primary listening."""
        argv = ["nsenter", f"--net=/run/netns/{self.netns}", sys.executable, "-I", "-c",
                _RTT_PROBE, self.host_ip, str(probes)]  # fmt: skip
        res = proc.run_tool(argv, self.scratch, f"rtt-{self.netns}", timeout=60)
        if not res.ok:
            raise internal(f"measuring the round trip failed: {res.last_line()}")
        return float(res.stdout.strip())


def _used_networks(scratch: Path) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    out = []
    for i, argv in enumerate(
        (["ip", "-o", "-4", "addr", "show"], ["ip", "-4", "route", "show", "table", "all"])
    ):
        text = proc.run_tool(argv, scratch, f"ip-show-{i}").stdout
        for word in re.findall(r"\b\d+\.\d+\.\d+\.\d+(?:/\d+)?\b", text):
            out.append(ipaddress.ip_network(word, strict=False))
    return out


def _free_subnet(scratch: Path) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    used = [u for u in _used_networks(scratch) if u.prefixlen > 0]
    for subnet in _BASE.subnets(new_prefix=30):
        if not any(subnet.overlaps(u) for u in used):
            return subnet
    raise internal("no free private /30 in 10.213.0.0/16 for the standbys' link")


def create(journal: object, number: int, rate: int | None, scratch: Path) -> Link:
    """The namespace, the veth pair with its addresses, and the shaping; journaled first
    (`journal` is the run's UndoJournal)."""
    from .journal import UndoJournal

    assert isinstance(journal, UndoJournal)
    name, host_if = f"pgsweep-{os.getpid()}-{number}", f"pgs{os.getpid()}x{number}"
    subnet = _free_subnet(scratch)
    host_ip, peer_ip = (str(h) for h in list(subnet.hosts())[:2])
    journal.record({"netns": name, "link": host_if})
    steps = [
        ["ip", "netns", "add", name],
        ["ip", "link", "add", host_if, "type", "veth", "peer", "name", PEER, "netns", name],
        ["ip", "addr", "add", f"{host_ip}/30", "dev", host_if],
        ["ip", "link", "set", host_if, "up"],
        ["ip", "-n", name, "addr", "add", f"{peer_ip}/30", "dev", PEER],
        ["ip", "-n", name, "link", "set", PEER, "up"],
        ["ip", "-n", name, "link", "set", "lo", "up"],
    ]
    if rate is not None:
        burst = max(32 * 1024, rate // 8 // 100)  # at least 10 ms of the rate
        steps.append(["tc", "qdisc", "add", "dev", host_if, "root", "tbf", "rate", f"{rate}bit",
                      "burst", str(burst), "latency", "100ms"])  # fmt: skip
    link = Link(name, host_if, host_ip, peer_ip, scratch)
    for i, argv in enumerate(steps):
        res = proc.run_tool(argv, scratch, f"netns-{number}-{i}")
        if not res.ok:
            link.destroy()
            raise internal(f"making the standbys' network failed: `{' '.join(argv)}`: "
                           f"{res.last_line()}")  # fmt: skip
    return link


def exists(name: str) -> bool:
    return Path("/run/netns", name).exists()


def undo_entry(entry: dict[str, str], scratch: Path) -> str | None:
    """Delete a namespace and host link pgsweep made (names checked: a journal is data)."""
    name, host_if = entry.get("netns", ""), entry.get("link", "")
    if not NETNS.match(name) or (host_if and not LINK.match(host_if)):
        raise OSError("not a namespace or link pgsweep makes; the journal entry is refused")
    done = []
    if host_if and Path("/sys/class/net", host_if).exists():
        res = proc.run_tool(["ip", "link", "delete", host_if], scratch, "link-delete")
        if not res.ok and Path("/sys/class/net", host_if).exists():
            raise OSError(f"ip link delete {host_if}: {res.last_line()}")
        done.append(f"link {host_if}")
    if exists(name):
        res = proc.run_tool(["ip", "netns", "delete", name], scratch, "netns-delete")
        if not res.ok:
            raise OSError(f"ip netns delete {name}: {res.last_line()}")
        done.append(f"namespace {name}")
    return f"removed {' and '.join(done)}" if done else None


def features() -> dict[str, str]:
    """What this machine offers for replication.network (for `doctor`)."""
    out = {}
    out["namespaces"] = "yes" if Path("/proc/self/ns/net").exists() else "no"
    out["ip"] = "yes" if _which("ip") else "no (apt-get install iproute2)"
    out["tc"] = "yes" if _which("tc") else "no (apt-get install iproute2)"
    release = os.uname().release
    netem = any(Path(f"/lib/modules/{release}").glob("kernel/net/sched/sch_netem.ko*"))
    out["netem"] = "yes" if netem else "no: replication.delay is refused"
    return out


def _which(tool: str) -> bool:
    return any(Path(d, tool).exists() for d in proc.DEFAULT_PATH.split(":"))
