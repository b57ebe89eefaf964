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
