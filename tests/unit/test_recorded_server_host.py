"""A server on another host ([roles] server): what `plan` and `run` check on its host
before anything is made, on a recording host (tests/integration/test_hosts.py runs it for
real)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from pgsweep.engine import clients
from pgsweep.errors import PgsweepError
from pgsweep.host.recording import RecordingHost, Reply, argv_starts
from pgsweep.postgres.binaries import Binaries

BIN = Binaries(Path("/usr/lib/postgresql/15/bin"), "15.18", {})
EXP = SimpleNamespace(binaries=BIN)


def _db(says: str, code: int = 0) -> RecordingHost:
    return RecordingHost("db", users={None: (0, 0)},
                         commands=[(argv_starts("postgres", "--version"), Reply(code, says))])


def test_the_servers_host_runs_the_version_the_settings_were_checked_with() -> None:
    db = _db("postgres (PostgreSQL) 15.18 (Debian 15.18-0+deb12u1)\n")
    clients.same_postgres(db, EXP, "host db (root@db1)")  # type: ignore[arg-type]
    made, ran, removed = db.effects
    assert made.kind == "private_dir" and made.what.startswith("/tmp/pgsweep-check-")
    assert ran.detail["argv"] == ("/usr/lib/postgresql/15/bin/postgres", "--version")
    assert removed.kind == "remove_tree" and removed.what == made.what


@pytest.mark.parametrize(("says", "code"), [
    ("postgres (PostgreSQL) 15.4 (Debian 15.4-1)\n", 0),  # another minor release
    ("postgres (PostgreSQL) 15.181\n", 0),  # "15.18" only as a part of a word
    ("", 127),  # no such program there
])  # fmt: skip
def test_another_version_there_is_refused_naming_the_host(says: str, code: int) -> None:
    db = _db(says, code)
    with pytest.raises(PgsweepError) as caught:
        clients.same_postgres(db, EXP, "host db (root@db1)")  # type: ignore[arg-type]
    assert caught.value.what.startswith("host db (root@db1) runs ")
    assert "PostgreSQL 15.18" in caught.value.what and "same PostgreSQL" in str(caught.value.fix)
    assert db.effects[-1].kind == "remove_tree"  # its scratch folder is gone either way


class _Busy(RecordingHost):
    def free_port(self, addresses: list[str]) -> int:
        raise OSError(99, "Cannot assign requested address")


def test_a_port_the_servers_host_cannot_listen_on_is_an_error_naming_it() -> None:
    with pytest.raises(PgsweepError) as caught:
        clients.free_port(_Busy("db", users={None: (0, 0)}), ["10.0.0.12"])
    assert "10.0.0.12" in caught.value.what and "db by" in caught.value.what
    assert "Cannot assign requested address" in caught.value.what


class _Cut(RecordingHost):
    def tcp_rtt(self, address: str, port: int, probes: int = 5) -> float:
        self.asked = (address, port, probes)
        raise OSError(113, "No route to host")


def test_a_client_host_that_cannot_reach_the_servers_address_is_refused_at_plan() -> None:
    server = SimpleNamespace(name="db", hello={"ssh_connection": "10.0.0.1 50122 10.0.0.12 22"})
    client = _Cut("loadgen", users={None: (0, 0)})
    with pytest.raises(PgsweepError) as caught:
        clients.reaches(client, server, ["client", "standby"])  # type: ignore[arg-type]
    assert client.asked == ("10.0.0.12", 22, 1)  # the server's sshd, where this machine met it
    assert caught.value.what.startswith("host loadgen (client and standby) cannot reach host "
                                        "db at 10.0.0.12")  # fmt: skip
    assert "No route to host" in caught.value.what
    assert "beside the server (roles names db)" in str(caught.value.fix)


def test_a_server_elsewhere_reaches_each_other_roles_host_over_tcp() -> None:
    """Which hosts reach a server on another host over TCP (`elsewhere`): the client's
    (this machine's too) and each standby's of its own, once each; never the server's own."""
    from pgsweep.spec.hosts import Topology

    def topo(client: str, *standbys: str) -> Topology:
        return Topology(client=client, standbys=standbys, server="db")

    assert clients.elsewhere(topo("local")) == ["local"]
    assert clients.elsewhere(topo("db", "db")) == []  # all beside it: no TCP at all
    assert clients.elsewhere(topo("gen", "db", "far", "gen")) == ["gen", "far"]
    assert clients.elsewhere(Topology(client="gen", standbys=("far",))) == []  # server here
    t = topo("db", "db", "far")
    assert [t.standby_elsewhere(n) for n in (1, 2, 3)] == [False, True, False]  # s3: beside


def test_the_hba_line_admits_one_address_of_either_family() -> None:
    from pgsweep.postgres.access import ClientAccess

    assert ClientAccess("10.0.0.12", "10.0.0.1").hba_line() == (
        "host all pgsweep 10.0.0.1/32 scram-sha-256\n")
    # /32 of an IPv6 address would admit 2**96 of them
    assert ClientAccess("2001:db8::12", "2001:db8::1", "replication").hba_line() == (
        "host replication pgsweep 2001:db8::1/128 scram-sha-256\n")
    with pytest.raises(ValueError):
        ClientAccess("10.0.0.12", "10.0.0.0/8").hba_line()  # never a network


def test_a_passfile_line_escapes_what_libpq_reads_as_separators() -> None:
    from pgsweep.postgres.access import passfile_line

    assert passfile_line("10.0.0.12", 5433, "ab12") == "10.0.0.12:5433:*:*:ab12\n"
    assert passfile_line("2001:db8::12", 5433, "ab12") == "2001\\:db8\\:\\:12:5433:*:*:ab12\n"
    assert passfile_line("h", 1, "a:b\\c") == "h:1:*:*:a\\:b\\\\c\n"


def test_the_servers_host_must_see_this_machine_by_an_address_of_its_own() -> None:
    seen = SimpleNamespace(hello={"ssh_connection": "127.0.0.1 50122 10.0.0.12 22"})
    clients.seen_directly(seen, "host db (root@db1)")  # type: ignore[arg-type]
    # through a jump host or NAT: the address the server would admit is not this machine's
    jumped = SimpleNamespace(hello={"ssh_connection": "192.0.2.77 50122 10.0.0.12 22"})
    with pytest.raises(PgsweepError) as caught:
        clients.seen_directly(jumped, "host db (root@db1)")  # type: ignore[arg-type]
    assert "sees this machine as 192.0.2.77" in caught.value.what


def test_a_resumed_run_puts_every_role_where_its_first_trials_did(tmp_path: Path) -> None:
    from pgsweep.engine.run import same_places

    def now(**hosts: tuple[str, str]) -> dict[str, str]:
        out = {}
        for role, (host, hostname) in hosts.items():
            out |= {f"{role}.host": host, f"{role}.hostname": hostname}
        return out

    def stored(**hosts: tuple[str, str]) -> dict[str, str | None]:
        return dict(now(**hosts))

    here = ("local", "vm")
    same_places({}, now(server=("db", "h3")), tmp_path)  # a new (or older) folder
    same_places(stored(server=here), now(server=here, client=("gen", "h5")), tmp_path)
    same_places(stored(server=("db", "h3"), s1=("sb", "h6")),  # reached at other addresses
                now(server=("db", "h3"), s1=("sb", "h6")), tmp_path)  # fmt: skip
    moved = [(stored(server=here), now(server=("db", "h3")), "the server on local"),
             (stored(server=("db", "h3")), now(server=here), "the server on db"),
             (stored(server=("db", "h3")), now(server=("db", "h4")), "the server on db"),
             (stored(server=here, client=("gen", "h5")), now(server=here, client=here),
              "the client on gen (hostname h5)"),
             (stored(s1=("sb", "h6"), s2=("sc", "h7")), now(s1=("sb", "h6"), s2=("sb", "h6")),
              "standby s2 on sc (hostname h7)")]  # fmt: skip
    for was, then, said in moved:
        with pytest.raises(PgsweepError) as caught:
            same_places(was, then, tmp_path)
        assert caught.value.what.startswith(f"{tmp_path} ran {said}"), caught.value.what


def _os_ctx(host: RecordingHost) -> SimpleNamespace:
    def error(path: tuple[str, ...], what: str, **kw: object) -> PgsweepError:
        return PgsweepError(what, where=".".join(path), **kw)  # type: ignore[arg-type]

    return SimpleNamespace(host=host, source=SimpleNamespace(error=error))


def test_a_server_elsewhere_has_its_os_checks_read_and_its_kernel_lock_taken_there() -> None:
    """[os] beside a server on another host: what its kernel offers is read on that host
    (the cgroup controller, the huge page pools, the THP menus), and the kernel lock is
    taken by that host's agent, nothing on this machine."""
    from pgsweep.host.kernelfiles import CGROUP_V1_MEMORY, THP_FILES, hugepage_pool
    from pgsweep.layers.os_tables import OsSettings
    from pgsweep.layers.oslayer import OsLayer, _offered

    thp = str(THP_FILES["thp"])
    bare = RecordingHost("db", files={thp: "always [madvise] never"}, users={None: (0, 0)})
    with pytest.raises(PgsweepError) as caught:
        _offered({"memory_limit": 2**30}, {}, _os_ctx(bare))  # type: ignore[arg-type]
    assert "which host db does not have mounted" in caught.value.what
    with pytest.raises(PgsweepError) as caught:
        _offered({"huge_pages": "2MB"}, {}, _os_ctx(bare))  # type: ignore[arg-type]
    assert caught.value.what.startswith("the kernel of host db has no pool of 2MB")
    with pytest.raises(PgsweepError) as caught:
        _offered({}, {"thp": ["never", "sometimes"]}, _os_ctx(bare))  # type: ignore[arg-type]
    assert f"{thp} on host db offers no 'sometimes'" in caught.value.what
    assert caught.value.where == "factors.os.thp"
    full = RecordingHost("db", users={None: (0, 0)}, files={
        thp: "always [madvise] never", str(CGROUP_V1_MEMORY / "memory.limit_in_bytes"): "-1"})
    full.dirs.add(str(hugepage_pool(2048)))
    _offered({"memory_limit": 2**30, "huge_pages": "2MB", "thp": "never"}, {},
             _os_ctx(full))  # type: ignore[arg-type]  # fmt: skip
    assert [e.kind for e in full.effects] == []  # read only
    settings = OsSettings(True, None, {"thp": "never"}, None, None, False, None, {})
    OsLayer().claim_host(full, [settings], "PID 1, /results")
    (lock,) = full.effects
    assert (lock.kind, lock.what) == ("kernel_lock", "/run/pgsweep-kernel.lock")
    unused = OsSettings(False, None, {}, None, None, False, None, {})
    OsLayer().claim_host(bare, [unused], "PID 1, /results")  # no [os]: no lock
    assert bare.effects == []


def test_each_host_is_admitted_from_the_address_it_sends_from_to_the_server() -> None:
    """A host with several interfaces reaches the server from its route's source, not
    from the address this machine reached it at: `plan` shows (and `run` admits) that one;
    the server's own host keeps its own address, where the server listens."""
    from pgsweep.spec.hosts import Topology

    asked: list[tuple[str, str]] = []

    def host(name: str, ssh: str, source: str) -> SimpleNamespace:
        def route(address: str) -> str:
            asked.append((name, address))
            return source

        return SimpleNamespace(hello={"ssh_connection": ssh}, source_address=route)

    opened = {"db": host("db", "10.0.0.1 5000 10.0.0.12 22", "unused"),
              "gen": host("gen", "10.0.0.1 5001 10.0.0.11 22", "10.9.0.1")}  # fmt: skip
    exp = SimpleNamespace(topology=Topology(client="gen", server="db"))
    out = clients.reached(exp, opened)  # type: ignore[arg-type]
    assert out == {"db": "10.0.0.1 5000 10.0.0.12 22", "gen": "10.0.0.1 5001 10.9.0.1 22"}
    assert asked == [("gen", "10.0.0.12")]  # towards where the server listens
    asked.clear()  # a server here: towards this machine's address as each host sees it
    here = clients.reached(SimpleNamespace(topology=Topology(client="gen")),  # type: ignore[arg-type]
                           {"gen": opened["gen"]})  # type: ignore[dict-item]  # fmt: skip
    assert here == {"gen": "10.0.0.1 5001 10.9.0.1 22"} and asked == [("gen", "10.0.0.1")]


def test_a_server_elsewhere_has_its_storage_checked_on_its_host() -> None:
    """[storage] beside a server on another host: the filesystem's mkfs is looked for on
    that host, and the loop images must fit that host's work base (not this machine's)."""
    from pgsweep.layers.storage import StorageLayer
    from pgsweep.layers.storage_build import FsSettings, StorageSettings

    layer = StorageLayer()
    ctx = _os_ctx(RecordingHost("db", users={None: (0, 0)}, files={"which:mkfs.ext4": "/x"}))
    ctx.where = {}
    with pytest.raises(PgsweepError) as caught:
        layer.validate({"device": "loop:1GiB"}, {"filesystem": ["ext4", "xfs"]},
                       ctx)  # type: ignore[arg-type]  # fmt: skip
    assert caught.value.what == "xfs needs mkfs.xfs, which is not installed on host db"
    image = FsSettings("loop:8GiB", 8 << 30, "ext4", "", "", None, False)
    small = RecordingHost("db", files={"free:/var/tmp": str(4 << 30)})
    with pytest.raises(PgsweepError) as caught:
        layer.check_host(small, Path("/var/tmp"), [StorageSettings(True, image, None)])
    assert "loop:8GiB may grow to 8.0 GiB in /var/tmp on host db" in caught.value.what
    assert "4.0 GiB free" in caught.value.what and small.effects == []  # read only
