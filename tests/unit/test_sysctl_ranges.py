"""Each sysctl an experiment may set has a safe range (layers/sysctls.py): the values the
issue found stopping a host are refused, this machine's own values pass, the floors of
machine-wide limits follow what is really in use (real System V segments and semaphore
sets made here), and SECURITY.md shows the table the code enforces."""

from __future__ import annotations

import ctypes
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import ROOT
from pgsweep.host.local import LOCAL
from pgsweep.host.recording import RecordingHost
from pgsweep.layers import sysctls

IPC_PRIVATE, IPC_CREAT, IPC_RMID = 0, 0o1000, 0
libc = ctypes.CDLL(None, use_errno=True)


@pytest.mark.parametrize(("name", "value"), [
    ("vm.max_map_count", 1), ("fs.file-max", 1), ("kernel.shmmni", 1),
    ("kernel.sem", "0 0 0 0"), ("net.ipv4.tcp_mem", "1 1 1"),
    ("vm.vfs_cache_pressure", 0), ("vm.dirty_ratio", 0), ("fs.nr_open", 1),
    ("net.core.somaxconn", 0), ("kernel.msgmni", 0), ("vm.dirty_bytes", 4096),
    ("net.ipv4.tcp_rmem", "8192 4096 4096"), ("kernel.sem", "250 32000 32"),
    ("vm.swappiness", "1e3"), ("vm.swappiness", True), ("kernel.shmmax", -1),
])  # fmt: skip
def test_values_that_can_stop_the_host_are_refused(name: str, value: object) -> None:
    assert sysctls.check(name, value, LOCAL) is not None


def test_this_machines_values_are_inside_their_ranges() -> None:
    """The ranges refuse what harms, not what a machine runs with."""
    present = [n for n in sysctls.RANGES if sysctls.sysctl_file(n).exists()]
    assert len(present) >= 50
    for name in present:
        now = sysctls.sysctl_file(name).read_text().strip()
        why = sysctls.check(name, now, LOCAL)
        assert why is None, (name, now, sysctls.expected(name, LOCAL))
    assert sysctls.check("vm.dirty_bytes", 0, LOCAL) is None  # 0: the ratio governs


def test_every_allowed_name_has_a_range_and_nothing_else_is_allowed() -> None:
    assert sysctls.refusal("kernel.sched_deadline_period_max_us")  # allowed by name, no range
    assert sysctls.refusal("kernel.sched_rt_runtime_us")
    assert all(sysctls.refusal(n) is None for n in sysctls.RANGES)


@pytest.fixture
def segments() -> Iterator[list[int]]:
    made: list[int] = []
    yield made
    for shmid in made:
        libc.shmctl(shmid, IPC_RMID, None)


@pytest.fixture
def semaphores() -> Iterator[list[int]]:
    made: list[int] = []
    yield made
    for semid in made:
        libc.semctl(semid, 0, IPC_RMID)


def _shm_count() -> int:
    return len(Path("/proc/sysvipc/shm").read_text().splitlines()) - 1


def test_floors_follow_the_segments_in_use(segments: list[int], semaphores: list[int]) -> None:
    value = {"kernel.shmmni": str(max(64, _shm_count() + 16) + 20)}
    assert sysctls.check("kernel.shmmni", value["kernel.shmmni"], LOCAL) is None
    assert sysctls.recheck(value, LOCAL) is None
    for _ in range(100):
        shmid = libc.shmget(IPC_PRIVATE, 4096, IPC_CREAT | 0o600)
        assert shmid >= 0, ctypes.get_errno()
        segments.append(shmid)
    # at plan the value was fine; 100 segments later it would leave no room: refused at
    # validation and again right before it is written (the trial fails with the reason)
    assert sysctls.check("kernel.shmmni", value["kernel.shmmni"], LOCAL) is not None
    why = sysctls.recheck(value, LOCAL)
    assert why is not None and "kernel.shmmni" in why and "segments in use now" in why
    assert sysctls.check("kernel.shmmni", str(_shm_count() + 16), LOCAL) is None
    semid = libc.semget(IPC_PRIVATE, 40, IPC_CREAT | 0o600)
    assert semid >= 0, ctypes.get_errno()
    semaphores.append(semid)
    # SEMMSL < 40 in use
    assert sysctls.check("kernel.sem", "32 32000 32 32000", LOCAL) is not None
    assert sysctls.check("kernel.sem", "64 32000 32 32000", LOCAL) is None


def test_strict_overcommit_needs_room_for_what_is_committed() -> None:
    def strict(mode: str, ratio: str) -> str | None:
        return sysctls.check_overcommit({"vm.overcommit_memory": mode,
                                         "vm.overcommit_ratio": ratio}, LOCAL)  # fmt: skip

    assert strict("2", "1") and "committed now" in (strict("2", "1") or "")
    assert strict("0", "1") is None and strict("2", "100") is None


def test_a_map_of_a_file_named_in_any_bytes_is_counted(tmp_path: Path) -> None:
    """/proc/PID/maps names each mapped file as its bytes: a name that is not UTF-8 (any
    user can make one) is counted like the others, never an error that stops `plan`."""
    import mmap
    import os

    path = os.path.join(os.fsencode(tmp_path), b"map-\xff\xfe")
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        os.ftruncate(fd, 4096)
        with mmap.mmap(fd, 4096):
            maps = LOCAL.read_text(Path(f"/proc/{os.getpid()}/maps"))
            assert "map-\ufffd\ufffd" in maps
            assert sysctls.check("vm.max_map_count", "262144", LOCAL) is None
    finally:
        os.close(fd)


def test_the_floors_are_those_of_the_host_the_values_go_to() -> None:
    """A trial's values are checked on its host (the server's machine): its segments,
    files, maps and limits set the floors, never those of the machine pgsweep runs on."""
    busy = RecordingHost(files={
        "/proc/sysvipc/shm": "header\n" + "0 1 600 4096 1 1 0\n" * 200,
        "/proc/sys/fs/file-nr": "500000\t0\t9223372036854775807\n",
        "/proc/self/limits": "Limit Soft Limit Hard Limit Units\n"
                             "Max open files            1024                 2097152   files\n",
        "/proc/1/maps": "m\n" * 70000, "/proc/2/maps": "m\n",
        "/proc/meminfo": "MemTotal: 1000000 kB\nCommitted_AS: 900000 kB\nSwapTotal: 0 kB\n",
        "/proc/sys/vm/overcommit_kbytes": "0\n", "/proc/sys/vm/overcommit_ratio": "50\n",
    })  # fmt: skip
    assert sysctls.check("kernel.shmmni", "200", LOCAL) is None
    assert sysctls.check("kernel.shmmni", "200", busy) is not None  # 200 segments there
    assert sysctls.check("fs.file-max", "900000", busy) is not None  # 500000 open there, x2
    assert sysctls.check("fs.nr_open", "1048576", busy) is not None  # its agent's hard limit
    assert sysctls.check("vm.max_map_count", "100000", busy) is not None  # 70000 maps there
    why = sysctls.recheck({"vm.overcommit_memory": "2"}, busy)
    assert why is not None and "878 MiB is committed now" in why
    assert not [e for e in busy.effects if e.kind != "run"]  # read only


def test_security_md_shows_the_ranges_the_code_enforces() -> None:
    assert sysctls.table() in (ROOT / "SECURITY.md").read_text()
