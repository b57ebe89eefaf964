"""Reads of files the server user decides the size of are bounded in count and total size
and read in chunks (host/bounded.py): a transaction-log folder with sparse planted files
(a terabyte of apparent size), more files than pgbench has threads, or ten thousand names
fails the trial with the reason, without reading what it refuses into root's memory; a
pgbench output a `\\shell` made sparse and huge is refused the same way, and its tail is
still quoted. The logs are real pgbench logs (tests/data/pgbench), the planting is done as
the server user."""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import DATA, SERVER_USER
from pgsweep.engine import measure, sides
from pgsweep.host import bounded, proc, safefs
from pgsweep.host.local import LOCAL
from pgsweep.host.proc import RunAs
from pgsweep.layers.context import TrialFailure
from pgsweep.store import TrialRecord

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the server user plants the files")

PG = DATA / "pgbench"
TRANSACTIONS = 2581  # pg15-tpcb-c2j2.out: what pgbench counted for these two logs
MOST = (TRANSACTIONS * 2 + 10_000) * measure.LOG_LINE_BYTES  # the bound measure() uses


def _as_server(*argv: str) -> None:
    subprocess.run(["runuser", "-u", SERVER_USER, "--", *argv], check=True, capture_output=True)


@pytest.fixture
def log_dir(open_dir: Path) -> Path:
    """A transaction-log folder as a trial has it: the server user's leaf, holding the two
    logs a real `pgbench -c 2 -j 2 -l` wrote."""
    d = safefs.leaf_dir(open_dir / "txlog", RunAs(SERVER_USER))
    for i, name in enumerate(("tx.4242", "tx.4242.1")):
        _as_server("cp", str(PG / f"pg15-tpcb-c2j2.txlog.{i}"), str(d / name))
    return d


def _uid() -> int:
    return RunAs(SERVER_USER).uid


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def test_the_real_logs_are_read(log_dir: Path) -> None:
    red = measure._reduce_log(log_dir, 3, _uid(), 2, MOST)
    assert red.lines == TRANSACTIONS


@pytest.mark.parametrize("apparent", ["1T", "3G", "3M"])
def test_a_sparse_planted_log_fails_the_trial_unread(log_dir: Path, apparent: str) -> None:
    """1 TiB: beyond any log; 3 GiB: below the 4 GiB any log may hold, far beyond what 2,581
    transactions fill; 3 MiB: still twice too much. None is read."""
    _as_server("truncate", "-s", apparent, str(log_dir / "tx.4242.1"))
    before = _peak_mib()
    with pytest.raises(TrialFailure, match="more than the transactions pgbench counted"):
        measure._reduce_log(log_dir, 3, _uid(), 2, MOST)
    assert _peak_mib() - before < 64  # nothing of it reached root's memory


def test_more_log_files_than_threads_fail_the_trial(log_dir: Path) -> None:
    _as_server("cp", str(log_dir / "tx.4242.1"), str(log_dir / "tx.4242.2"))
    with pytest.raises(TrialFailure, match=r"holds 3 log files, and pgbench's 2 thread"):
        measure._reduce_log(log_dir, 3, _uid(), 2, MOST)


def test_a_folder_of_many_names_is_not_listed_whole(log_dir: Path) -> None:
    _as_server("sh", "-c", f"cd {log_dir} && seq 1 10000 | xargs touch")
    with pytest.raises(TrialFailure, match="holds more than 66 entries"):
        measure._reduce_log(log_dir, 3, _uid(), 2, MOST)


def test_a_huge_sparse_pgbench_output_is_refused_and_its_tail_still_quoted(
    tmp_path: Path,
) -> None:
    """pgbench.out is root's file, but pgbench writes it and a custom script's `\\shell
    dd ... seek=100G` makes it 100 GiB (seen with real pgbench): refused by its size, the
    last lines still quoted in the failure."""
    out, err = tmp_path / "pgbench.out", tmp_path / "pgbench.err"
    with open(out, "wb") as f:
        f.write((PG / "pg15-tpcb-c2j2.out").read_bytes())
        f.seek(100 << 30)
        f.write(b"\nthe last line\n")
    shutil.copy(PG / "pg15-tpcb-progress.err", err)
    before = _peak_mib()
    res = proc.Result(["pgbench"], 0, out, err, 1.0)
    with pytest.raises(bounded.TooLarge, match=r"pgbench\.out holds 107,374,182,"):
        _ = res.stdout
    record = TrialRecord("t", 1, 1, "c01", "ok", "", "")
    budget = bounded.Budget(measure.OUTPUT_BUDGET, "a trial's pgbench output")
    with pytest.raises(TrialFailure, match=r"pgbench's output was not read: pgbench\.out holds"):
        here = sides.Side(LOCAL, tmp_path, [], None, (0, 0), False, 0, LOCAL)
        measure._outputs(res, "pgbench", budget, record, here)
    assert res.tail().endswith("the last line") and res.last_line().startswith("progress:")
    assert _peak_mib() - before < 64


def test_a_budget_holds_the_outputs_together(tmp_path: Path) -> None:
    files = []
    for name in ("a.out", "b.out", "c.out"):
        (tmp_path / name).write_bytes(b"x" * 400)
        files.append(tmp_path / name)
    budget = bounded.Budget(1000, "three outputs")
    assert budget.read(files[0]) == b"x" * 400 and budget.read(files[1]) == b"x" * 400
    with pytest.raises(bounded.TooLarge, match=r"c.out holds 400 bytes.*1,000 bytes in all"):
        budget.read(files[2])
