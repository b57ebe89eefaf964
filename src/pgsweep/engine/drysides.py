"""The other hosts' part of a dry run (`plan --commands`): each host [roles] names (the
client, a standby's) as `run` would reach it, from the addresses `plan` found on its
connection. A standby host is a `DryHost` of its own, walked with the trials: its base
backup, settings and server are printed under it, and the primary's pretend
pg_stat_replication shows them streaming. The client's side is described (its tool's
commands are in each trial's window), not walked."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from ..host import workarea
from ..host.local import LOCAL
from ..host.recording import Effect
from ..layers.context import HostSide, RunContext
from ..spec import Experiment
from .clients import elsewhere, free_port, scram_verifier
from .dryhost import DRY, DryHost


def sides(exp: Experiment, results: Path, client: str | None, reached: Mapping[str, str],
          here: DryHost) -> dict[str, HostSide]:  # fmt: skip
    """Each other host the roles name (`client`: the client's, None for this machine),
    that `plan` reached: its side as `run` would make it (the server listens on this
    machine's address as that host reaches it, and admits that host's alone; one port and
    password for all)."""
    names = [n for n in (client or "local", *exp.topology.standbys) if n != "local"]
    found = {n: reached.get(n, "").split() for n in dict.fromkeys(names)}
    found = {n: f for n, f in found.items() if len(f) == 4}
    port = free_port(LOCAL, [f[0] for f in found.values()]) if found else 0
    # the agent's own base there: /var/tmp unless that host's PGSWEEP_WORK_BASE says else
    workdir = Path("/var/tmp") / f"pgsweep-work-{results.resolve().name}-{DRY}"
    sockets = Path(f"/tmp/pgsweep-{workarea.run_tag(results)}-{DRY}")
    return {name: HostSide(DryHost(here.users, here.canonical, name, here.streaming),
                           workdir, controller, own, port, workdir / "passfile",
                           scram_verifier(DRY), DRY, sockets)
            for name, (controller, _, own, _) in found.items()}  # fmt: skip


def server_elsewhere(exp: Experiment, results: Path, reached: Mapping[str, str],
                     here: DryHost) -> tuple[Path, Path, dict[str, HostSide]]:  # fmt: skip
    """A server on another host as `run` places it: the work area and socket folder its
    agent makes there, and the side of each host its other roles run on (this machine as
    its client, the client's host, standbys' hosts: over TCP to the server's address as
    this machine reached it, each admitted from its own address alone; none for a role
    beside the server)."""
    topo = exp.topology
    own = reached[topo.server].split()[2]
    name = results.resolve().name
    there = Path("/var/tmp") / f"pgsweep-work-{name}-{DRY}"  # an agent's, as on any host
    sockets = Path(f"/tmp/pgsweep-{name}-{DRY}")
    out: dict[str, HostSide] = {}
    for other in elsewhere(topo):
        if other != "local":
            found = reached.get(other, "").split()
            if len(found) != 4:  # not reached: named in "not shown"
                continue
            peer = found[2]
            out[other] = HostSide(DryHost(here.users, here.canonical, other, here.streaming),
                                  there, own, peer, SERVER_PORT, there / "passfile",
                                  scram_verifier(DRY), DRY, sockets)  # fmt: skip
            continue
        base = workarea.work_base(results, exp.user)
        prefix = (".pgsweep-work-" if base == results
                  else f"pgsweep-work-{results.name}-{workarea.run_tag(results)}-")  # fmt: skip
        mine = base.resolve() / f"{prefix}{DRY}"  # this run's own work area, here
        controller = reached[topo.server].split()[0]
        out[other] = HostSide(DryHost(here.users, here.canonical, "local (this machine)"),
                              mine, own, controller, SERVER_PORT, mine / "passfile",
                              scram_verifier(DRY), DRY)  # fmt: skip
    return there, sockets, out


SERVER_PORT = 5432  # shown for the port a run finds free on the server's host


def server_lines(exp: Experiment, run: RunContext) -> list[str]:
    """A server on another host: this machine's part as its client (another host's is in
    `lines`)."""
    side, server = run.client_side, exp.topology.server
    if side is None or side.host.on:
        return []
    return ["", f"this machine (the client): the tool over TCP to {side.address}:{side.port} "
            f"(a port free on {server} when the run starts), as the server admits from "
            f"{side.peer} alone, with scram-sha-256 and a password made for the run:",
            f"  before the first trial: make {side.workdir}/trials (root, 0711); write "
            f"{side.passfile} (0600, the server user's): {side.address}:{side.port}:*:*:(the "
            "run's password)",
            "  each trial: make trials/TRIAL there, run the tool (below), read its output "
            "and transaction log, remove the folder"]  # fmt: skip


def walked(run: RunContext) -> list[DryHost]:
    """The standbys' hosts, walked with the trials (once each)."""
    out: list[DryHost] = []
    for side in run.standby_sides:
        if side is not None and isinstance(side.host, DryHost) and side.host not in out:
            out.append(side.host)
    return out


def marks(run: RunContext) -> dict[str, int]:
    return {h.name: len(h.effects) for h in walked(run)}


def since(run: RunContext, mark: Mapping[str, int]) -> list[tuple[str, list[Effect]]]:
    """Each standby host's effects after `mark`, where it has any."""
    out = [(h.name, h.effects[mark.get(h.name, 0):]) for h in walked(run)]
    return [(name, effects) for name, effects in out if effects]


def lines(exp: Experiment, run: RunContext) -> list[str]:
    """What each other host holds, and what is made there before the first trial."""
    out: list[str] = []
    seen: list[HostSide] = []
    for side in (run.client_side, *run.standby_sides):
        if side is None or side in seen or not side.host.on:
            continue
        seen.append(side)
        roles = ["the client"] if side is run.client_side else []
        roles += [f"standby s{i}" for i, s in enumerate(run.standby_sides, 1) if s is side]
        work = side.workdir
        port = (f"a port free on {exp.topology.server} when the run starts"
                if exp.topology.remote_server else
                f"a port free when the run starts; {side.port} now")  # fmt: skip
        out += ["", f"host {side.host.name} ({', '.join(roles)}, through `pgsweep agent` over "
                f"ssh): over TCP to {side.address}:{side.port} ({port}), as the server "
                f"admits from {side.peer} alone, "
                "with scram-sha-256 and a password made for the run:",
                f"  before the first trial: make {work} (root, 0711; in that host's "
                "PGSWEEP_WORK_BASE if it sets one) with trials/ and standbys/; "
                f"write {side.passfile} (0600, the server user's): "
                f"{side.address}:{side.port}:*:*:(the run's password)"]  # fmt: skip
        if side is run.client_side:
            out.append(f"  each trial: make {work}/trials/TRIAL (root, 0711), copy a custom "
                       "script into it (0400, the server user's), run the tool (below), read "
                       "its output and transaction log back, remove the folder")  # fmt: skip
        if roles != ["the client"]:
            out.append("  its standbys: made, started and taken down with the trials below "
                       f"(under \"on host {side.host.name}\")")  # fmt: skip
        out.append(f"  at the end (or when the connection ends): stop what runs there, "
                   f"remove {work}")
    return out
