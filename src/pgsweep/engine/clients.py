"""The roles on other hosts ([roles] server, client, standbys): each host's agent opened
and checked (root, the same pgsweep, the programs its roles run at the same paths, the
server user; a server's host the same PostgreSQL version), the run's work area made there,
one TCP port on the addresses those hosts reach this machine by (or, for a server on
another host, on its address as this machine reaches it), and one password made for the
run: the server gets only its SCRAM verifier, each client's host a 0600 passfile."""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import shlex
from dataclasses import dataclass
from pathlib import Path

from ..errors import PgsweepError
from ..host.api import Host, HostLost, scratch_path
from ..host.local import LOCAL
from ..host.proc import RunAs
from ..host.remote import RemoteHost
from ..layers.context import HostSide
from ..layers.workload_tools import PACKAGES as TOOL_PACKAGES
from ..layers.workload_tools import program
from ..postgres.access import passfile_line
from ..spec import Experiment, hosts
from . import plans

SCRAM_ITERATIONS = 4096  # PostgreSQL's default (scram_iterations)
# what each role runs on its host, found at the same path as here
PROGRAMS = {"server": ("initdb", "pg_ctl", "postgres", "pgbench"), "client": ("pgbench",),
            "standby": ("pg_basebackup", "pg_ctl", "postgres")}  # fmt: skip


def open_hosts(exp: Experiment) -> dict[str, RemoteHost]:
    """Every host a role is placed on, reached and checked (PgsweepError, exit 2, naming
    the host and what is wrong); empty when every role runs here. The caller closes them."""
    topo = exp.topology
    names = topo.remote_names()
    if names:
        hosts.check_files(exp.source, topo)
    opened: dict[str, RemoteHost] = {}
    try:
        for name in names:
            opened[name] = RemoteHost(topo.hosts[name]).open()
            check(opened[name], exp, roles_on(exp, name))
        if topo.remote_server:  # its layers' checks (the os layer's devices), through it
            server = opened[topo.server]
            plans.check_server_host(exp, server, Path(server.hello["work_base"]))
        for name in elsewhere(topo):
            if name != hosts.LOCAL:
                reaches(opened[name], opened[topo.server], roles_on(exp, name))
    except BaseException:
        close_all(opened)
        raise
    return opened


def elsewhere(topo: hosts.Topology) -> list[str]:
    """A server on another host: the hosts its other roles run on (local: this machine's
    client), those that reach it over TCP; none when the server is here."""
    if not topo.remote_server:
        return []
    return [n for n in dict.fromkeys([topo.client, *topo.standbys]) if n != topo.server]


def roles_on(exp: Experiment, name: str) -> list[str]:
    topo = exp.topology
    return (["server"] if topo.server == name else []) + (
        ["client"] if topo.client == name else []) + (
        ["standby"] if name in topo.standbys else [])  # fmt: skip


def close_all(opened: dict[str, RemoteHost]) -> None:
    """Each agent puts its host back as it exits."""
    for host in opened.values():
        host.close()


def check(host: RemoteHost, exp: Experiment, roles: list[str]) -> None:
    """Read-only: what the roles placed on it need of a host."""
    where = f"host {host.name} ({host.target.ssh})"
    if host.hello.get("uid") != 0:
        raise PgsweepError(f"{where}: pgsweep's agent runs as uid {host.hello.get('uid')}, "
                           "not root", fix='log in as root, or set pgsweep = "sudo -n '
                           'pgsweep" for a user sudo lets run it without a password')  # fmt: skip
    if len(host.hello.get("ssh_connection", "").split()) != 4:
        raise PgsweepError(f"{where}: the agent cannot tell the addresses of its connection "
                           "(SSH_CONNECTION is empty)", fix="reach it over ssh directly")
    for name, path in programs(exp, roles).items():
        st = host.lstat(path)
        if st is None or not st.is_file:
            raise PgsweepError(f"{where} has no {path}: its {' and '.join(roles)} runs {name} "
                               "at the same path as this machine",
                               fix=f"apt-get install {TOOL_PACKAGES[name]} there"
                               if name in TOOL_PACKAGES else
                               f"install PostgreSQL {exp.binaries.major} there")  # fmt: skip
    try:
        host.ids(exp.user)
    except (RuntimeError, HostLost, OSError) as exc:
        name = exp.user.name if exp.user else "(this user)"
        raise PgsweepError(f"{where}: pgbench runs there as {name}, who does not exist "
                           f"there ({exc})", fix=f"make the user there: useradd --system "
                           f"{name}") from None
    if "server" in roles or "standby" in roles:  # a standby streams from the same major
        same_postgres(host, exp, where)
    if "server" in roles and exp.topology.client == hosts.LOCAL:
        seen_directly(host, where)


def seen_directly(host: RemoteHost, where: str) -> None:
    """The address the server's host sees this machine connect from is this machine's own
    (its server admits that address alone: through a jump host or NAT it would be the
    jump host's or the gateway's, which others share)."""
    controller = host.hello["ssh_connection"].split()[0]
    try:
        LOCAL.free_port([controller])  # binds only to an address this machine has
    except OSError:
        raise PgsweepError(f"{where} sees this machine as {controller}, an address this "
                           "machine does not have (a jump host or NAT between them); its "
                           "server would admit that address", fix="reach the server's "
                           "host directly, or run pgsweep on a machine that does (or on the "
                           "database machine)") from None


def same_postgres(host: Host, exp: Experiment, where: str) -> None:
    """The server's host runs the PostgreSQL version the file's settings were checked
    with here (`postgres --version` there, in a scratch folder removed at once)."""
    scratch = host.private_dir(scratch_path("pgsweep-check-"))
    try:
        res = host.run([exp.binaries.path("postgres"), "--version"], out=scratch / "version",
                       timeout=60)  # fmt: skip
        said = res.stdout.strip()
    finally:
        host.remove_tree(scratch)
    if res.returncode != 0 or exp.binaries.version not in said.split():
        raise PgsweepError(f"{where} runs {said or 'no PostgreSQL'} at "
                           f"{exp.binaries.path('postgres')}; this machine checked the file's "
                           f"settings with PostgreSQL {exp.binaries.version}",
                           fix="install the same PostgreSQL version on both")  # fmt: skip


def programs(exp: Experiment, roles: list[str]) -> dict[str, Path]:
    """What the roles on a host run there, at their paths here: the installed PostgreSQL
    programs, and the client's workload tools other than pgbench (plan has named any
    missing here)."""
    out = {name: exp.binaries.bindir / name for r in roles for name in PROGRAMS[r]}
    if "standby" in roles and any(getattr(c.get("workload"), "standby_script", None)
                                  for c in exp.configurations.values()):  # fmt: skip
        out["pgbench"] = exp.binaries.bindir / "pgbench"  # the read load runs beside it
    if "server" in roles and any(getattr(c.get("replication"), "standbys", 0)
                                 for c in exp.configurations.values()):  # fmt: skip
        out["pg_basebackup"] = exp.binaries.bindir / "pg_basebackup"  # standbys beside it
    if "client" in roles or "server" in roles:  # a tool's load phase runs beside the server
        tools = {getattr(c.get("workload"), "tool", "pgbench")
                 for c in exp.configurations.values()}  # fmt: skip
        found = {t: program(t) for t in sorted(tools - {"pgbench"})}
        out.update({t: p for t, p in found.items() if p is not None})
    return out


def programs_on(exp: Experiment, name: str) -> list[str]:
    """What `plan` says it checked on host `name`."""
    return list(programs(exp, roles_on(exp, name)))


def host_sides(opened: dict[str, RemoteHost], run_name: str, user: RunAs | None
               ) -> dict[str, HostSide]:  # fmt: skip
    """This run's side of each host: its work area, and one port and password for all."""
    if not opened:
        return {}
    password = secrets.token_hex(16)
    port = free_port(LOCAL, [h.hello["ssh_connection"].split()[0] for h in opened.values()])
    return {n: host_side(h, run_name, user, password, port) for n, h in opened.items()}


@dataclass(frozen=True)
class ServerArea:
    """The run's work area on the server's host, as its agent made it."""

    workdir: Path
    private: Path
    socket_root: Path
    run_id: str  # the agent's run: the journals its layers write there are restored by it
    registry: Path


def server_elsewhere(opened: dict[str, RemoteHost], topo: hosts.Topology, run_name: str,
                     user: RunAs | None, here: Path) -> tuple[ServerArea, dict[str, HostSide]]:
    """A server on another host: the run's work area there, and the side of each host its
    other roles run on (`elsewhere`): this machine's, as the client (the passfile in
    `here`, this run's local work area), or another host's (the client, standbys); none
    for roles beside it. The server listens on its own address as this machine reached
    it, on a port free there, and admits each side's address alone, all with one password
    made for the run."""
    server = opened[topo.server]
    controller, _, own, _ = server.hello["ssh_connection"].split()
    area = server.work_area(run_name, user)
    made = ServerArea(Path(area["workdir"]), Path(area["private"]), Path(area["socket_root"]),
                      area["run"], Path(area["registry"]))  # fmt: skip
    names = elsewhere(topo)
    if not names:  # no TCP: neither a port nor a password
        return made, {}
    password = secrets.token_hex(16)
    port = free_port(server, [own])
    sides = {n: host_side(opened[n], run_name, user, password, port, address=own)
             for n in names if n != hosts.LOCAL}  # fmt: skip
    if hosts.LOCAL in names:
        LOCAL.private_dir(here / "trials", 0o711)
        passfile = here / "passfile"
        LOCAL.write_file(passfile, passfile_line(own, port, password), 0o600, LOCAL.ids(user))
        sides[hosts.LOCAL] = HostSide(LOCAL, here, own, controller, port, passfile,
                                      scram_verifier(password), password)  # fmt: skip
    return made, sides


def reached(exp: Experiment, opened: dict[str, RemoteHost]) -> dict[str, str]:
    """Each host's SSH_CONNECTION as `plan` shows a run's addresses from it (dryrun): for a
    host reaching the server over TCP, its own address there is the one it sends from to
    reach the server's listening address (host_side's)."""
    out = {n: str(h.hello.get("ssh_connection", "")) for n, h in opened.items()}
    server = exp.topology.server
    for name, host in opened.items():
        fields = out[name].split()
        if name == server or len(fields) != 4:
            continue
        listens = out[server].split()[2] if server in opened else fields[0]
        out[name] = " ".join([*fields[:2], host.source_address(listens), fields[3]])
    return out


def reaches(other: RemoteHost, server: RemoteHost, roles: list[str]) -> None:
    """Read-only, at `plan`: another role's host reaches the server's at the address this
    machine reached it by (a TCP connection to its sshd there: the server will listen on
    that address)."""
    own, port = server.hello["ssh_connection"].split()[2:]
    try:
        other.tcp_rtt(own, int(port), probes=1)
    except (OSError, RuntimeError) as exc:
        what = " and ".join(roles)
        raise PgsweepError(f"host {other.name} ({what}) cannot reach host {server.name} at "
                           f"{own}, the address the server will listen on ({exc})",
                           fix=f"place the {what} on a host on the server's network, or "
                           f"beside the server (roles names {server.name})") from None


def host_side(host: RemoteHost, run_name: str, user: RunAs | None, password: str, port: int,
              epoch: int = 0, address: str | None = None) -> HostSide:  # fmt: skip
    """This run's side of one host: its work area (trials/ for pgbench, standbys/ for the
    standbys' data), and the passfile its roles reach the server with: at `address` (a
    server on another host), else at this machine's address as that host reaches it. The
    server admits the address that host sends from to reach it (its route's source: with
    several interfaces, not always the one this machine reached it at)."""
    controller = address or host.hello["ssh_connection"].split()[0]
    own = host.source_address(controller)
    area = host.work_area(run_name, user)
    workdir = Path(area["workdir"])
    host.private_dir(workdir / "trials", 0o711)
    host.private_dir(workdir / "standbys", 0o711)
    passfile = workdir / "passfile"  # the server user's, 0600, in a folder only root changes
    # any role: pgbench's and sysbench's is pgsweep, a replay's sessions' their log's own
    # (the server's hba admits each by name, from this host's address alone)
    host.write_file(passfile, passfile_line(controller, port, password), 0o600,
                    host.ids(user))  # fmt: skip
    return HostSide(host, workdir, controller, own, port, passfile, scram_verifier(password),
                    password, Path(area["socket_root"]), epoch)


def keep(side: HostSide, exp: Experiment, run_name: str) -> None:
    """Between trials: a host whose connection broke (the trial under way failed, naming
    it) is reached again, with a new agent and work area and the run's password (`epoch`
    counts it: standbys made there before are gone); HostLost when it cannot be, and the
    run stops there (resumable)."""
    old = side.host
    assert isinstance(old, RemoteHost)
    if old.alive():
        return
    old.close()
    try:
        host = RemoteHost(old.target).open()
        check(host, exp, roles_on(exp, old.name))
    except (PgsweepError, HostLost) as exc:
        raise HostLost(f"host {old.name} could not be reached again: "
                       f"{exc.what if isinstance(exc, PgsweepError) else exc}") from None
    fresh = host_side(host, run_name, exp.user, side.password, side.port, side.epoch + 1,
                      side.address)  # where the server listens, as before
    side.host, side.workdir, side.passfile = fresh.host, fresh.workdir, fresh.passfile
    side.socket_root, side.epoch = fresh.socket_root, fresh.epoch


def free_port(host: Host, addresses: list[str]) -> int:
    """A TCP port free on each of `addresses` (the server's host's, as the others reach
    it)."""
    try:
        return host.free_port(addresses)
    except OSError as exc:
        raise PgsweepError(
            f"the server cannot listen on {', '.join(addresses)}, the address another host "
            f"reaches {'this machine' if host is LOCAL else host.name} by "
            f"({exc.strerror or exc})",
            fix="reach the hosts without NAT, or run pgsweep on the database machine "
            "with an address they can reach",
        ) from None  # fmt: skip


def scram_verifier(password: str, salt: bytes | None = None) -> str:
    """What PostgreSQL stores for a SCRAM-SHA-256 password (RFC 5802/7677): ALTER ROLE given
    this, never the password, so no server log can hold it."""
    salt = salt if salt is not None else secrets.token_bytes(16)
    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, SCRAM_ITERATIONS)
    client_key = hmac.new(salted, b"Client Key", "sha256").digest()
    stored = hashlib.sha256(client_key).digest()
    server = hmac.new(salted, b"Server Key", "sha256").digest()

    def b64(b: bytes) -> str:
        return base64.b64encode(b).decode()

    return f"SCRAM-SHA-256${SCRAM_ITERATIONS}:{b64(salt)}${b64(stored)}:{b64(server)}"


def doctor_on(exp: Experiment, name: str) -> str:
    """`pgsweep doctor` run on the host [hosts.NAME] names, through its agent."""
    target = exp.topology.hosts.get(name)
    if target is None:
        raise PgsweepError(f"{exp.source.path} has no [hosts.{name}]",
                           expected=", ".join(exp.topology.hosts) or "(no hosts)")  # fmt: skip
    hosts.check_files(exp.source, exp.topology)
    host = RemoteHost(target).open()
    try:
        area = Path(host.work_area("doctor", None)["workdir"])
        res = host.run([*shlex.split(target.pgsweep), "doctor"], out=area / "doctor.out",
                       timeout=120, env={"COLUMNS": "120", "NO_COLOR": "1"})  # fmt: skip
        return f"host {name} ({host.hello.get('hostname')}, {target.ssh}):\n{res.stdout}"
    finally:
        host.close()
