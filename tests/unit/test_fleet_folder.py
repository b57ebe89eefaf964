"""The fleet folder's ledger (engine.fleet_folder): what `run --inventory --resume` reads
back, and what it refuses before it contacts any host. The real dispatch and resume are
in tests/integration/test_fleet_hosts.py."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest

from conftest import write_experiment
from pgsweep import spec
from pgsweep.engine import fleet_folder
from pgsweep.errors import PgsweepError

BODY = """
[experiment]
name = "ledger"
seed = 3
[factors]
server.synchronous_commit = ["on", "off"]
[repeat]
rounds = 6
"""


@pytest.fixture(scope="module")
def exp(tmp_path_factory: pytest.TempPathFactory) -> spec.Experiment:
    """Loaded once: loading looks at the installed PostgreSQL (a second or two)."""
    return spec.load(write_experiment(tmp_path_factory.mktemp("ledger"), BODY))


def _fleet(tmp_path: Path, exp: spec.Experiment) -> tuple[spec.Experiment, Path]:
    target = fleet_folder.new_target(tmp_path / "fleet")
    out = target.path
    ledger = fleet_folder.start(target, exp, ["alpha", "beta", "gamma"])
    ledger.status = {"alpha": "ok", "beta": "ok", "gamma": "fleet: UNREACHABLE"}
    ledger.facts = {"alpha": {"kernel": "6.1"}, "beta": {"kernel": "6.1"}}
    fleet_folder.save(out, ledger)
    return exp, out


def test_the_ledger_reads_back_with_the_missing_group_and_its_shard(
    tmp_path: Path, exp: spec.Experiment
) -> None:
    exp, out = _fleet(tmp_path, exp)
    assert os.stat(out).st_mode & 0o777 == 0o700
    assert os.stat(out / "fleet.json").st_mode & 0o777 == 0o600
    folder, ledger = fleet_folder.reopen(out, exp, [])
    assert folder == out and ledger.missing() == ["gamma"]
    assert [ledger.shard(g) for g in ledger.groups] == ["1/3", "2/3", "3/3"]
    assert ledger.facts["beta"] == {"kernel": "6.1"}
    # no shard came back yet: nothing to merge, and the folder is left as it was
    ledger.status = {}
    assert fleet_folder.remerge(out, ledger) is None
    assert sorted(p.name for p in out.iterdir()) == ["fleet.json", "shards"]


def test_a_new_fleet_refuses_a_folder_that_holds_anything(
    tmp_path: Path, exp: spec.Experiment
) -> None:
    _, out = _fleet(tmp_path, exp)
    with pytest.raises(PgsweepError, match="not a new or empty folder") as e:
        fleet_folder.new_target(out)
    assert "--resume" in str(e.value.fix)


@pytest.mark.parametrize("groups", [["alpha", "../../etc"], ["alpha", "{{ lookup('pipe', 'id') }}"],
                                    "ab", ["alpha", "alpha"], ["alpha", 7]])
def test_a_ledger_naming_no_usable_groups_is_damaged(
    tmp_path: Path, exp: spec.Experiment, groups: object
) -> None:
    """Group names become folder names and host patterns: a ledger's must be names
    Ansible calls valid, two or more, each once."""
    _, out = _fleet(tmp_path, exp)
    raw = json.loads((out / "fleet.json").read_text())
    (out / "fleet.json").write_text(json.dumps(raw | {"groups": groups}))
    with pytest.raises(PgsweepError, match=r"fleet\.json is damaged"):
        fleet_folder.reopen(out, exp, [])
    with pytest.raises(ValueError, match="is not a group name"):
        fleet_folder.shard_folder(out, "../x")


def test_the_work_folders_a_lost_host_left_read_back(tmp_path: Path, exp: spec.Experiment
                                                     ) -> None:  # fmt: skip
    _, out = _fleet(tmp_path, exp)
    raw = json.loads((out / "fleet.json").read_text())
    (out / "fleet.json").write_text(json.dumps(raw | {"left": {"gamma": "/tmp/pgsweep-fleet-x1_"}}))
    assert fleet_folder.reopen(out, exp, [])[1].left == {"gamma": "/tmp/pgsweep-fleet-x1_"}
    (out / "fleet.json").write_text(json.dumps(raw))  # a ledger from before the field
    assert fleet_folder.reopen(out, exp, [])[1].left == {}


@pytest.mark.parametrize("path", [
    "/", "/etc", "tmp/pgsweep-fleet-x", "/tmp/pgsweep-fleet-x/../../etc",
    "/tmp/../pgsweep-fleet-x", "/tmp/pgsweep-fleet-{{ lookup('pipe', 'id') }}",
    "/tmp/pgsweep-fleet-x y", "/tmp/pgsweep-fleet-", "/tmp/pgsweep-fleet-x\n/etc", 7,
])  # fmt: skip
def test_a_ledger_naming_another_folder_to_clear_is_damaged(
    tmp_path: Path, exp: spec.Experiment, path: object
) -> None:
    """The next dispatch stops and removes, as root on that host, the folder a lost host
    left: only a work folder a dispatch makes is ever named there, never a template."""
    _, out = _fleet(tmp_path, exp)
    raw = json.loads((out / "fleet.json").read_text())
    (out / "fleet.json").write_text(json.dumps(raw | {"left": {"gamma": path}}))
    with pytest.raises(PgsweepError, match=r"fleet\.json is damaged"):
        fleet_folder.reopen(out, exp, [])


def test_a_folder_that_changed_between_check_and_start_is_refused(
    tmp_path: Path, exp: spec.Experiment
) -> None:
    """The facts playbook runs between the check and the making: a folder (or a link)
    that appeared there meanwhile is not adopted."""
    target = fleet_folder.new_target(tmp_path / "late")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "late").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(PgsweepError, match="changed while the hosts' facts were asked"):
        fleet_folder.start(target, exp, ["alpha", "beta"])
    assert not list((tmp_path / "elsewhere").iterdir())
    empty = tmp_path / "empty"
    empty.mkdir()
    target = fleet_folder.new_target(empty)
    os.chown(empty, 65534, 65534)  # given to another user meanwhile (nobody)
    with pytest.raises(PgsweepError, match="changed while"):
        fleet_folder.start(target, exp, ["alpha", "beta"])
    with pytest.raises(PgsweepError, match="braces"):
        fleet_folder.new_target(tmp_path / "{{ x }}")


@pytest.mark.parametrize("change", ["file", "groups", "damaged", "none", "link"])
def test_resume_refuses_what_is_not_this_fleet(
    tmp_path: Path, exp: spec.Experiment, change: str
) -> None:
    exp, out = _fleet(tmp_path, exp)
    wanted: list[str] = []
    expect = {"file": "experiment file changed since this fleet started",
              "groups": "this fleet runs the groups alpha, beta, gamma, not alpha, beta",
              "damaged": "fleet.json is damaged", "none": "holds no fleet.json",
              "link": "symbolic link"}[change]  # fmt: skip
    if change == "file":  # the same file but for its text
        exp = replace(exp, source=replace(exp.source, text=exp.source.text + "# changed\n"))
    elif change == "groups":
        wanted = ["alpha", "beta"]
    elif change == "damaged":
        (out / "fleet.json").write_text(json.dumps({"groups": ["alpha"]}))
    elif change == "none":
        (out / "fleet.json").unlink()
    else:  # another file planted where the ledger was: never followed
        (tmp_path / "elsewhere.json").write_text((out / "fleet.json").read_text())
        (out / "fleet.json").unlink()
        (out / "fleet.json").symlink_to(tmp_path / "elsewhere.json")
    with pytest.raises(PgsweepError, match=expect):
        fleet_folder.reopen(out, exp, wanted)


def test_a_second_pgsweep_on_a_locked_fleet_folder_is_refused(tmp_path: Path) -> None:
    """A `--resume` while the fleet still runs would dispatch its groups twice: the folder
    is held (flock on fleet.lock, which names the holder's pid) and the second is refused
    with exit 2; once the first lets go, the folder can be taken again."""
    folder = tmp_path / "fleet"
    folder.mkdir(mode=0o700)
    with fleet_folder.locked(folder):
        assert (folder / fleet_folder.LOCK).read_text() == f"{os.getpid()}\n"
        with pytest.raises(PgsweepError) as refused, fleet_folder.locked(folder):
            pass
        assert f"another pgsweep (pid {os.getpid()}) is running this fleet" in str(
            refused.value.render())  # fmt: skip
        assert refused.value.exit_code == 2
    with fleet_folder.locked(folder):  # released: taken again
        pass


def test_the_lock_is_not_taken_through_a_planted_link(tmp_path: Path) -> None:
    folder = tmp_path / "fleet"
    folder.mkdir(mode=0o700)
    target = tmp_path / "elsewhere"
    (folder / fleet_folder.LOCK).symlink_to(target)
    with pytest.raises(OSError), fleet_folder.locked(folder):
        pass
    assert not target.exists()  # nothing made or written through the link
