"""The line every report opens with about the workload: the tool, its version, its test or
script, and the metrics its verdicts judged (issue 27)."""

from __future__ import annotations

from pgsweep.analysis.workload import workload_line


def test_names_the_tool_and_what_was_judged() -> None:
    pgbench = {"tool": "pgbench", "versions": ["15.18"], "what": "tpcb-like", "judged": ["TPS"]}
    assert workload_line({"workload": pgbench}) == (
        "workload: pgbench 15.18, tpcb-like; verdicts on TPS (transactions/s)")
    sysbench = {"tool": "sysbench", "versions": ["1.0.20"], "what": "per configuration",
                "judged": ["TPS", "QPS"]}  # fmt: skip
    assert workload_line({"workload": sysbench}) == (
        "workload: sysbench 1.0.20, per configuration; verdicts on TPS (transactions/s) and "
        "QPS (queries/s)")


def test_two_versions_in_one_run_are_both_named() -> None:
    w = {"tool": "pgbench", "versions": ["15.18", "17.2"], "what": "x.sql", "judged": ["TPS"]}
    assert "pgbench 15.18 (versions 15.18, 17.2), x.sql" in workload_line({"workload": w})


def test_a_folder_from_before_the_field_has_no_line() -> None:
    assert workload_line({"name": "old"}) == ""
