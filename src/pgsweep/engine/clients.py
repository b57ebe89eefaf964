"""The client role on another host: its agent opened and checked (root, the same pgsweep,
the installed pgbench at the same path, the server user), the run's work area made there,
a TCP port on the address the client reaches this machine by, and a password made for the
run: the server gets only its SCRAM verifier, the client a 0600 passfile."""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import shlex
import socket
from pathlib import Path

from ..errors import PgsweepError
from ..host.api import HostLost
from ..host.proc import RunAs
from ..host.remote import RemoteHost
from ..layers.context import ClientSide
from ..postgres.cluster import ROLE
from ..spec import Experiment, hosts

SCRAM_ITERATIONS = 4096  # PostgreSQL's default (scram_iterations)


def open_client(exp: Experiment) -> RemoteHost | None:
    """The client's host, reached and checked (PgsweepError, exit 2, naming the host and
    what is wrong), or None when pgbench runs here. The caller closes it."""
    topo = exp.topology
    if not topo.remote:
        return None
    hosts.check_files(exp.source, topo)
    host = RemoteHost(topo.hosts[topo.client]).open()
    try:
        check(host, exp)
    except BaseException:
        host.close()
        raise
    return host


def check(host: RemoteHost, exp: Experiment) -> None:
    """Read-only: what the client role needs of its host."""
    where = f"host {host.name} ({host.target.ssh})"
    if host.hello.get("uid") != 0:
        raise PgsweepError(f"{where}: pgsweep's agent runs as uid {host.hello.get('uid')}, "
                           "not root", fix='log in as root, or set pgsweep = "sudo -n '
                           'pgsweep" for a user sudo lets run it without a password')  # fmt: skip
    if len(host.hello.get("ssh_connection", "").split()) != 4:
        raise PgsweepError(f"{where}: the agent cannot tell the addresses of its connection "
                           "(SSH_CONNECTION is empty)", fix="reach it over ssh directly")
    pgbench = exp.binaries.bindir / "pgbench"
    st = host.lstat(pgbench)
    if st is None or not st.is_file:
        raise PgsweepError(f"{where} has no {pgbench}: the client runs the installed pgbench "
                           "at the same path as this machine", fix="install the same "
                           f"PostgreSQL {exp.binaries.major} packages there")  # fmt: skip
    try:
        host.ids(exp.user)
    except (RuntimeError, HostLost, OSError) as exc:
        name = exp.user.name if exp.user else "(this user)"
        raise PgsweepError(f"{where}: pgbench runs there as {name}, who does not exist "
                           f"there ({exc})", fix=f"make the user there: useradd --system "
                           f"{name}") from None


def client_side(host: RemoteHost, run_name: str, user: RunAs | None,
                password: str | None = None, port: int | None = None) -> ClientSide:  # fmt: skip
    """This run's side of the client host: work area, port, password (new ones, or the
    run's own when the host is reached again)."""
    controller, _, own, _ = host.hello["ssh_connection"].split()
    area = host.work_area(run_name, user)
    workdir = Path(area["workdir"])
    host.private_dir(workdir / "trials", 0o711)
    port = port or free_port(controller)
    password = password or secrets.token_hex(16)
    passfile = workdir / "passfile"  # the server user's, 0600, in a folder only root changes
    host.write_file(passfile, f"{controller}:{port}:*:{ROLE}:{password}\n", 0o600,
                    host.ids(user))  # fmt: skip
    return ClientSide(host, workdir, controller, own, port, passfile, scram_verifier(password),
                      password)


def keep(cs: ClientSide, exp: Experiment, run_name: str) -> None:
    """Between trials: a client host whose connection broke (the trial under way failed,
    naming it) is reached again, with a new agent and work area and the run's password;
    HostLost when it cannot be, and the run stops there (resumable)."""
    old = cs.host
    assert isinstance(old, RemoteHost)
    if old.alive():
        return
    old.close()
    try:
        host = RemoteHost(old.target).open()
        check(host, exp)
    except (PgsweepError, HostLost) as exc:
        raise HostLost(f"host {old.name} could not be reached again: "
                       f"{exc.what if isinstance(exc, PgsweepError) else exc}") from None
    fresh = client_side(host, run_name, exp.user, cs.password, cs.port)
    cs.host, cs.workdir, cs.passfile = fresh.host, fresh.workdir, fresh.passfile


def free_port(address: str) -> int:
    """A TCP port free on `address` (this machine's, as the client reaches it)."""
    try:
        with socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET) as s:
            s.bind((address, 0))
            return int(s.getsockname()[1])
    except OSError as exc:
        raise PgsweepError(
            f"the server cannot listen on {address}, the address the client host reaches "
            f"this machine by ({exc.strerror})",
            fix="reach the client host without NAT, or run pgsweep on the database machine "
            "with an address the client can reach",
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
