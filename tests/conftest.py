"""Shared helpers: experiment files in a temporary folder, the CLI run as a real process,
and a check that nothing a run created is left on the machine."""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cliserver import CliServer

# pgsweep's output off a terminal is 160 columns unless COLUMNS says otherwise (a CI's
# runner or a test runner's plugin may set it): the tests read it as a user's log holds it.
os.environ.pop("COLUMNS", None)

ROOT = Path(__file__).resolve().parents[1]
# the account throwaway servers run as when pgsweep runs as root (scripts/setup.sh makes it)
SERVER_USER = "pgsweep"
DATA = Path(__file__).parent / "data"


def have_postgres() -> bool:
    return any(Path("/usr/lib/postgresql").glob("*/bin/pgbench"))


requires_pg = pytest.mark.skipif(
    not have_postgres(),
    reason="PostgreSQL server binaries missing (scripts/setup.sh installs them)",
)


TMPFS = Path("/dev/shm")

# Tests of mechanics (resume, signals, readers, shards, hosts, safety) run their pgbench
# rate-limited (`rate = 200` in their files, marked "conftest.MECHANICS"): a trial at full
# speed keeps both cores busy for its whole length, taking them from the tests running
# beside it, and these tests look at what pgsweep did, not at how fast the server went.
# Tests of verdicts, effects and counters run at full speed, unless their effect is far
# from the rate: test_report's, test_gate's and test_engine_real's commit delay keeps one
# side below 100/s against a rate of 500 (their full-speed trials took about a minute of
# CPU, stop 41).
MECHANICS = "rate = 200"


# A journaled ext4 of the suite's own on a loop device over a file in /var/tmp, mounted
# by scripts/test.sh (unset: no such disk, e.g. a suite run by hand or not as root)
SUITE_DISK = os.environ.get("PGSWEEP_SUITE_DISK")


def _work_base(module: object) -> str | None:
    """Where a module's runs make their work areas (PGSWEEP_WORK_BASE; None: the default
    /var/tmp). Tmpfs, unless the module sets WORK_ON_DISK: True (what a disk's syncs cost,
    device counters, filesystems on loop devices backed by a disk's file, links planted
    on a disk) the suite's disk, sticky and root's like /var/tmp; "var-tmp" (the os
    layer's I/O scheduler of the disk under /var/tmp, an unprivileged user's runs where
    they go by default, results folders in /tmp) the default itself. This machine's root
    filesystem is ext4 without a journal, whose inode allocator skips every inode deleted
    in the last few minutes (recently_deleted): creating a file there cost more CPU than
    anything PostgreSQL did (perf, stop 38), a cluster's copy (1,000 files) 1.1 CPU-s
    against 0.07 on the suite's disk (stop 42)."""
    on_disk = getattr(module, "WORK_ON_DISK", False)
    if on_disk == "var-tmp":
        return None
    if on_disk:
        return SUITE_DISK
    return str(TMPFS) if TMPFS.is_dir() else None


@pytest.fixture(scope="module", autouse=True)
def _work_areas_where_the_module_says(request: pytest.FixtureRequest) -> Iterator[None]:
    base = _work_base(request.module)
    if base is None:
        yield
        return
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PGSWEEP_WORK_BASE", base)
        yield


@pytest.fixture
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A registry of runs private to the test, so tests never see each other's runs."""
    d = tmp_path / "state"
    monkeypatch.setenv("PGSWEEP_STATE_DIR", str(d))
    return d


def open_base(module: str) -> str:
    """Where a folder open to the server user is made: where the module's work areas go (a
    results folder the server user can pass through holds its run's work area: see
    _work_base), or /tmp."""
    return _work_base(sys.modules[module]) or "/tmp"


@pytest.fixture
def open_dir(request: pytest.FixtureRequest) -> Iterator[Path]:
    """A root-owned folder the server user can pass through and read (pytest's own are
    closed to other users): for files the server user must reach, and results folders
    whose work area should live inside them, as on a user's machine."""
    d = Path(tempfile.mkdtemp(prefix="pgsweep-test-open-", dir=open_base(request.module.__name__)))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def write_experiment(folder: Path, body: str, name: str = "exp.toml") -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(body).lstrip())
    return path


_cli_server: CliServer | None = None


@pytest.fixture(scope="session", autouse=True)
def _cli_fork_server() -> Iterator[None]:
    """Started before any test looks at the machine's processes, so a test that compares
    every process before and after sees it in both. PGSWEEP_TEST_FORK=0 turns it off."""
    global _cli_server
    if os.environ.get("PGSWEEP_TEST_FORK", "1") != "0":
        _cli_server = CliServer()
    yield
    if _cli_server is not None:
        _cli_server.close()
        _cli_server = None


def pgsweep(*args: str, timeout: float = 600, **kw: Any) -> subprocess.CompletedProcess[str]:
    """The CLI as a process of its own: forked from the suite's fork server (tests/cliserver
    .py: the imports done once), or a fresh interpreter when a call needs what only
    subprocess.run offers (its keyword arguments)."""
    env = dict(os.environ, NO_COLOR="1", COLUMNS="200")
    if _cli_server is not None and not kw:
        return _cli_server.run(list(args), env, timeout)
    return subprocess.run(
        [sys.executable, "-m", "pgsweep.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        **kw,
    )


def pgsweep_start(*args: str, env: dict[str, str] | None = None, fresh: bool = False) -> Any:
    """The CLI started in the background, as subprocess.Popen(..., stdout=PIPE,
    stderr=PIPE, text=True) would (forked from the fork server when it runs): a test
    signals it, asks other commands beside it, then communicate()s. The environment is
    this one with NO_COLOR=1 unless `env` gives it whole. `fresh`: a new interpreter,
    whose command line is the command's (a forked child's is the fork server's):
    `pgsweep progress` and `stop` find a run by its command line."""
    env = dict(os.environ, NO_COLOR="1") if env is None else env
    if _cli_server is not None and not fresh:
        return _cli_server.start(list(args), env)
    return subprocess.Popen([sys.executable, "-m", "pgsweep.cli", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)  # fmt: skip


def run_shared(tmp_path_factory: pytest.TempPathFactory, name: str, body: str) -> Path:
    """Run an experiment once for a whole test module (a module-scoped fixture calls this):
    its own registry of runs, the results folder returned, a failed run fails the module."""
    if not have_postgres():
        pytest.skip("PostgreSQL server binaries missing")
    folder = tmp_path_factory.mktemp(name)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PGSWEEP_STATE_DIR", str(folder / "state"))
        path = write_experiment(folder, body)
        res = pgsweep("run", str(path), "--results", str(folder / "res"))
    assert res.returncode == 0, res.stderr + res.stdout
    return folder / "res"


def trials(results: Path) -> list[dict[str, Any]]:
    db = sqlite3.connect(results / "results.db")
    db.row_factory = sqlite3.Row
    rows = [dict(r) for r in db.execute("SELECT * FROM trial ORDER BY ord")]
    db.close()
    return rows


QUESTIONS = {b"-C", b"--version", b"-V", b"--describe-config", b"--check"}


def postmasters() -> dict[int, str]:
    """Every running postmaster: pid -> its data directory. A `postgres -C NAME -D DIR` is
    no server: pg_ctl runs one for a moment to find the data directory of a configuration
    directory, before it starts or stops the postmaster of that same -D. Nor are the
    questions that read a binary and exit (`--version`, `--describe-config`, `--check`):
    the suite's build answers `--version` as its compile ends, which with ccache warm is
    while the machine lane runs (stop 39)."""
    found = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            argv = (d / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if not argv[0].endswith(b"/postgres") or QUESTIONS & set(argv):
            continue
        found[int(d.name)] = argv[argv.index(b"-D") + 1].decode() if b"-D" in argv else "?"
    return found


def stop_and_restore(run: Any) -> None:
    """After a test that started `pgsweep run` in the background, on every path: a run still
    going is stopped as a user would (SIGTERM: it cleans up), killed only if it does not
    stop, then `pgsweep restore` takes down what a kill left. A failed test leaves no
    server, mount or namespace for the tests after it to find."""
    if run.poll() is None:
        run.send_signal(signal.SIGTERM)
        try:
            run.wait(timeout=120)
        except subprocess.TimeoutExpired:
            run.kill()
            run.wait(timeout=30)
    pgsweep("restore", timeout=300)


def leftovers(before_tmp: set[str], results: Path) -> list[str]:
    """What a finished run left behind: servers, sockets under /tmp, work areas. Only this
    run's: its socket folder and a work area outside the results folder carry a tag of
    the results folder's path (workarea.run_tag), so runs of other tests beside this one
    (scripts/test.sh runs the suite on both cores) are not taken for its leftovers."""
    from pgsweep.host.workarea import run_tag

    tag = run_tag(results)
    left = [
        f"postmaster {p} ({d})"
        for p, d in postmasters().items()
        if str(results) in d or f"-{tag}-" in d
    ]
    left += [f"/tmp/{n}" for n in set(os.listdir("/tmp")) - before_tmp
             if n.startswith(f"pgsweep-{tag}-")]  # fmt: skip
    left += [str(p) for p in results.glob(".pgsweep-work-*")]
    for base in (Path("/var/tmp"), TMPFS, *([Path(SUITE_DISK)] if SUITE_DISK else [])):
        left += [str(p) for p in base.glob(f"pgsweep-work-{results.name}-{tag}-*")]
    return left


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Integration modules first, then the unit tests; stable otherwise. (scripts/test.sh
    says which modules run beside which: see its lanes.)"""
    items.sort(key=lambda item: item.path.parent.name == "unit")
