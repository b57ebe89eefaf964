"""The one subprocess helper: exit codes come back, a timeout stops the whole group (the
grandchild too). Both go through the pidfd wait."""

from __future__ import annotations

import time
from pathlib import Path

from pgsweep.host import proc


def test_exit_code_and_output_come_back(tmp_path: Path) -> None:
    res = proc.run(["sh", "-c", "echo out; echo err >&2; exit 3"], out=tmp_path / "o")
    assert res.returncode == 3 and not res.ok and not res.timed_out
    assert res.stdout == "out\n" and res.stderr == "err\n"


def test_a_timeout_stops_the_whole_group(tmp_path: Path) -> None:
    pidfile = tmp_path / "grandchild"
    script = f"sleep 60 & echo $! > {pidfile}; wait"
    res = proc.run(["sh", "-c", script], out=tmp_path / "o", timeout=0.5)
    assert res.timed_out and not res.ok
    grandchild = int(pidfile.read_text())
    for _ in range(50):  # SIGTERM to the group: the backgrounded sleep goes too
        if proc.gone(grandchild):
            break
        time.sleep(0.1)
    assert proc.gone(grandchild)
