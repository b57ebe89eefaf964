"""workload.tool = "sysbench" at `plan`: a sysbench missing from the machine is named with
the package that provides it, a test the installed sysbench does not offer is refused, and
both exit 2 with nothing changed; the plan of a good file reads the tool's keys. The CLI
runs in-process, as tests/unit/test_bad_experiments.py does."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import requires_pg, write_experiment
from pgsweep import cli
from pgsweep.layers import workload_tools
from pgsweep.postgres import sysbench

pytestmark = requires_pg
BODY = """
    [experiment]
    name = "sb"
    seed = 1
    [workload]
    tool = "sysbench"
    test = "oltp_point_select"
    tables = 2
    table_size = 500
    clients = 2
    duration = "2s"
    """


def _plan(tmp_path: Path, body: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = cli.main(["plan", str(write_experiment(tmp_path, body))])
    return code, capsys.readouterr().err


def test_missing_sysbench_is_named_with_its_package(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(workload_tools, "program", lambda name="sysbench": None)
    code, err = _plan(tmp_path, BODY, capsys)
    assert code == 2, err
    assert "exp.toml:5: workload.tool" in err and "sysbench, which is not installed" in err
    assert "apt-get install sysbench" in err


def test_a_test_the_installed_sysbench_lacks_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    offered = tmp_path / "share"
    offered.mkdir()
    (offered / "oltp_read_only.lua").write_text("-- a test\n")
    monkeypatch.setattr(sysbench, "SCRIPTS", offered)
    code, err = _plan(tmp_path, BODY, capsys)
    assert code == 2, err
    assert "exp.toml:6: workload.test" in err and "does not offer 'oltp_point_select'" in err
    body = BODY.replace('"oltp_point_select"', '"oltp_read_only"')
    code, err = _plan(tmp_path, body, capsys)
    assert code == 0, err


def test_program_is_only_taken_from_the_system_folders(monkeypatch: pytest.MonkeyPatch,
                                                       tmp_path: Path) -> None:  # fmt: skip
    planted = tmp_path / "sysbench"
    planted.write_text("#!/bin/sh\n")
    planted.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin")
    found = workload_tools.program()
    assert found is None or found.parent != tmp_path  # root's PATH does not choose it
    assert found == Path("/usr/bin/sysbench")  # Debian's, installed by scripts/setup.sh


def test_the_logs_parse_check_copy_is_the_server_users_alone(tmp_path: Path) -> None:
    """plan has pgreplay parse the captured log as the server user from a copy: the copy
    is 0400 and the server user's, its folder root's and not listable (0711), so no other
    user reads the captured statements meanwhile. Seen from inside the check itself."""
    import os
    import stat
    from types import SimpleNamespace

    from pgsweep.host.proc import Result
    from pgsweep.layers import workload_replay

    seen: dict[str, tuple[int, int, int]] = {}

    class Watching:
        def run(self, argv: list[str], *, out: Path, **kw: object) -> Result:
            for name in (argv[-1], str(Path(argv[-1]).parent)):
                st = os.lstat(name)
                seen[name] = (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid)
            out.write_text("")
            return Result(argv, 0, out, out, 0.1)

    user = SimpleNamespace(uid=4242, gid=4343)
    ctx = SimpleNamespace(source=None, host=Watching(), user=user)
    log = tmp_path / "capture.csv"
    workload_replay._parse_check(ctx, log, "secret statements\n")  # type: ignore[arg-type]
    (copy, folder) = seen
    assert seen[copy] == (0o400, 4242, 4343)
    assert seen[folder][:2] == (0o711, os.geteuid())
    assert not Path(folder).exists()  # removed after the check
