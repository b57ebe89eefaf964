"""Whole plots replicated by default, on real clusters: a cluster-level factor (two data
sizes) over 2 rounds with the default `rebuild = "auto"` gets a new cluster for every
group in every round (4 clusters, each serving one round), the plan says so with its cost,
and the report judges the factor on the spread between those instances (whole-plot error,
2 instances per level). Kept small: scale 1 and 2, 1-second trials, no warm-up."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from conftest import pgsweep, requires_pg, run_shared, trials, write_experiment

EXPERIMENT = """
[experiment]
name = "replicated"
seed = 3
[workload]
script = "select-only"
clients = 1
jobs = 1
duration = "1s"
warmup = "0s"
[repeat]
rounds = 2
[factors]
cluster.scale = [1, 2]
"""

pytestmark = requires_pg


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return run_shared(tmp_path_factory, "replicated", EXPERIMENT)


def test_the_plan_shows_the_rebuild_schedule_and_its_cost(tmp_path: Path) -> None:
    res = pgsweep("plan", str(write_experiment(tmp_path, EXPERIMENT)))
    assert res.returncode == 0, res.stderr
    assert "2 groups x 2 instance(s) per level, built every round: 4 cluster builds" in res.stdout
    assert "cluster.scale: 2 instances per level" in res.stdout
    assert "main effect cluster.scale=2 vs 1:" in res.stdout and "whole-plot" in res.stdout


def test_every_round_has_new_clusters(results: Path) -> None:
    rows = trials(results)
    assert len(rows) == 4 and all(t["status"] == "ok" for t in rows), rows
    events = Counter(e for t in rows for e in json.loads(t["events_json"]))
    assert events["new-cluster"] == 4, events
    clusters = {json.loads(t["effective_json"])["cluster.data_directory"] for t in rows}
    assert len(clusters) == 4  # no cluster served two rounds


def test_the_report_judges_the_factor_on_its_instances(results: Path) -> None:
    res = pgsweep("report", str(results), "--format", "json")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["experiment"]["replicated"] and data["experiment"]["rebuild_every"] == 1
    (main,) = [e for e in data["effects"] if e["metric"] == "tps" and e["kind"] == "main"]
    assert (main["error"], main["replicates"], main["df"]) == ("whole-plot", 2, 1.0), main
    assert main["decision"] != "unreplicated"
