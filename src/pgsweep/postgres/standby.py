"""Streaming standbys of a primary cluster: each a throwaway server made with
`pg_basebackup -X stream -R` from the running primary (with a replication slot of its own),
as the same unprivileged user, on its own private socket, with `cluster_name`,
`primary_conninfo` and `primary_slot_name` given on its command line (which outranks the
postgresql.auto.conf pg_basebackup writes). A `ReplicaSet` is all the
standbys of one primary for one set-up; the primary's `Server` owns it, so stopping or
destroying the primary takes its standbys along."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..host.api import Host
from ..host.proc import RunAs
from .access import ROLE, ServerError
from .binaries import Binaries
from .cluster import PORT, Cluster

# a standby reconnects this soon after its primary restarts (PostgreSQL's default: 5 s)
RETRY_INTERVAL = "200ms"
SLOT_PREFIX = "pgsweep_"  # replication slots pgsweep makes on a primary
# settings a hot standby must have at least as high as its primary's, or it stops replaying
AT_LEAST_PRIMARY = ("max_connections", "max_worker_processes", "max_wal_senders",
                    "max_prepared_transactions", "max_locks_per_transaction")  # fmt: skip


class Standby(Cluster):
    """A standby: a Cluster whose data comes from a base backup of its primary."""

    def __init__(self, binaries: Binaries, user: RunAs | None, root: Path, socket_dir: Path,
                 name: str, upstream: str, netns: str | None = None, *,
                 host: Host) -> None:  # fmt: skip
        super().__init__(binaries, user, root, socket_dir, host=host)
        self.name = name  # cluster_name and application_name: s1, s2, ...
        self.upstream = upstream  # primary_conninfo without application_name
        self.netns = netns  # the standbys' network namespace (replication.network)

    @property
    def slot(self) -> str:
        """Its physical replication slot on the primary: the primary keeps every WAL
        segment this standby still needs (the next standby's base backup checkpoints, a
        standby behind a bandwidth limit lags)."""
        return f"{SLOT_PREFIX}{self.name}"

    def managed(self) -> dict[str, str]:
        return {**super().managed(), "cluster_name": self.name, "hot_standby": "on",
                "primary_conninfo": f"{self.upstream} application_name={self.name}",
                "primary_slot_name": self.slot,
                "wal_retrieve_retry_interval": RETRY_INTERVAL}  # fmt: skip

    def clone(self, primary: Cluster, over: tuple[list[str], dict[str, str]] | None = None
              ) -> float:  # fmt: skip
        """Make the data directory: a base backup of the running primary, run as the server
        user, creating the standby's slot; returns its seconds. From the primary's private
        socket, or (`over`: pg_basebackup's connection arguments and environment) over TCP
        from the standby's own host."""
        self.make_dirs()
        conn, env = over if over is not None else (primary.pgbench_conn_args(), None)
        argv = [primary.binaries.path("pg_basebackup"), *conn,
                "-D", str(self.datadir), "-X", "stream", "-R", "-c", "fast",
                "-C", "-S", self.slot]  # fmt: skip
        res = self._run(argv, "pg_basebackup", timeout=3600, env=env)
        if not res.ok:
            raise ServerError(f"pg_basebackup failed on {self.host.name}: "
                              f"{res.describe_failure()}")  # fmt: skip
        self.write_access_files()
        return res.seconds


@dataclass
class ReplicaSet:
    """The standbys of one primary for one set-up (count, network, bandwidth); a change of
    their settings only restarts them."""

    shape: str  # what made it: compared to decide whether the next trial needs another
    standbys: list[Standby]
    generation: int  # the primary's data generation it was cloned from
    clone_seconds: float = 0.0
    epochs: tuple[int, ...] = ()  # its hosts' connections it was made over (HostSide.epoch)
    network: Any = None  # a netns.Link when the standbys sit behind one
    settings: dict[str, str] | None = None  # what the standbys run with; None: not written

    def start(self) -> None:
        for standby in self.standbys:
            if standby.postmaster_pid() is None:
                standby.start()

    def stop(self) -> None:
        for standby in self.standbys:
            standby.stop()

    def restart(self) -> None:
        for standby in self.standbys:
            standby.stop()
            standby.start()

    def destroy(self) -> None:
        first: BaseException | None = None
        for standby in self.standbys:
            if not standby.host.alive():
                continue  # its host was lost: the agent there took it down as it ended
            try:
                standby.destroy()
            except Exception as exc:  # take the others down too, then say what failed
                first = first or exc
        if self.network is not None:
            self.network.destroy()
        if first is not None:
            raise first


def upstream(host: str, port: int = PORT, passfile: str = "/dev/null") -> str:
    """primary_conninfo without application_name: trust on the private socket or link, so
    no password is ever looked up or offered (no passfile); from another host, the run's
    password in the server user's 0600 passfile there, for scram-sha-256."""
    return f"host={host} port={port} user={ROLE} sslmode=disable passfile={passfile}"


def upstream_socket(primary: Cluster) -> str:
    return upstream(str(primary.socket_dir), primary.port)


def drop_slots(primary: Cluster, keep: list[str]) -> list[str]:
    """Drop pgsweep's inactive slots on the running primary but those in `keep`: a slot
    nobody streams from would keep every WAL segment from now on, and change how the next
    trials write. Returns the slots dropped."""
    with primary.connect() as conn:
        rows = conn.execute(
            "SELECT slot_name FROM pg_replication_slots WHERE NOT active "
            "AND starts_with(slot_name, %s) AND NOT slot_name = ANY(%s)",
            (SLOT_PREFIX, keep),
        ).fetchall()
        for (slot,) in rows:
            conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
    return [str(r[0]) for r in rows]


def wait_streaming(primary: Cluster, names: list[str], sync: int, timeout: float = 60) -> None:
    """Until every standby streams, at least `sync` of them are synchronous, and each has
    replayed everything the primary had written when this began: every trial starts from
    standbys in the same, caught-up state. ServerError with what was seen otherwise."""
    deadline = time.monotonic() + timeout
    seen: list[tuple[Any, ...]] = []
    with primary.connect() as conn:
        target = conn.execute("SELECT pg_current_wal_lsn()").fetchone()
        while time.monotonic() < deadline:
            seen = conn.execute(
                "SELECT application_name, state, sync_state, "
                "coalesce(replay_lsn >= %s::pg_lsn, false) FROM pg_stat_replication",
                (target[0] if target else "0/0",),
            ).fetchall()
            streaming = {r[0] for r in seen if r[1] == "streaming" and r[3]}
            in_sync = sum(1 for r in seen if r[2] in ("sync", "quorum"))
            if set(names) <= streaming and in_sync >= sync:
                return
            time.sleep(0.1)
    rows = "; ".join(f"{r[0]}: {r[1]}, {r[2]}, caught up {r[3]}" for r in seen) or "none"
    raise ServerError(
        f"the standbys {', '.join(names)} were not streaming and caught up ({sync} in sync) "
        f"within {timeout:.0f} s; pg_stat_replication: {rows}"
    )
