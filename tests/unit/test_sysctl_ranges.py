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
    assert sysctls.check(name, value) is not None


def test_this_machines_values_are_inside_their_ranges() -> None:
    """The ranges refuse what harms, not what a machine runs with."""
    present = [n for n in sysctls.RANGES if sysctls.sysctl_file(n).exists()]
    assert len(present) >= 50
    for name in present:
        now = sysctls.sysctl_file(name).read_text().strip()
        assert sysctls.check(name, now) is None, (name, now, sysctls.expected(name))
    assert sysctls.check("vm.dirty_bytes", 0) is None  # 0: the ratio governs


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
    assert sysctls.check("kernel.shmmni", value["kernel.shmmni"]) is None
    assert sysctls.recheck(value) is None
    for _ in range(100):
        shmid = libc.shmget(IPC_PRIVATE, 4096, IPC_CREAT | 0o600)
        assert shmid >= 0, ctypes.get_errno()
        segments.append(shmid)
    # at plan the value was fine; 100 segments later it would leave no room: refused at
    # validation and again right before it is written (the trial fails with the reason)
    assert sysctls.check("kernel.shmmni", value["kernel.shmmni"]) is not None
    why = sysctls.recheck(value)
    assert why is not None and "kernel.shmmni" in why and "segments in use now" in why
    assert sysctls.check("kernel.shmmni", str(_shm_count() + 16)) is None
    semid = libc.semget(IPC_PRIVATE, 40, IPC_CREAT | 0o600)
    assert semid >= 0, ctypes.get_errno()
    semaphores.append(semid)
    assert sysctls.check("kernel.sem", "32 32000 32 32000") is not None  # SEMMSL < 40 in use
    assert sysctls.check("kernel.sem", "64 32000 32 32000") is None


def test_strict_overcommit_needs_room_for_what_is_committed() -> None:
    def strict(mode: str, ratio: str) -> str | None:
        return sysctls.check_overcommit({"vm.overcommit_memory": mode,
                                         "vm.overcommit_ratio": ratio})  # fmt: skip

    assert strict("2", "1") and "committed now" in (strict("2", "1") or "")
    assert strict("0", "1") is None and strict("2", "100") is None


def test_security_md_shows_the_ranges_the_code_enforces() -> None:
    assert sysctls.table() in (ROOT / "SECURITY.md").read_text()
