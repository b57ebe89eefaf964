"""Several SSH "hosts" on this one machine, for tests of remote hosts and fleets.

Each host is a network namespace of the test's own, with a veth to a bridge that lives in
a namespace of its own; the controller (the test process, in the root namespace) reaches
the bridge through one more veth. Every host runs sshd (root login by key only, keys and
host keys made for the test, a strict known_hosts file) inside a private mount namespace
in which /var/lib/pgsweep (pgsweep's registry of runs and journals), /var/tmp (work
areas) and /var/cache/pgsweep (its build cache) are tmpfs of that host's own, root's
shell rc files read as empty, and a hostname of its own (h1, h2, ...). Everything else
is shared: the same binaries, /tmp, /run (so the kernel lock stays machine-wide: kernel
values are global), and the kernel.

Used as a context manager: every process in the namespaces (only ours run there) is
stopped by PID, the namespaces (and with them every veth) are deleted and the key folder
removed, on every path."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Collection, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

SSHD = "/usr/sbin/sshd"
PRIVATE_DIRS = ("/var/lib/pgsweep", "/var/tmp", "/var/cache/pgsweep")
ROOT_RC = ("/root/.bashrc", "/root/.profile", "/root/.bash_profile")


@dataclass(frozen=True)
class SimHost:
    name: str  # the namespace
    address: str
    known_hosts: Path
    identity: Path

    def ssh_argv(self, *command: str) -> list[str]:
        """ssh to this host as root, strictly: no password, no unknown host key."""
        return ["ssh", "-T", "-F", "/dev/null", "-i", str(self.identity), "-o", "BatchMode=yes",
                "-o", "IdentitiesOnly=yes", "-o", "StrictHostKeyChecking=yes",
                "-o", f"UserKnownHostsFile={self.known_hosts}", "-o", "ConnectTimeout=5",
                f"root@{self.address}", *command]  # fmt: skip

    def pids(self) -> list[int]:
        """The processes in this host's network namespace, as `ip netns pids` finds them
        (the same namespace file: device and inode), without starting a process: tests
        ask five times a second while they wait (a fork of ip each time was about 2% of
        the suite's CPU in its second phase, perf, stop 46)."""
        try:
            st = os.stat(f"/run/netns/{self.name}")
        except OSError:
            return []
        found = []
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                ns = os.stat(f"/proc/{entry.name}/ns/net")
            except OSError:  # gone meanwhile, or a kernel thread's
                continue
            if (ns.st_dev, ns.st_ino) == (st.st_dev, st.st_ino):
                found.append(int(entry.name))
        return found

    def settled_pids(self, seconds: float = 30) -> list[int]:
        """pids() once only sshd is left, or after `seconds`: after a run the agent puts
        its host back and exits, and the session of the last command may still be ending."""
        deadline = time.monotonic() + seconds
        while len(found := self.pids()) > 1 and time.monotonic() < deadline:
            time.sleep(0.2)
        return found


def _ip(*args: str, check: bool = True) -> str:
    res = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if check and res.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {res.stderr.strip()}")
    return res.stdout


def _free_subnet() -> str:
    routes = _ip("-4", "route", "show", "table", "all")
    for _ in range(200):
        subnet = f"10.231.{random.randrange(20, 250)}"
        if f"{subnet}." not in routes:
            return subnet
    raise RuntimeError("no free 10.231.N.0/24 subnet for the test's hosts")


def _keygen(path: Path) -> str:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return Path(f"{path}.pub").read_text().strip()


def _sshd_config(folder: Path, name: str, address: str) -> Path:
    conf = folder / f"{name}.sshd_config"
    conf.write_text(
        f"Port 22\nListenAddress {address}\nHostKey {folder / (name + '.hostkey')}\n"
        f"PidFile {folder / (name + '.pid')}\nAuthorizedKeysFile {folder / 'authorized_keys'}\n"
        "PermitRootLogin prohibit-password\nPasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\nPrintMotd no\n"
        "PrintLastLog no\nAcceptEnv none\nX11Forwarding no\nAllowTcpForwarding no\n"
        # A test setting, not pgsweep's: a user's hosts negotiate what their sshd offers.
        # OpenSSH 9's default key exchange (sntrup761x25519) cost each ssh client 0.14
        # CPU-s, curve25519 0.017 (ten connections to a local sshd, /usr/bin/time), and
        # the suite's agents, Ansible and checks open about 600 connections
        "KexAlgorithms curve25519-sha256,curve25519-sha256@libssh.org\n"
    )
    return conf


def _start_sshd(ns: str, hostname: str, conf: Path, log: Path,
                pinned: bool) -> subprocess.Popen[bytes]:  # fmt: skip
    """sshd -D in the namespace, in a private mount namespace with its own tmpfs over the
    folders pgsweep keeps state in (`ip netns exec`, `unshare` and `sh` each exec the next:
    the Popen's PID is sshd's). A pinned host's sshd, and so everything run over SSH there,
    may use CPU 0 only: a host with fewer CPUs than the others."""
    mounts = " && ".join(f"mkdir -p {d} && mount -t tmpfs -o mode=0755 tmpfs {d}"
                         for d in PRIVATE_DIRS)  # fmt: skip
    # root's shell rc files read as empty on a host: bash reads ~/.bashrc for every
    # command sshd starts, and this development machine's runs `pyenv init` there (about
    # 40 processes and 0.17 CPU-s per SSH command, 20,000 processes in test_fleet_hosts)
    quiet = " && ".join(f"{{ [ ! -f {rc} ] || mount --bind /dev/null {rc}; }}" for rc in ROOT_RC)
    script = (f"hostname {hostname} && {mounts} && {quiet} && chmod 1777 /var/tmp && "
              "mkdir -p -m 0755 /run/sshd && "
              f"exec {'taskset -c 0 ' if pinned else ''}{SSHD} -D -f {conf} -E {log}")
    return subprocess.Popen(
        ["ip", "netns", "exec", ns, "unshare", "--mount", "--uts", "--propagation", "private",
         "sh", "-c", script],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip


def _wait_listening(host: SimHost, deadline: float) -> None:
    while time.monotonic() < deadline:
        res = subprocess.run(host.ssh_argv("true"), capture_output=True, timeout=10, check=False)
        if res.returncode == 0:
            return
        time.sleep(0.1)
    raise RuntimeError(f"sshd on {host.name} ({host.address}) did not answer")



def harness_link(name: str) -> bool:
    """A link these hosts put in the root namespace (`vc` and the hosts' tag): another
    module's check for links a run left must not count them (lanes run side by side)."""
    return name.startswith("vc") and name[2:].isdigit()

@contextmanager
def ssh_hosts(count: int, pinned: Collection[int] = ()) -> Iterator[list[SimHost]]:
    """`count` hosts reachable over SSH from the root namespace; all gone afterwards. The
    hosts numbered in `pinned` (1, 2, ...) run on CPU 0 only."""
    if not shutil.which(SSHD):
        raise RuntimeError("no sshd (scripts/setup.sh --dev installs openssh-server)")
    tag = f"{os.getpid() % 100000}{random.randrange(100):02d}"
    folder = Path(tempfile.mkdtemp(prefix="pgsweep-sshhosts-"))
    subnet = _free_subnet()
    bridge = f"pgsw-br{tag}"
    names = [f"pgsw-h{i}-{tag}" for i in range(1, count + 1)]
    made: list[str] = []
    daemons: list[subprocess.Popen[bytes]] = []
    try:
        client_pub = _keygen(folder / "client")
        (folder / "authorized_keys").write_text(client_pub + "\n")
        _ip("netns", "add", bridge)
        made.append(bridge)
        _ip("-n", bridge, "link", "add", "br0", "type", "bridge")
        _ip("-n", bridge, "link", "set", "br0", "up")
        _ip("link", "add", f"vc{tag}", "type", "veth", "peer", "name", "vbc", "netns", bridge)
        _ip("-n", bridge, "link", "set", "vbc", "master", "br0", "up")
        _ip("addr", "add", f"{subnet}.1/24", "dev", f"vc{tag}")
        _ip("link", "set", f"vc{tag}", "up")
        known: list[str] = []
        hosts = []
        for i, ns in enumerate(names, 1):
            address = f"{subnet}.{10 + i}"
            _ip("netns", "add", ns)
            made.append(ns)
            _ip("-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", f"vb{i}",
                "netns", bridge)  # fmt: skip
            _ip("-n", bridge, "link", "set", f"vb{i}", "master", "br0", "up")
            _ip("-n", ns, "addr", "add", f"{address}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            _ip("-n", ns, "link", "set", "lo", "up")
            hostkey = _keygen(folder / f"{ns}.hostkey")
            known.append(f"{address} {hostkey}")
            conf = _sshd_config(folder, ns, address)
            daemons.append(_start_sshd(ns, f"h{i}", conf, folder / f"{ns}.log", i in pinned))
            hosts.append(SimHost(ns, address, folder / "known_hosts", folder / "client"))
        (folder / "known_hosts").write_text("\n".join(known) + "\n")
        deadline = time.monotonic() + 20
        for host in hosts:
            _wait_listening(host, deadline)
        yield hosts
    finally:
        for ns in made:
            for pid in (int(p) for p in _ip("netns", "pids", ns, check=False).split()):
                with suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        for daemon in daemons:
            with suppress(subprocess.TimeoutExpired):
                daemon.wait(timeout=5)
        for ns in made:
            _ip("netns", "delete", ns, check=False)
        _ip("link", "delete", f"vc{tag}", check=False)
        if os.environ.get("PGSWEEP_KEEP_SSHHOSTS"):
            print(f"kept {folder}")
        else:
            shutil.rmtree(folder, ignore_errors=True)
