"""pg_wait_sampling's profile as the explain panel's wait states (collect.wait_profile):
average sessions per (process type, wait class, wait event) over the window, each
process's type from pgsweep's own sampler, its own sampler's backend left out, and the
time on CPU that pg_wait_sampling 1.1 does not record (it samples a process only while
it waits) from each process's share of the window. The real run is in
tests/integration/test_explain.py."""

from __future__ import annotations

from typing import Any

import pytest

from pgsweep.collect import wait_profile


class _Conn:
    """pg_wait_sampling_profile's rows as the server returns them (pid, event_type, event,
    sum(count)): 1.1 has no rows for a process on CPU."""

    def __init__(self, rows: list[tuple[Any, ...]]) -> None:
        self.rows = rows

    def execute(self, query: str, params: Any = None) -> Any:
        assert "pg_wait_sampling_profile" in query
        rows = self.rows
        return type("R", (), {"fetchall": lambda self: rows})()


def test_waits_per_process_type_and_the_rest_of_each_process_time_on_cpu() -> None:
    # a 2 s window at 10 ms: 200 samples a process; two client backends there the whole
    # window, a walwriter, and pgsweep's own sampling backend (pid 9, left out)
    conn = _Conn([(101, "Client", "ClientRead", 80), (101, "IO", "WALSync", 40),
                  (102, "Client", "ClientRead", 100), (102, "Lock", "transactionid", 20),
                  (201, "Activity", "WalWriterMain", 190),
                  (9, "Client", "ClientRead", 200)])  # fmt: skip
    types = {101: "client backend", 102: "client backend", 201: "walwriter", 9: "client backend"}
    present = {101: 1.0, 102: 1.0, 201: 1.0, 9: 1.0}
    rows, per = wait_profile.read(conn, types, present, {9}, 2.0, 10.0)
    assert per == 200
    got = {(t, c, e): s for t, c, e, s in rows}
    assert got[("client backend", "Client", "ClientRead")] == pytest.approx(180 / 200)
    assert got[("client backend", "IO", "WALSync")] == pytest.approx(40 / 200)
    # the rest of each backend's 200 samples: (200 - 120) + (200 - 120), on CPU
    assert got[("client backend", "CPU", "CPU")] == pytest.approx(160 / 200)
    assert got[("walwriter", "CPU", "CPU")] == pytest.approx(10 / 200)
    # two backends the whole window: two sessions in all, as pg_stat_activity's sampling
    assert sum(s for (t, _, _), s in got.items() if t == "client backend") == pytest.approx(2)
    assert rows[0][0] == "client backend" and rows[0][3] == max(
        s for (t, _, _), s in got.items() if t == "client backend")  # by type, most first


def test_a_process_there_half_the_window_and_one_never_seen() -> None:
    conn = _Conn([(301, "IO", "DataFileRead", 50), (999, "LWLock", "WALWrite", 4)])
    rows, _ = wait_profile.read(conn, {301: "client backend"}, {301: 0.5}, set(), 2.0, 10.0)
    got = {(t, c, e): s for t, c, e, s in rows}
    assert got[("client backend", "CPU", "CPU")] == pytest.approx(50 / 200)
    assert got[("unknown", "LWLock", "WALWrite")] == pytest.approx(4 / 200)
    assert wait_profile.read(conn, {}, {}, set(), 0.0, 10.0) == ([], 0.0)


def test_a_preloaded_wait_sampling_that_is_not_installed_names_its_package() -> None:
    """The server's own message (captured: `could not access file "pg_wait_sampling": No
    such file or directory`) becomes exit 2 at `plan` with the package to install."""
    from types import SimpleNamespace

    from pgsweep.layers.server_start import _start_error
    from pgsweep.postgres.startcheck import StartFailure

    ctx = SimpleNamespace(where={"server.shared_preload_libraries": "exp.toml:5"}, origins={},
                          binaries=SimpleNamespace(major=15))  # fmt: skip
    failure = StartFailure({"shared_preload_libraries": "pg_wait_sampling"},
                           ['FATAL:  could not access file "pg_wait_sampling": No such file '
                            "or directory"])  # fmt: skip
    err = _start_error(failure, ctx)  # type: ignore[arg-type]
    assert err.exit_code == 2 and "does not start" in err.render()
    assert "apt-get install postgresql-15-pg-wait-sampling" in err.render()
    other = StartFailure({"shared_preload_libraries": "nope"},
                         ['FATAL:  could not access file "nope": No such file or directory'])
    assert "apt-get" not in _start_error(other, ctx).render()  # type: ignore[arg-type]
