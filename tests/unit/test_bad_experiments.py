"""Bad experiment files (the corpus in tests/data/bad/, every layer): `pgsweep plan` exits
2 with a message naming the file, the key and its line, what was expected or how to fix
it, and nothing on the machine changes: mounts, loop devices, huge pages, kernel values,
cgroups, processes and pgsweep's temporary folders are compared before and after.

Each file says what it expects in its leading comments: `# expect: TEXT` (in the message),
`# expect-line: N`, `# args: ...` (extra command-line arguments). The CLI runs in-process:
server settings are still checked by the real server binary."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import pytest

from conftest import DATA, pgsweep, postmasters, requires_pg, write_experiment
from pgsweep import cli

CORPUS = sorted((DATA / "bad").glob("*.toml"))
KERNEL_FILES = [
    *(f"/proc/sys/{name}" for name in (
        "vm/swappiness", "vm/dirty_ratio", "vm/dirty_bytes", "vm/max_map_count",
        "vm/vfs_cache_pressure", "vm/overcommit_memory", "vm/overcommit_ratio",
        "fs/file-max", "fs/nr_open", "fs/aio-max-nr", "kernel/shmmni", "kernel/sem",
        "net/ipv4/tcp_mem", "net/ipv4/tcp_rmem", "net/core/somaxconn",
        "kernel/sched_deadline_period_max_us",
    )),
    "/sys/kernel/mm/transparent_hugepage/enabled",
    "/sys/kernel/mm/transparent_hugepage/defrag",
    "/sys/kernel/mm/transparent_hugepage/shmem_enabled",
    *map(str, Path("/sys/kernel/mm/hugepages").glob("*/nr_hugepages")),
    *map(str, Path("/sys/class/block").glob("*/queue/scheduler")),
]


def machine() -> dict[str, object]:
    """What a bad file must never change."""

    def read(path: str) -> str:
        try:
            return Path(path).read_text()
        except OSError:
            return "(unreadable)"

    return {
        "mounts": read("/proc/self/mounts"),
        "loops": sorted(p.name for p in Path("/sys/class/block").glob("loop*/loop")),
        "kernel": {f: read(f) for f in KERNEL_FILES},
        "cgroups": sorted(p.name for p in Path("/sys/fs/cgroup/memory").glob("pgsweep-*")),
        "postmasters": sorted(postmasters()),
        "tmp": sorted(n for n in os.listdir("/tmp") if n.startswith("pgsweep-")),
        "var-tmp": sorted(n for n in os.listdir("/var/tmp") if n.startswith("pgsweep-")),
    }


def expectations(path: Path) -> tuple[list[str], int | None, list[str]]:
    fragments, line, args = [], None, []
    for text in path.read_text().splitlines():
        if text.startswith("# expect: "):
            fragments.append(text.removeprefix("# expect: "))
        elif text.startswith("# expect-line: "):
            line = int(text.removeprefix("# expect-line: "))
        elif text.startswith("# args: "):
            args = shlex.split(text.removeprefix("# args: "))
    return fragments, line, args


def test_the_corpus_is_large_and_covers_every_layer() -> None:
    assert len(CORPUS) >= 240
    text = "".join(p.read_text() for p in CORPUS)
    for table in ("[storage", "[cluster]", "[os", "[server]", "[workload]", "[repeat]",
                  "[report]", "[postgres]", "storage.zfs", "[factors]", "[build]",
                  "[replication]", "[replication.standby]", "[storage.wal]"):  # fmt: skip
        assert table in text, table
    # every key added since the first safety pass, in the file or as a factor
    for key in ("source", "ref", "blocksize", "wal_blocksize", "segsize", "optimize",
                "configure", "cflags", "allow_cassert", "debug", "pgbench", "standbys",
                "mode", "sync_standbys", "network", "bandwidth", "max_lag", "delay",
                "standby_script", "standby_clients", "min_rounds", "max_rounds", "decide",
                "precision", "alpha", "margin", "baseline", "rate", "latency_limit",
                "max_tries", "tool", "test", "tables", "table_size"):  # fmt: skip
        assert f"\n{key} = " in text or f".{key} = " in text, key


@requires_pg
@pytest.mark.parametrize("path", CORPUS, ids=[p.stem for p in CORPUS])
def test_bad_file_exits_2_naming_the_key(
    path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(path.parent)
    monkeypatch.setenv("NO_COLOR", "1")
    fragments, line, args = expectations(path)
    assert fragments, f"{path.name} states no expectation"
    before = machine()
    code = cli.main(["plan", str(path), *args])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith("error: "), err
    assert str(path) in err
    for fragment in fragments:
        assert fragment in err, f"{fragment!r} not in {err!r}"
    if line is not None:
        assert f"{path}:{line}:" in err, err
    assert "fix:" in err or "expected:" in err or "not valid TOML" in err, err
    assert machine() == before


@requires_pg
def test_run_with_bad_file_creates_nothing(tmp_path: Path) -> None:
    path = write_experiment(tmp_path, "[experiment]\nname = 'bad'\n[factors]\n"
                            "server.wal_level = ['replica', 'fast']\n")  # fmt: skip
    results = tmp_path / "results"
    res = pgsweep("run", str(path), "--results", str(results))
    assert res.returncode == 2
    assert "factors.server.wal_level" in res.stderr
    assert not results.exists()


def test_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["plan", str(tmp_path / "none.toml")]) == 2
    assert "cannot read the experiment file" in capsys.readouterr().err


@requires_pg
def test_storage_device_given_only_as_a_factor_is_accepted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_experiment(tmp_path, """
        [experiment]
        name = "devices"
        seed = 1
        [storage]
        filesystem = "ext4"
        [factors]
        storage.device = ["loop:1GiB", "loop:2GiB"]
        """)  # fmt: skip
    code = cli.main(["plan", str(path), "--results", str(tmp_path / "res")])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "loop:2GiB" in out.out


@requires_pg
def test_two_scripts_with_one_name_stay_apart(open_dir: Path) -> None:
    tmp_path = open_dir
    from pgsweep import spec
    from pgsweep.host.local import LOCAL
    from pgsweep.layers.context import RunContext

    for sub, sql in (("a", "SELECT 1;\n"), ("b", "SELECT 2;\n")):
        (tmp_path / sub).mkdir()
        (tmp_path / sub / "point.sql").write_text(sql)
    tmp_path.chmod(0o755)
    path = write_experiment(tmp_path, """
        [experiment]
        name = "scripts"
        [factors]
        workload.script = ["a/point.sql", "b/point.sql"]
        """)  # fmt: skip
    exp = spec.load(path)
    layer = exp.layer("workload")
    work = tmp_path / "work"
    work.mkdir()
    run = RunContext(exp.binaries, exp.user, work, work, tmp_path, host=LOCAL)
    layer.start_run(run)
    assert not vars(layer).get("frozen")  # the copies are the run's, not the layer's
    a, b = (run.state["workload"][s] for s in ("a/point.sql", "b/point.sql"))
    assert a != b and a.read_text() == "SELECT 1;\n" and b.read_text() == "SELECT 2;\n"
    assert a.stat().st_mode & 0o777 == 0o400  # the server user's to read, nobody else's
    (tmp_path / "a" / "point.sql").write_text("DROP TABLE x;\n")  # changed after validation
    settings = exp.settings({"workload.script": "a/point.sql"})["workload"]
    assert not settings.writes  # judged on the text validated, not the file as it is now
    layer.start_run(RunContext(exp.binaries, exp.user, work, work, tmp_path, host=LOCAL))
    assert a.read_text() == "SELECT 1;\n"


@requires_pg
def test_a_script_the_server_user_cannot_read_is_refused(
    open_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tmp_path = open_dir
    if os.geteuid() != 0:
        pytest.skip("needs root: the server user is another account")
    tmp_path.chmod(0o755)
    secret = tmp_path / "secret.sql"
    secret.write_text("SELECT 'root only';\n")
    secret.chmod(0o600)
    path = write_experiment(
        tmp_path, "[experiment]\nname = 'x'\n[workload]\nscript = 'secret.sql'\n"
    )
    assert cli.main(["plan", str(path)]) == 2
    assert "not readable by the server user" in capsys.readouterr().err
