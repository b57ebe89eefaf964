"""The host facts a fleet compares before dispatch (collect.hostfacts): read from this
machine's own /proc and /sys and its PostgreSQL server, and compared between groups."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import requires_pg, write_experiment
from pgsweep.collect import hostfacts
from pgsweep.postgres import binaries as pgbin

SAME = {"kernel": "6.1.0-26-amd64", "cpu_model": "AMD EPYC 7B13", "microcode": "0xa0011d1",
        "usable_cpus": "2", "memory_gib": "24", "numa_nodes": "1",
        "postgres": "postgres (PostgreSQL) 15.18"}  # fmt: skip


@requires_pg
def test_this_machines_facts_are_read_from_the_kernel_and_its_server() -> None:
    facts = hostfacts.gather(pgbin.locate("auto", where="test"))
    assert set(facts) == set(hostfacts.FACTS)
    assert facts["kernel"] == os.uname().release
    assert facts["usable_cpus"] == str(len(os.sched_getaffinity(0)))
    kb = int(re.search(r"^MemTotal:\s*(\d+)", Path("/proc/meminfo").read_text(), re.M)[1])
    assert facts["memory_gib"] == str(round(kb / 2**20))
    assert facts["postgres"].startswith("postgres (PostgreSQL) ")


@requires_pg
def test_a_process_pinned_to_one_cpu_reports_one_usable_cpu(tmp_path: Path) -> None:
    """`pgsweep facts FILE` under taskset, as on a host whose sshd is pinned: the fact is
    what the run there may use, not what the machine has."""
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one usable CPU here")
    path = write_experiment(tmp_path, "[experiment]\nname = 'f'\n")
    argv = [sys.executable, "-m", "pgsweep.cli", "facts", str(path)]
    res = subprocess.run(["taskset", "-c", "0", *argv], capture_output=True, text=True,
                         check=False)  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert '"usable_cpus": "1"' in res.stdout


def test_groups_that_agree_show_no_difference() -> None:
    assert hostfacts.differences({"a": SAME, "b": dict(SAME)}, ()) == {}


def test_each_differing_fact_is_named_with_every_groups_value() -> None:
    other = SAME | {"usable_cpus": "1", "microcode": "0xa0011d5"}
    diff = hostfacts.differences({"alpha": SAME, "beta": other, "gamma": SAME}, ())
    assert list(diff) == ["microcode", "usable_cpus"]  # in FACTS order
    assert diff["usable_cpus"] == {"alpha": "2", "beta": "1", "gamma": "2"}
    assert hostfacts.describe(diff)[1] == "usable_cpus: alpha 2; beta 1; gamma 2"


def test_allowed_facts_are_not_compared_and_a_missing_fact_differs() -> None:
    other = SAME | {"microcode": "0xa0011d5"}
    assert hostfacts.differences({"a": SAME, "b": other}, ("microcode",)) == {}
    older = {k: v for k, v in SAME.items() if k != "numa_nodes"}  # an older pgsweep's facts
    diff = hostfacts.differences({"a": SAME, "b": older}, ())
    assert diff == {"numa_nodes": {"a": "1", "b": "(not reported)"}}


def test_each_groups_copy_of_another_roles_host_is_compared_with_the_others_copies() -> None:
    """A fleet group's client host (its facts as loadgen:FACT) against the other groups'
    client hosts, never against a server; allowed by the same fact name."""
    alpha = SAME | {f"loadgen:{k}": v for k, v in SAME.items()}
    beta = SAME | {f"loadgen:{k}": v for k, v in (SAME | {"usable_cpus": "1"}).items()}
    diff = hostfacts.differences({"alpha": alpha, "beta": beta}, ())
    assert diff == {"loadgen:usable_cpus": {"alpha": "2", "beta": "1"}}
    assert hostfacts.describe(diff) == ["loadgen:usable_cpus: alpha 2; beta 1"]
    assert hostfacts.differences({"alpha": alpha, "beta": beta}, ("usable_cpus",)) == {}
    # a group whose copy gave no facts differs from those whose did
    assert "loadgen:kernel" in hostfacts.differences({"alpha": alpha, "beta": SAME}, ())


def test_kernel_lists_are_counted_as_the_kernel_writes_them() -> None:
    assert hostfacts.count_list("0-3,8,10-11\n") == 7
    assert hostfacts.count_list("0") == 1 and hostfacts.count_list("") == 0
