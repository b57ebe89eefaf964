"""A level, or a combination of levels, the server will not start with is exit 2 at
`plan`, before anything runs, naming the key and its line in the server's words; the
scratch server that found it is gone, and so are its folders. These count every server
and every pgsweep-start folder on the machine, so scripts/test.sh runs them in the
machine lane, alone."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conftest import pgsweep, postmasters, requires_pg, write_experiment

pytestmark = [requires_pg, pytest.mark.postgres]


def _plan_error(tmp_path: Path, body: str) -> str:
    # the scratch clusters under the work areas' base, their sockets under /tmp
    bases = ("/tmp", os.environ.get("PGSWEEP_WORK_BASE", "/var/tmp"))
    before = {b: set(os.listdir(b)) for b in bases}
    servers = set(postmasters())
    path = write_experiment(tmp_path, body)
    res = pgsweep("plan", str(path))
    assert res.returncode == 2, res.stdout + res.stderr
    assert set(postmasters()) <= servers  # the scratch server is gone
    for b in bases:
        assert not [n for n in set(os.listdir(b)) - before[b] if n.startswith("pgsweep-start")]
    return res.stderr


def test_levels_that_only_fail_together_are_refused_at_plan(tmp_path: Path) -> None:
    err = _plan_error(tmp_path, """
        [experiment]
        name = "together"
        [factors]
        server.max_wal_senders = [0, 10]
        server.wal_level = ["replica", "minimal"]
    """)  # fmt: skip
    # wal_level = minimal starts with max_wal_senders = 0 only: named with its line
    assert "exp.toml:4: factors.server.max_wal_senders" in err, err
    assert "requires wal_level" in err and "'minimal'" in err and "'10'" in err


def test_a_level_no_server_starts_with_is_refused_at_plan(tmp_path: Path) -> None:
    err = _plan_error(tmp_path, """
        [experiment]
        name = "preload"
        [server]
        shared_preload_libraries = "pg_stat_statement"
    """)  # fmt: skip
    assert "exp.toml:4: server.shared_preload_libraries" in err, err
    assert 'could not access file "pg_stat_statement"' in err
