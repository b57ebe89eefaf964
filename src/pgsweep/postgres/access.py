"""Who a server admits over TCP besides its private socket: a role on another host
(`ClientAccess`: the client, a standby's host, with the run's password) or one peer on a
private link (`Listen`: replication.network); and the names pg_hba.conf can hold."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

ROLE = "pgsweep"  # the superuser role initdb creates


class ServerError(Exception):
    """The server would not start, stop or answer; the message carries its log tail."""


@dataclass(frozen=True)
class ClientAccess:
    """TCP for a role on another host (the client, a standby): the server listens on
    `address` (this host's, as that host reaches it) and its hba admits `peer` alone, to
    `database` ("all", or "replication" for a standby), as the role pgsweep (and `roles`, a
    replay's sessions' own) with scram-sha-256 (a password made for the run; never trust
    over TCP)."""

    address: str
    peer: str
    database: str = "all"
    roles: tuple[str, ...] = ()

    def hba_line(self) -> str:
        """Each role quoted: a name of the log's is taken literally ("all", "+group" and
        "@file" lose their meaning); a name with a quote or control character cannot be
        written and is refused (workload_tools.check_remote_client refuses it first)."""
        for role in self.roles:
            if not hba_name_ok(role):
                raise ServerError(f"the role name {role!r} cannot be written in pg_hba.conf")
        users = ",".join([ROLE, *(f'"{r}"' for r in self.roles)])
        return f"host {self.database} {users} {one_address(self.peer)} scram-sha-256\n"


def one_address(address: str) -> str:
    """An address as pg_hba.conf admits it alone: /32 for IPv4, /128 for IPv6 (ValueError
    for anything that is not one address)."""
    ip = ipaddress.ip_address(address)
    return f"{ip}/{ip.max_prefixlen}"


def passfile_line(address: str, port: int, password: str) -> str:
    """A libpq password file line for `address`:`port`, any database and user: a colon or
    backslash in a field is escaped (an IPv6 address holds colons)."""
    def esc(field: str) -> str:
        return field.replace("\\", "\\\\").replace(":", "\\:")

    return f"{esc(address)}:{port}:*:*:{esc(password)}\n"


def hba_name_ok(name: str) -> bool:
    """A name pg_hba.conf can hold quoted: no double quote, no control character."""
    return bool(name) and '"' not in name and all(ch.isprintable() for ch in name)


@dataclass(frozen=True)
class Listen:
    """TCP for one peer (replication.network): the server listens on `address` inside the
    network namespace `netns`, and its hba trusts `peer`'s address alone."""

    address: str
    peer: str
    netns: str
