"""pgsweep without root, as a DBA on a laptop or a CI runner uses it: the quickstart
experiment (shortened) runs end to end as an unprivileged user whose server runs as that
user, under that user's own folders, and leaves nothing behind; the factors that need root
are refused at `plan`, all named in one error."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import ROOT, requires_pg

WORK_ON_DISK = "var-tmp"  # see conftest: an unprivileged user's runs where they go by default

USER = "nobody"  # an account with no files of its own: whatever it owns after, the run made
SYSTEM_PYTHON = Path("/usr/bin/python3")

pytestmark = [
    requires_pg,
    pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs root"),
]


def _system_version() -> tuple[int, int]:
    out = subprocess.run([str(SYSTEM_PYTHON), "-c", "import sys; print(*sys.version_info[:2])"],
                         capture_output=True, text=True, check=True).stdout.split()  # fmt: skip
    return int(out[0]), int(out[1])


@pytest.fixture
def home() -> Iterator[Path]:
    """The user's home: a folder it owns, where its registry of runs and results go."""
    if not SYSTEM_PYTHON.exists() or sys.version_info[:2] != _system_version():
        pytest.skip("needs /usr/bin/python3 of the venv's Python version")
    # on tmpfs: the test is about running without root, not about a disk
    parent = Path(tempfile.mkdtemp(prefix="pgsweep-test-nonroot-", dir="/dev/shm"))
    parent.chmod(0o755)
    d = parent / "home"
    d.mkdir(mode=0o700)
    pw = pwd.getpwnam(USER)
    os.chown(d, pw.pw_uid, pw.pw_gid)
    yield d
    shutil.rmtree(parent)


def as_user(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """pgsweep run by the system python3 on the venv's packages (the venv's interpreter
    may sit where the user cannot reach it), with the user's own HOME and no root state."""
    site = Path(__import__("pydantic").__file__).parents[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PGSWEEP_", "XDG_"))}
    env |= {"HOME": str(home), "PYTHONPATH": f"{ROOT / 'src'}:{site}", "NO_COLOR": "1",
            "COLUMNS": "200", "NUMBA_CACHE_DIR": str(home / ".cache" / "numba")}  # fmt: skip
    # runuser sets HOME to the account's (/nonexistent): env puts the test's back
    cmd = ["runuser", "-u", USER, "--", "env", f"HOME={home}", str(SYSTEM_PYTHON), "-m",
           "pgsweep.cli", *args]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=home, timeout=600)


def _owned_by_user() -> set[str]:
    """Paths the user owns in the shared temporary folders, and its processes."""
    uid = pwd.getpwnam(USER).pw_uid
    out = set()
    for d in ("/tmp", "/var/tmp", "/dev/shm"):
        for p in Path(d).iterdir():
            try:  # another lane's file may go between the listing and its lstat (a
                if p.lstat().st_uid == uid:  # compiler's temporary cc*.o, in ci41)
                    out.add(str(p))
            except FileNotFoundError:
                continue
    for p in Path("/proc").iterdir():
        try:
            if p.name.isdigit() and p.stat().st_uid == uid:
                state = (p / "stat").read_text().rsplit(")", 1)[1].split()[0]
                if state != "Z":  # PID 1 here never reaps orphans; a zombie is gone
                    out.add(f"process {p.name}: {(p / 'cmdline').read_bytes()[:80]!r}")
        except OSError:
            pass
    return out


def _quickstart(home: Path) -> Path:
    """examples/quickstart.toml, shortened so the suite stays fast: same tables, factors
    and workload; 1 round of 1 s at scale 1."""
    text = (ROOT / "examples" / "quickstart.toml").read_text()
    for old, new in (('duration = "10s"', 'duration = "1s"'), ('warmup = "3s"', 'warmup = "0s"'),
                     ("scale = 10 ", "scale = 1 "), ("rounds = 3", "rounds = 1")):  # fmt: skip
        assert old in text, f"examples/quickstart.toml no longer says {old!r}"
        text = text.replace(old, new)
    path = home.parent / "quickstart.toml"
    path.write_text(text)
    path.chmod(0o644)
    return path


def test_the_quickstart_runs_as_an_unprivileged_user_and_leaves_nothing(home: Path) -> None:
    before = _owned_by_user()
    path = _quickstart(home)
    results = home / "results"
    res = as_user(home, "run", str(path), "--results", str(results))
    assert res.returncode == 0, res.stderr + res.stdout
    db = sqlite3.connect(results / "results.db")
    statuses = [s for (s,) in db.execute("SELECT status FROM trial")]
    db.close()
    assert statuses == ["ok"] * 4
    # the results and everything in them belong to the user, not to root
    uid = pwd.getpwnam(USER).pw_uid
    assert all(p.lstat().st_uid == uid for p in [results, *results.rglob("*")])
    rep = as_user(home, "report", str(results), "--format", "json")
    assert rep.returncode == 0, rep.stderr
    data = json.loads(rep.stdout)
    assert {c["id"] for c in data["configurations"]} == {"c01", "c02", "c03", "c04"}
    # its registry of runs sits in its own state folder, and is empty after a clean run
    registry = home / ".local" / "state" / "pgsweep" / "runs"
    assert registry.is_dir() and not [p for p in registry.iterdir() if p.suffix != ".lock"]
    assert _owned_by_user() == before


def test_root_only_keys_are_refused_at_plan_all_named_at_once(home: Path) -> None:
    path = home.parent / "exp.toml"
    path.write_text(
        '[experiment]\nname = "needs-root"\n[cluster]\nscale = 1\n'
        '[workload]\nduration = "2s"\n[os]\nmemory_limit = "1GiB"\n'
        '[storage]\ndevice = "loop:1GiB"\n'
        '[factors]\nstorage.filesystem = ["ext4", "xfs"]\nos.sysctl."vm.swappiness" = [10, 60]\n'
        'server.work_mem = ["4MB", "64MB"]\n'
    )
    path.chmod(0o644)
    before = _owned_by_user()
    res = as_user(home, "plan", str(path))
    assert res.returncode == 2, res.stderr + res.stdout
    assert "need root" in res.stderr and str(path) in res.stderr
    for key in ("os.memory_limit", "storage.device", "storage.filesystem",
                "os.sysctl.vm.swappiness"):  # fmt: skip
        assert key in res.stderr, key
    assert "server.work_mem" not in res.stderr  # a server factor is fine without root
    assert _owned_by_user() == before
