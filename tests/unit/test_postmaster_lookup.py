"""Which processes pgsweep takes for a postmaster: the ones whose command line names a
directory with -D, and never the `postgres -C data_directory -D CONF` pg_ctl runs for a
moment before it starts or stops a server of that same CONF (restore would signal it, and a
look-alike once made the suite take pg_ctl's helper for a standby that had started)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pgsweep.host import areaprocs
from pgsweep.postgres.cluster import _shmem_line, is_postmaster_of

SLEEP = "import time; time.sleep(60)"


@pytest.fixture
def lookalikes(tmp_path: Path) -> Iterator[dict[str, int]]:
    """Real processes whose argv[0] ends in /postgres: pg_ctl's -C helper, a postmaster's
    command line, and a postmaster of a directory elsewhere."""
    argvs = {
        "helper": ["-C", "data_directory", "-D", str(tmp_path / "area/c1/conf")],
        "server": ["-D", str(tmp_path / "area/c2/conf"), "-c", "port=5432"],
        "elsewhere": ["-D", str(tmp_path / "other/conf")],
    }
    named = "/usr/lib/postgresql/15/bin/postgres"  # argv[0]; python runs
    started = {
        name: subprocess.Popen([named, "-c", SLEEP, *argv], executable=sys.executable)
        for name, argv in argvs.items()
    }
    try:
        yield {name: p.pid for name, p in started.items()}
    finally:
        for p in started.values():  # only the processes this test started, by PID
            p.kill()
            p.wait()


def test_pg_ctls_data_directory_helper_is_no_postmaster(
    tmp_path: Path, lookalikes: dict[str, int]
) -> None:
    assert areaprocs.postmasters_under(tmp_path / "area", os.getuid()) == [lookalikes["server"]]
    assert not is_postmaster_of(lookalikes["helper"], tmp_path / "area/c1/conf", os.getuid())
    assert is_postmaster_of(lookalikes["server"], tmp_path / "area/c2/conf", os.getuid())
    assert not is_postmaster_of(lookalikes["server"], tmp_path / "area/c2/conf", os.getuid() + 1)


def test_a_stale_lock_files_segment_line_must_be_two_numbers() -> None:
    """After a crash, stop() reads the dead server's System V segment from postmaster.pid,
    a file the server user writes: anything but two numbers means nothing to reclaim."""
    head = b"4242\n/data\n1700000000\n5432\n/sock\n\n"
    assert _shmem_line(head + b"  5432001   9928720\nready   \n") == "5432001 9928720"
    for hostile in (b"abc def\n", b"-1 5\n", b"5432001\n", b"1 2 3\n", b"1e3 7\n", b""):
        assert _shmem_line(head + hostile) is None, hostile
