"""Who keeps a filesystem busy: a pool that cannot be destroyed names them (zfsfuse's
error), found by their working directory, open files or mappings under its mount point."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from pgsweep.host import areaprocs, zfsfuse


def test_a_process_whose_directory_or_file_is_under_the_point_is_named(tmp_path: Path) -> None:
    point, beside = tmp_path / "mnt", tmp_path / "mnt-other"
    point.mkdir()
    beside.mkdir()
    (point / "held").write_text("x")
    in_dir = subprocess.Popen(["sleep", "60"], cwd=point)
    with_file = subprocess.Popen(["sh", "-c", "exec 3<held; cd /; exec sleep 60"], cwd=point)
    elsewhere = subprocess.Popen(["sleep", "60"], cwd=beside)  # a name that only starts alike
    try:
        for _ in range(100):  # the shell has opened the file and left the folder
            if Path(f"/proc/{with_file.pid}/cmdline").read_bytes().startswith(b"sleep"):
                break
            time.sleep(0.02)
        found = areaprocs.users_of(point, None)
        assert in_dir.pid in found and with_file.pid in found
        assert elsewhere.pid not in found
        said = zfsfuse._holders(point)
        assert f"in use under {point} by" in said
        assert f"{in_dir.pid} (sleep, uid 0)" in said and str(elsewhere.pid) not in said
        assert zfsfuse._holders(beside / "nothing-here") == ""
        assert zfsfuse._holders(None) == ""
    finally:
        for p in (in_dir, with_file, elsewhere):
            p.kill()
            p.wait()
