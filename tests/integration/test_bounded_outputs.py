"""A real run whose custom script makes pgbench's own output a 100 GiB sparse file (`\\shell`
runs `dd ... seek=100G` on pgbench's stdout, as the server user): the trial fails with the
reason, pgsweep reads none of it into memory, and the run ends cleanly (exit 3)."""

from __future__ import annotations

import os
from pathlib import Path

from conftest import leftovers, pgsweep, requires_pg, trials, write_experiment

SCRIPT = "\\shell sh -c 'dd if=/dev/zero bs=1 count=1 seek=100G 2>/dev/null'\nSELECT 1;\n"


@requires_pg
def test_a_script_that_inflates_pgbench_output_fails_its_trial(
    open_dir: Path, state_dir: Path
) -> None:
    (open_dir / "inflate.sql").write_text(SCRIPT)
    path = write_experiment(open_dir, """
        [experiment]
        name = "inflate"
        seed = 1
        [cluster]
        scale = 1
        [workload]
        script = "inflate.sql"
        duration = "1s"
        rate = 200  # conftest.MECHANICS
        warmup = "0s"
        [repeat]
        rounds = 1
        """)  # fmt: skip
    tmp_before = set(os.listdir("/tmp"))
    res = pgsweep("run", str(path), "--results", str(open_dir / "res"))
    assert res.returncode == 3, res.stderr + res.stdout
    (row,) = trials(open_dir / "res")
    assert row["status"] == "failed"
    assert "pgbench's output was not read: pgbench.out holds" in row["reason"], row["reason"]
    assert "more than pgsweep reads" in row["reason"]
    assert not leftovers(tmp_before, open_dir / "res")
