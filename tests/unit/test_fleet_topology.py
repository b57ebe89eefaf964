"""A fleet group as a copy of the topology (issue 28): which inventory host of a group runs
the server, how its shard reaches the group's copy of each other role's host (`run --host
NAME=DEST`), and the inventories refused (exit 2) before anything is dispatched; the shard
task's argv with those options; and `--host` itself refusing what ssh could read as an
option. The real fleet of such groups is in tests/integration/test_fleet_hosts.py."""

from __future__ import annotations

from pathlib import Path

import jinja2
import pytest

from conftest import pgsweep, write_experiment
from pgsweep.engine import fleet
from pgsweep.engine.fleet_topology import copy_of
from pgsweep.errors import PgsweepError
from pgsweep.host.remote import Target
from pgsweep.spec.hosts import Topology, redirect

INV = Path("/etc/inv.ini")
TOPO = Topology({"loadgen": Target("loadgen", "root@10.9.9.9"),
                 "replica": Target("replica", "root@10.9.9.8")},
                client="loadgen", standbys=("replica",))  # fmt: skip


def test_the_host_without_a_role_is_the_server_and_each_copy_is_reached_by_its_variables() -> None:
    hv = {"db1": {"ansible_host": "10.0.0.1"},
          "lg1": {"pgsweep_host": "loadgen", "ansible_host": "10.0.0.11", "ansible_user": "ops",
                  "ansible_port": 2222},
          "r1": {"pgsweep_host": "replica", "pgsweep_ssh": "root@r1.internal"}}  # fmt: skip
    group = copy_of(TOPO, "alpha", ["lg1", "db1", "r1"], hv, INV)
    assert group.server == "db1"
    assert group.host_options() == ["--host", "loadgen=ssh://ops@10.0.0.11:2222",
                                    "--host", "replica=root@r1.internal"]  # fmt: skip
    assert group.members() == {"db1": "", "lg1": "loadgen", "r1": "replica"}
    lg = {"pgsweep_host": "loadgen", "ansible_host": "10.0.0.12", "ansible_port": 22}
    group = copy_of(Topology({"loadgen": TOPO.hosts["loadgen"]}, client="loadgen"), "b",
                    ["db2", "lg2"], {"lg2": lg}, INV)  # fmt: skip
    assert group.copies == {"loadgen": ("lg2", "root@10.0.0.12")}  # root, port 22 left out


@pytest.mark.parametrize("members,hv,words", [
    (["db1", "db2"], {}, "2 hosts without pgsweep_host"),
    (["lg1"], {"lg1": {"pgsweep_host": "loadgen"}}, "0 hosts without pgsweep_host"),
    (["db1", "x"], {"x": {"pgsweep_host": "nosuch"}}, "'nosuch' names no host"),
    (["db1", "lg1"], {"lg1": {"pgsweep_host": "loadgen"}}, "no copy of host 'replica'"),
    (["db1", "a", "b", "r"], {"a": {"pgsweep_host": "loadgen"}, "b": {"pgsweep_host": "loadgen"},
                              "r": {"pgsweep_host": "replica"}}, "2 hosts for 'loadgen'"),
    (["db1", "lg", "r"], {"lg": {"pgsweep_host": "loadgen", "pgsweep_ssh": "-oProxyCommand=x"},
                          "r": {"pgsweep_host": "replica"}}, "not a destination ssh takes"),
    (["db1", "lg", "r"], {"lg": {"pgsweep_host": "loadgen", "ansible_host": "a b"},
                          "r": {"pgsweep_host": "replica"}}, "not a destination ssh takes"),
    (["db[1:2]", "lg", "r"], {"lg": {"pgsweep_host": "loadgen"},
                              "r": {"pgsweep_host": "replica"}}, "cannot be named in a play"),
])  # fmt: skip
def test_a_group_that_is_not_one_copy_of_the_topology_is_refused(
    members: list[str], hv: dict[str, dict[str, object]], words: str
) -> None:
    with pytest.raises(PgsweepError) as e:
        copy_of(TOPO, "alpha", members, hv, INV)
    assert words in str(e.value) and e.value.exit_code == 2 and str(INV) in str(e.value)


def test_without_other_roles_a_group_is_its_one_server_host() -> None:
    alone = copy_of(Topology(), "g", ["db1"], {}, INV)
    assert alone.server == "db1" and alone.copies == {} and alone.host_options() == []
    with pytest.raises(PgsweepError, match="names no host the file places a role on"):
        copy_of(Topology(), "g", ["db1", "lg"], {"lg": {"pgsweep_host": "loadgen"}}, INV)


def test_the_shard_task_adds_the_groups_host_options_to_its_argv() -> None:
    (play,) = fleet._playbook(["db1", "db2"], Path("/f"))
    assert play["hosts"] == ["db1", "db2"]  # a list: no host name is read as a pattern
    (task,) = [t for t in play["tasks"] if t["name"] == "shard"]
    expr = task["command"]["argv"]
    assert expr.startswith("{{ ") and expr.endswith(" }}")  # one expression: a list
    argv = jinja2.Environment().compile_expression(expr[3:-3])(
        pgsweep_bin="/opt/p", work={"path": "/var/tmp/w 1"}, inventory_hostname="db2",
        pgsweep_shards={"db2": {"k": 2, "group": "beta",
                                "hosts": ["--host", "loadgen=root@10.0.0.12"]}})  # fmt: skip
    assert argv == ["/opt/p", "run", "/var/tmp/w 1/experiment.toml", "--shard", "2", "--group",
                    "beta", "--results", "/var/tmp/w 1/results", "--host",
                    "loadgen=root@10.0.0.12"]  # fmt: skip


def test_redirect_changes_only_the_named_hosts_destination() -> None:
    topo = redirect(TOPO, ["loadgen=root@10.1.1.1"])
    assert topo.hosts["loadgen"].ssh == "root@10.1.1.1"
    assert topo.hosts["replica"] == TOPO.hosts["replica"] and topo.client == "loadgen"
    for bad, words in (("loadgen=-oProxyCommand=touch", "not a destination"),
                       ("loadgen=a b", "not a destination"), ("nosuch=root@h", "names no host"),
                       ("loadgen", "names no host")):  # fmt: skip
        with pytest.raises(PgsweepError, match=words):
            redirect(TOPO, [bad])


def test_run_host_with_a_hostile_destination_is_exit_2_and_runs_nothing(tmp_path: Path) -> None:
    path = write_experiment(tmp_path, """
    [experiment]
    name = "h"
    [hosts.loadgen]
    ssh = "root@10.9.9.9"
    [roles]
    client = "loadgen"
    """)
    res = pgsweep("run", str(path), "--host", "loadgen=-oProxyCommand=touch /tmp/pwned",
                  "--results", str(tmp_path / "r"))  # fmt: skip
    assert res.returncode == 2, res.stderr
    assert "--host" in res.stderr and "not a destination ssh takes" in res.stderr
    assert not (tmp_path / "r").exists() and not Path("/tmp/pwned").exists()


def test_a_host_named_like_a_group_is_refused_it_would_stand_for_the_whole_group() -> None:
    for name in ("beta", "all", "ungrouped"):
        with pytest.raises(PgsweepError, match="cannot be named in a play"):
            copy_of(Topology(), "alpha", [name], {}, INV, groups=["alpha", "beta"])
    assert copy_of(Topology(), "alpha", ["db1"], {}, INV, groups=["alpha", "beta"]).server == "db1"


def test_a_hosts_facts_keep_only_the_facts_as_text() -> None:
    from pgsweep.collect.hostfacts import only_facts

    assert only_facts({"kernel": "6.1", "loadgen:kernel": "6.1", "usable_cpus": 2}) == {
        "kernel": "6.1"}  # no key of its own choosing, no other shape
    assert only_facts(["kernel", "6.1"]) == {} and only_facts(None) == {}


def test_host_options_are_checked_before_anything_is_read() -> None:
    from pgsweep.spec.hosts import check_host_options

    check_host_options(["loadgen=root@10.0.0.2", "replica=root@10.0.0.3"], fleet=False)
    for pairs, many, words in ((["loadgen=root@h"], True, "--inventory"),
                               (["loadgen=root@a", "loadgen=root@b"], False, "2 times"),
                               (["Loadgen=root@a"], False, "not NAME=DESTINATION"),
                               (["loadgen=-oProxyCommand=x"], False, "not a destination")):
        with pytest.raises(PgsweepError, match=words) as e:
            check_host_options(pairs, many)
        assert e.value.exit_code == 2
