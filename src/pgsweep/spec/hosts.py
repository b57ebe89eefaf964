"""[hosts] and [roles]: where a trial's roles run. Every role is on `local` (the machine
pgsweep runs on) unless [roles] places it on a host [hosts] names:

    [hosts.loadgen]
    ssh = "root@10.0.0.2"              # the destination as ssh takes it
    identity_file = "/root/.ssh/id"    # optional; absolute
    known_hosts = "/root/.ssh/known"   # optional; absolute; checked strictly
    pgsweep = "/opt/pgsweep/bin/pgsweep"  # optional: pgsweep on that host (default: PATH)

    [roles]
    client = "loadgen"                 # where pgbench runs
    standbys = ["replica1"]            # where standby s1 runs (s2, ...: beside the server)

or the server on another host (`server = "db1"`: the client here, on its host, or on a
third; each standby beside it (`standbys` naming db1, and those beyond the list) or on a
host of its own; every layer acts through the server's host, a build compiled here and
copied there; `check_remote_server` names what it cannot run).

Nothing here can make ssh run something else: the destination may not start with "-" or
hold a space, and the files are absolute paths checked before use (`check_files`)."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..errors import PgsweepError
from ..host import safefs
from ..host.api import Host
from ..host.local import LOCAL as LOCAL_HOST
from ..host.remote import RemoteHost, Target
from ..layers.base import Source
from .tables import validated

LOCAL = "local"
NAME = re.compile(r"[a-z][a-z0-9_-]{0,31}")
DESTINATION = re.compile(r"[A-Za-z0-9_.@:/\[\]%-]{1,255}")
DESTINATION_WORDS = ("ssh://user@db1:2222 (letters, digits and . _ @ : / [ ] % -; not "
                     "starting with -)")


def destination_ok(dest: str) -> bool:
    """A destination ssh takes as one, never as an option: the file's `ssh`, `run --host`,
    a fleet copy's address."""
    return bool(DESTINATION.fullmatch(dest)) and not dest.startswith("-")


class HostTable(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    ssh: str = Field(description="the destination as ssh takes it: [user@]host or ssh://...")
    identity_file: str | None = Field(None, description="a private key file (absolute path)")
    known_hosts: str | None = Field(None, description="a known_hosts file (absolute path)")
    pgsweep: str = Field("pgsweep", description="the command that runs pgsweep there")

    @field_validator("ssh")
    @classmethod
    def _ssh(cls, v: str) -> str:
        if not destination_ok(v):
            raise ValueError(f"a destination such as root@10.0.0.2 or {DESTINATION_WORDS}")
        return v

    @field_validator("identity_file", "known_hosts")
    @classmethod
    def _absolute(cls, v: str | None) -> str | None:
        if v is not None and (not v.startswith("/") or any(not c.isprintable() for c in v)):
            raise ValueError("an absolute path")
        return v

    @field_validator("pgsweep")
    @classmethod
    def _command(cls, v: str) -> str:
        words = shlex.split(v) if v.strip() else []
        if not words or any(w.startswith("-") for w in words[:1]):
            raise ValueError('a command, e.g. "/opt/pgsweep/bin/pgsweep" or '
                             '"sudo -n /opt/pgsweep/bin/pgsweep"')  # fmt: skip
        return v


class RolesTable(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    server: str = Field(LOCAL, description="where the server runs: local (pgsweep's machine) "
                        "or a [hosts] name")
    client: str = Field(LOCAL, description="where the workload tool (pgbench, sysbench, "
                        "pgreplay) runs: local or a [hosts] name")
    standbys: list[str] = Field(default_factory=list, max_length=8,
                                description="where standby s1, s2, ... runs: local or a "
                                "[hosts] name; the server's own host (and beyond the list): "
                                "beside the server")  # fmt: skip


@dataclass(frozen=True)
class Topology:
    hosts: dict[str, Target] = field(default_factory=dict)
    client: str = LOCAL
    notes: tuple[str, ...] = ()
    # standby s1's host, s2's, ...; beyond the list: the server's (beside it)
    standbys: tuple[str, ...] = ()
    server: str = LOCAL  # the server's host

    @property
    def remote(self) -> bool:
        """The workload tool runs on another host."""
        return self.client != LOCAL

    def standby_host(self, number: int) -> str:
        """Where standby s`number` (1, 2, ...) runs."""
        return self.standbys[number - 1] if number <= len(self.standbys) else self.server

    def standby_elsewhere(self, number: int) -> bool:
        """Standby s`number` runs on a host of its own, not beside the server."""
        return self.standby_host(number) != self.server

    @property
    def remote_server(self) -> bool:
        """The server runs on another host, measured from here."""
        return self.server != LOCAL

    def remote_names(self) -> list[str]:
        """Every host a role is placed on, in the order [roles] names them, once each."""
        names = [self.server, self.client, *self.standbys]
        return [n for i, n in enumerate(names) if n != LOCAL and n not in names[:i]]


def topology(source: Source, doc: dict[str, Any]) -> Topology:
    hosts = doc.get("hosts", {})
    if not isinstance(hosts, dict):
        raise source.error(("hosts",), "[hosts] must hold tables: [hosts.NAME]")
    targets: dict[str, Target] = {}
    for name, table in hosts.items():
        if not NAME.fullmatch(name) or name == LOCAL:
            raise source.error(("hosts", name), f"{name!r} cannot name a host",
                               expected='lower-case letters, digits, - and _ (not "local")')
        if not isinstance(table, dict):
            raise source.error(("hosts", name), f"[hosts.{name}] must be a table with ssh = ...")
        t = validated(source, HostTable, table, ("hosts", name))
        ident = Path(t.identity_file) if t.identity_file else None
        known = Path(t.known_hosts) if t.known_hosts else None
        targets[name] = Target(name, t.ssh, ident, known, t.pgsweep)
    roles = doc.get("roles", {})
    if not isinstance(roles, dict):
        raise source.error(("roles",), "[roles] must be a table")
    r = validated(source, RolesTable, roles, ("roles",))
    for key, names in (("server", [r.server]), ("client", [r.client]),
                       ("standbys", r.standbys)):  # fmt: skip
        for n in names:
            if n != LOCAL and n not in targets:
                raise source.error(("roles", key), f"roles.{key} names {n!r}, which [hosts] "
                                   "does not define", expected=f"local or one of "
                                   f"{', '.join(targets) or '(no hosts)'}")  # fmt: skip
    if r.server != LOCAL:
        _server_elsewhere(source, r)
    used = {r.server, r.client, *r.standbys}
    notes = tuple(f"{source.where('hosts', n)}: host {n} has no role; it is not contacted"
                  for n in targets if n not in used)  # fmt: skip
    return Topology(targets, r.client, notes, tuple(r.standbys), r.server)


# the layers whose checks read the server's host (kernel menus, pools, sysctl ranges, the
# filesystems' tools): for a server on another host, `asked` reaches it while the file is
# checked
READS_HOST = ("os", "storage")


def _server_elsewhere(source: Source, r: RolesTable) -> None:
    """A server on another host: the client runs here (the default), beside it (its own
    host) or on a third host, reaching it over TCP; each standby beside it (named by its
    host) or on another host, streaming over the real network, but not on this machine."""
    if LOCAL in r.standbys:
        n = r.standbys.index(LOCAL) + 1
        raise source.error(("roles", "standbys"), f"standby s{n} is placed on local (this "
                           f"machine), and the server on host {r.server}: a standby here of a "
                           "server elsewhere is not run in this version",
                           expected=f'"{r.server}" (beside the server) or another [hosts] name',
                           fix=f'write "{r.server}" to run s{n} beside the server, or a host '
                           "of its own")  # fmt: skip


def check_remote_server(source: Source, doc: dict[str, Any], topo: Topology) -> None:
    """Exit 2 for what a server on another host cannot run in this version: a real device
    or zfs-fuse under it, a build's own pgbench on a client elsewhere, a key read or
    measured on this machine (`HERE_ONLY`). Every layer acts through the server's host
    (a build is compiled here, then copied there)."""
    if not topo.remote_server:
        return
    factors: dict[str, Any] = doc["factors"] if isinstance(doc.get("factors"), dict) else {}
    _loop_storage_only(source, doc, factors, topo.server)
    if _given(doc.get("build"), "pgbench") == "own" and topo.client != topo.server:
        raise source.error(("build", "pgbench"), "build.pgbench = \"own\" runs each build's "
                           f"pgbench, which is copied to host {topo.server} with its server "
                           f"only, and the client runs on {topo.client}",
                           fix=f'set roles.client = "{topo.server}" (pgbench beside the '
                           'server), or build.pgbench = "shared"')  # fmt: skip
    for (table, key), why in HERE_ONLY.items():
        given = _given(doc.get(table), key) or _given(factors.get(table), key)
        if given is None or (key == "size" and "%" not in str(given)):
            continue
        where = (table, key) if _given(doc.get(table), key) is not None else (
            "factors", table, key)  # fmt: skip
        raise source.error(where, f"{table}.{key} {why}, and the server runs on host "
                           f"{topo.server}", fix=f"remove {table}.{key}, or run pgsweep on "
                           'the database machine (roles.server = "local")')  # fmt: skip


@contextmanager
def asked(source: Source, doc: dict[str, Any], topo: Topology) -> Iterator[Host]:
    """The host a file's layer checks read: this machine, or for a server on another host
    whose file has a layer that reads it (`READS_HOST`), that host through its agent (its
    key files checked first), closed after the checks (RemoteHost.open: exit 2 naming the
    host when it cannot be reached)."""
    factors: dict[str, Any] = doc["factors"] if isinstance(doc.get("factors"), dict) else {}
    if not topo.remote_server or not any(doc.get(n) or n in factors for n in READS_HOST):
        yield LOCAL_HOST
        return
    check_files(source, topo)
    host = RemoteHost(topo.hosts[topo.server]).open()
    try:
        yield host
    finally:
        host.close()


def _loop_storage_only(source: Source, doc: dict[str, Any], factors: dict[str, Any],
                       server: str) -> None:  # fmt: skip
    """[storage] beside a server on another host: filesystems on loop devices its agent
    makes in its work area; a real device there (named and allowed on this machine's
    command line) and zfs-fuse are not run there in this version ([storage.wal] is never
    zfs: the storage layer refuses it)."""
    for key, why in (("device", "a real device"), ("wal_device", "a real device"),
                     ("filesystem", "zfs (zfs-fuse)")):  # fmt: skip
        for where, given in ((("storage", key), _given(doc.get("storage"), key)),
                             (("factors", "storage", key), _given(factors.get("storage"), key))):
            levels = given if isinstance(given, list) else [given]
            if given is not None and any(_not_loop(key, v) for v in levels):
                raise source.error(where, f"{'.'.join(where)} puts {why} under the server "
                                   f"on host {server}, which is not run there in this "
                                   "version", expected='a loop device ("loop:8GiB") and ext4, '
                                   'xfs or btrfs', fix='use device = "loop:SIZE", or run '
                                   'pgsweep on the database machine (roles.server = "local")')


def _not_loop(key: str, level: Any) -> bool:
    return level == "zfs" if key == "filesystem" else not str(level).startswith("loop:")


def _given(table: Any, key: str) -> Any:
    return table.get(key) if isinstance(table, dict) and table.get(key) not in (None, False) \
        else None


# keys whose value is read or measured on this machine (a server on another host would
# get this machine's file, RAM or tools), or that put the server where a client on
# another host cannot reach it
HERE_ONLY = {
    ("cluster", "from"): "names a dump pgsweep reads here",
    ("cluster", "size"): "as a share of RAM is of this machine's",
    ("experiment", "cpu_profile"): "profiles with this machine's perf",
    ("experiment", "io_latency"): "times this machine's block requests",
    ("replication", "network"): "puts the primary in a network namespace, where its client "
                                "over TCP cannot reach it",
}


def check_host_options(pairs: list[str], fleet: bool) -> None:
    """`run --host NAME=DEST` before anything is read: each a destination ssh takes, each
    NAME once, and not with --inventory (a fleet tells each shard its own)."""
    if pairs and fleet:
        raise PgsweepError("--host goes to one run or shard; --inventory gives each group's "
                           "shard its own copies of the hosts", where="--host",
                           fix="name the copies in the inventory (pgsweep_host = NAME)")
    names = [p.partition("=")[0] for p in pairs]
    for pair in pairs:
        name, sep, dest = pair.partition("=")
        if not sep or not NAME.fullmatch(name):
            raise PgsweepError(f"--host {pair!r} is not NAME=DESTINATION", where="--host",
                               fix="e.g. --host loadgen=root@10.0.0.2")
        if not destination_ok(dest):
            raise PgsweepError(f"--host {name}={dest!r} is not a destination ssh takes",
                               where="--host", expected=f"[user@]host or {DESTINATION_WORDS}")
        if names.count(name) > 1:
            raise PgsweepError(f"--host names {name} {names.count(name)} times", where="--host",
                               fix="one destination for each host")


def redirect(topo: Topology, pairs: list[str]) -> Topology:
    """`run --host NAME=DEST`: reach the host [hosts.NAME] names at DEST instead of its `ssh`
    (a fleet group's own copy of the topology: each group's shard reaches that group's
    client and standby hosts); its identity and known_hosts files stay the file's. Exit 2
    for a name [roles] does not place a role on, or a destination ssh could read as an
    option."""
    hosts = dict(topo.hosts)
    for pair in pairs:
        name, sep, dest = pair.partition("=")
        if not sep or name not in topo.remote_names():
            placed = ", ".join(topo.remote_names()) or "(none: [roles] places every role here)"
            raise PgsweepError(f"--host {pair!r} names no host a role is placed on",
                               where="--host", expected=f"NAME=DESTINATION, NAME one of {placed}",
                               fix="e.g. --host loadgen=root@10.0.0.2")  # fmt: skip
        hosts[name] = replace(hosts[name], ssh=dest)
    check_host_options(pairs, fleet=False)  # each a destination, each name once
    return replace(topo, hosts=hosts)


def check_standbys(source: Source, topo: Topology, configs: list[dict[str, Any]]) -> None:
    """A standby on another host streams over the real network: no namespace link stands
    in for it there; and a primary in a namespace (replication.network) cannot be reached
    by a client on another host."""
    if topo.remote:
        for config in configs:
            r = config.get("replication")
            if r is not None and r.standbys and r.network:
                raise source.error(("replication", "network"), "replication.network puts the "
                                   "primary in a network namespace here, where the client on "
                                   f"host {topo.client} cannot reach it",
                                   fix="remove replication.network, or roles.client")  # fmt: skip
    placed = [n for n in range(1, len(topo.standbys) + 1) if topo.standby_elsewhere(n)]
    if not placed:
        return
    for config in configs:
        r = config.get("replication")
        if r is None or r.standbys < placed[0]:
            continue
        if getattr(config.get("build"), "spec", None) is not None:
            raise source.error(("roles", "standbys"), f"standby s{placed[0]} runs on host "
                               f"{topo.standby_host(placed[0])}, and a configuration runs a "
                               "build, which is made on this machine and copied to the "
                               "server's host alone", fix="place the standbys beside the "
                               "server, or leave [build] out of this file")  # fmt: skip
        if r.network:
            raise source.error(("replication", "network"), "replication.network puts the "
                               f"standbys in a namespace here, but [roles] puts standby "
                               f"s{placed[0]} on host {topo.standby_host(placed[0])}",
                               fix="remove replication.network (the real network is there), "
                               "or roles.standbys")  # fmt: skip


def check_files(source: Source, topo: Topology) -> None:
    """Before anything runs: the files each host's entry names are regular files on paths
    no other user can change (ssh reads them as root)."""
    for name, t in topo.hosts.items():
        for key, path in (("identity_file", t.identity_file), ("known_hosts", t.known_hosts)):
            if path is None:
                continue
            if not path.is_file():
                raise source.error(("hosts", name, key), f"{path} is not a file")
            why = safefs.untrusted_component(path) or safefs.untrusted_link(path)
            if why:
                raise source.error(("hosts", name, key), f"{path} is not safe to use: {why}",
                                   fix="keep it in a folder only root (or you) can change")
