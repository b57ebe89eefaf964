"""A fleet group as a copy of the experiment's topology (issue 28): the group's server host
runs the shard, and each other host the file's [roles] place a role on ([hosts.NAME]) has
its copy in every group, an inventory host with the variable `pgsweep_host = "NAME"`:

    [alpha]
    db1 ansible_host=10.0.0.1
    lg1 ansible_host=10.0.0.11 pgsweep_host=loadgen

The shard reaches that copy over SSH from the group's server host (`run --host
NAME=DEST`), at `pgsweep_ssh` when the host sets it, else at ansible_user@ansible_host
(ssh://...:PORT with an ansible_port other than 22), with the identity and known_hosts
files [hosts.NAME] names (paths on the server host). Host facts are compared between the
groups' server hosts, and between their copies of each other host (`NAME:FACT`): Ansible
reaches every member of a group for its facts."""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import PgsweepError
from ..spec.hosts import LOCAL, Topology, destination_ok

ROLE_VAR = "pgsweep_host"
SSH_VAR = "pgsweep_ssh"
# an inventory host a play names: no pattern characters Ansible would expand (*, ?, [, :, !, &)
HOST_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,252}")


@dataclass(frozen=True)
class GroupHosts:
    """One group's copy of the topology: its server's inventory host, and each [hosts.NAME]
    a role is placed on -> (its copy's inventory host, how the server host reaches it)."""

    server: str
    copies: dict[str, tuple[str, str]]

    def host_options(self) -> list[str]:
        """The shard's `--host NAME=DEST` options."""
        return [w for n, (_, dest) in self.copies.items() for w in ("--host", f"{n}={dest}")]

    def members(self) -> dict[str, str]:
        """Inventory host -> the role it plays in the group ("" for the server's)."""
        return {self.server: ""} | {h: n for n, (h, _) in self.copies.items()}


def copy_of(topo: Topology, group: str, members: list[str], hostvars: dict[str, dict[str, Any]],
            inventory: Path, groups: Collection[str] = ()) -> GroupHosts:  # fmt: skip
    """The group's server host, and its copy of each other role's host. `groups`: every
    group the inventory has (a host named like one would stand for all its hosts in a
    play)."""
    where = str(inventory)
    placed = topo.remote_names()
    by_role: dict[str, list[str]] = {}
    for h in members:
        role = hostvars.get(h, {}).get(ROLE_VAR, LOCAL)
        by_role.setdefault(str(role), []).append(h)
    servers = by_role.pop(LOCAL, [])
    if len(servers) != 1:
        raise PgsweepError(f"group {group!r} has {len(servers)} hosts without {ROLE_VAR}: one "
                           "of them runs the server (and the shard)", where=where,
                           fix=f"give the group one host without {ROLE_VAR}, and set "
                           f"{ROLE_VAR} = NAME on each of its copies of [hosts.NAME]")  # fmt: skip
    for role, hosts in by_role.items():
        if role not in placed:
            raise PgsweepError(f"{hosts[0]} in group {group!r}: {ROLE_VAR} = {role!r} names no "
                               "host the file places a role on", where=where,
                               expected=", ".join(placed) or "none: the file places every "
                               "role on the server's host", fix=f"remove {ROLE_VAR} from it, "
                               "or the host from the group")  # fmt: skip
        if len(hosts) > 1:
            raise PgsweepError(f"group {group!r} has {len(hosts)} hosts for {role!r}: "
                               f"{', '.join(hosts)}", where=where, fix="one each")  # fmt: skip
    missing = [n for n in placed if n not in by_role]
    if missing:
        raise PgsweepError(f"group {group!r} has no copy of host {missing[0]!r}, on which the "
                           "file places a role: each group is a copy of the topology",
                           where=where, fix=f"add a host with {ROLE_VAR}={missing[0]} to "
                           "the group")  # fmt: skip
    for h in (servers[0], *(hosts[0] for hosts in by_role.values())):
        _check_name(h, where, groups)
    return GroupHosts(servers[0], {n: (by_role[n][0], _destination(
        by_role[n][0], hostvars.get(by_role[n][0], {}), where)) for n in placed})


def _destination(host: str, hv: dict[str, Any], where: str) -> str:
    """How the group's server host reaches `host`: pgsweep_ssh, else from Ansible's own
    connection variables."""
    if SSH_VAR in hv:
        dest = str(hv[SSH_VAR])
    else:
        user = str(hv.get("ansible_user", "root"))
        address = str(hv.get("ansible_host", host))
        port = hv.get("ansible_port")
        dest = (f"ssh://{user}@{address}:{port}" if port not in (None, 22, "22")
                else f"{user}@{address}")  # fmt: skip
    if not destination_ok(dest):
        raise PgsweepError(f"{host}: {dest!r} is not a destination ssh takes", where=where,
                           expected="[user@]host or ssh://user@host:port",
                           fix=f"set {SSH_VAR} on it")  # fmt: skip
    return dest


def _check_name(host: str, where: str, groups: Collection[str]) -> None:
    """A name a play's host list takes as this one host: no pattern characters, and not
    the name of a group (Ansible reads a group's name first: the play would reach all of
    its hosts)."""
    if not HOST_NAME.fullmatch(host) or host in {*groups, "all", "ungrouped"}:
        raise PgsweepError(f"the inventory host {host!r} cannot be named in a play",
                           where=where, expected="letters, digits, . _ - (no pattern "
                           "characters), and not a group's name", fix="give it an alias "
                           "such as db1 and set ansible_host")  # fmt: skip
