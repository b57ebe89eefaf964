"""A dump of a newer major version than the server that restores it is refused: at `plan`
against the installed server (tests/integration/test_dump.py), and, for a configuration
that runs a build (whose version is known only once it is built), when its cluster is
made, naming both versions, before pg_restore could fail part way."""

from __future__ import annotations

from pathlib import Path

import pytest

from pgsweep.layers.cluster import _dump_fits
from pgsweep.postgres.access import ServerError
from pgsweep.postgres.binaries import Binaries
from pgsweep.postgres.dump import Dump


def _dump(server: str, pg_dump: str) -> Dump:
    return Dump("/srv/shop.dump", "custom", 1 << 20, server, pg_dump)


def test_a_newer_dump_is_refused_by_an_older_build() -> None:
    build = Binaries(Path("/cache/abc/bin"), "14.13", {})
    with pytest.raises(ServerError) as caught:
        _dump_fits(_dump("15.18", "15.18"), build)
    assert "PostgreSQL 15.18 made by pg_dump 15.18" in str(caught.value)
    assert "newer than this cluster's PostgreSQL 14.13" in str(caught.value)
    with pytest.raises(ServerError, match=r"pg_dump 16\.4"):  # a newer pg_dump's format too
        _dump_fits(_dump("14.13", "16.4"), build)


def test_the_same_or_an_older_major_is_restored() -> None:
    build = Binaries(Path("/cache/abc/bin"), "16.4", {})
    _dump_fits(_dump("15.18", "15.18"), build)
    _dump_fits(_dump("16.1", "16.4"), build)
