"""The plan is a pure function of factors, costs, rounds and seed."""

from __future__ import annotations

from collections import Counter

import pytest

from pgsweep.layers.base import Cost
from pgsweep.plan import (
    Plan,
    PlanFactor,
    expand,
    make_plan,
    short_names,
)

FACTORS = [
    PlanFactor("server.shared_buffers", ("128MB", "1GB"), Cost.RESTART),
    PlanFactor("workload.clients", (1, 4, 8), Cost.NOTHING),
    PlanFactor("cluster.scale", (10, 50), Cost.CLUSTER),
]


def order(plan: Plan) -> list[str]:
    return [t.id for t in plan.trials]


def test_full_factorial_in_file_order() -> None:
    configs = expand(FACTORS)
    assert len(configs) == 12
    assert configs[0].levels == {
        "server.shared_buffers": "128MB",
        "workload.clients": 1,
        "cluster.scale": 10,
    }
    assert configs[1].levels["cluster.scale"] == 50  # last factor varies fastest
    assert len({tuple(c.levels.values()) for c in configs}) == 12
    assert {c.group for c in configs if c.levels["cluster.scale"] == 10} == {0}
    assert {c.group for c in configs if c.levels["cluster.scale"] == 50} == {1}


def test_same_seed_same_order_other_seed_other_order() -> None:
    a, b, c = (make_plan(FACTORS, 3, s) for s in (7, 7, 8))
    assert order(a) == order(b)
    assert order(a) != order(c)


def test_every_configuration_once_per_round() -> None:
    for rebuild in ("once", "per_round"):
        plan = make_plan(FACTORS, 4, 11, rebuild)
        assert len(plan.trials) == 48
        per_round = Counter((t.round, t.config) for t in plan.trials)
        assert set(per_round.values()) == {1}
        assert {r for r, _ in per_round} == {1, 2, 3, 4}
        assert len({t.id for t in plan.trials}) == 48
        assert [t.order for t in plan.trials] == list(range(1, 49))


def _group_runs(plan: Plan) -> list[int]:
    runs: list[int] = []
    for t in plan.trials:
        g = plan.config(t.config).group
        if not runs or runs[-1] != g:
            runs.append(g)
    return runs


def test_shuffle_is_not_the_factorial_order() -> None:
    plan = make_plan([PlanFactor("server.work_mem", tuple(range(10)), Cost.RELOAD)], 2, 1)
    first_round = [t.config for t in plan.trials if t.round == 1]
    assert first_round != sorted(first_round)


def test_short_names_drop_the_layer_unless_ambiguous() -> None:
    assert short_names(["server.work_mem", "workload.clients"]) == {
        "server.work_mem": "work_mem",
        "workload.clients": "clients",
    }
    assert short_names(["a.x", "b.x"]) == {"a.x": "a.x", "b.x": "b.x"}


def test_no_factors_is_one_configuration_repeated() -> None:
    plan = make_plan([], 3, 1)
    assert [t.id for t in plan.trials] == ["r1-c01", "r2-c01", "r3-c01"]


def test_reservations_are_interleaved_not_batched() -> None:
    """Resizing a huge page pool takes milliseconds here: huge page levels (RESERVE) are
    shuffled with everything else, never run as batches (a batch is a block in time: in
    the seed-2 run a slow stretch of the machine landed on the huge-page batches)."""
    factors = [
        PlanFactor("os.huge_pages", ("off", "2MB", "1GB"), Cost.RESERVE),
        PlanFactor("workload.clients", (1, 2, 4, 8), Cost.NOTHING),
    ]
    plan = make_plan(factors, 6, 3)
    runs = []
    for r in range(1, 7):
        trials = [t for t in plan.trials if t.round == r]
        assert len({t.config for t in trials}) == 12
        levels = [plan.config(t.config).levels["os.huge_pages"] for t in trials]
        runs.append(sum(1 for i, lv in enumerate(levels) if i == 0 or levels[i - 1] != lv))
    assert max(runs) > 3  # batched would be exactly 3 runs per round
    assert plan.grouped_factors() == [] and plan.keep_alive


def test_a_build_factor_is_a_whole_plot_factor_built_once_and_interleaved() -> None:
    """A new PostgreSQL build costs more than a cluster: its levels group configurations
    like a cluster factor, each build's cluster is built once, every round still holds
    every configuration, and the analysis treats it as whole-plot (between-build error)."""
    import json

    from pgsweep.analysis import WHOLE_PLOT_COSTS

    factors = [PlanFactor("build.wal_blocksize", (8, 4, 1), Cost.BUILD),
               PlanFactor("server.synchronous_commit", ("on", "off"), Cost.RELOAD)]  # fmt: skip
    plan = make_plan(factors, 4, 5)
    assert Cost.BUILD > Cost.CLUSTER
    assert plan.grouped_factors() == ["build.wal_blocksize"]
    assert plan.builds() == 3  # one cluster per build, kept across rounds
    assert plan.replicates("build.wal_blocksize") == 1
    for r in range(1, 5):
        assert sorted(t.config for t in plan.trials if t.round == r) == sorted(
            c.id for c in plan.configurations
        )
    stored = {f["name"]: f["cost"] for f in json.loads(plan.to_json())["factors"]}
    assert stored["build.wal_blocksize"] in WHOLE_PLOT_COSTS
    assert stored["server.synchronous_commit"] not in WHOLE_PLOT_COSTS


def test_instances_follow_the_rebuild_period() -> None:
    """rebuild_every = N: a new instance of every group every N rounds (the engine takes
    them down at each period's first round); 0 keeps one for the whole run; batches are
    rebuilt at every round whatever the period."""
    every2 = make_plan(FACTORS, 5, 1, rebuild=2)
    assert [every2.period(r) for r in range(1, 6)] == [0, 0, 1, 1, 2]
    assert every2.instances() == 3 and every2.replicated and every2.builds() == 2 * 3
    assert [r for r in range(1, 6) if every2.renews_at(r)] == [3, 5]
    assert every2.replicates("cluster.scale") == 3 and every2.replicates("workload.clients") == 5
    once = make_plan(FACTORS, 5, 1, rebuild="once")
    assert once.instances() == 1 and not once.replicated and not any(
        once.renews_at(r) for r in range(1, 6))  # fmt: skip
    batches = make_plan(FACTORS, 3, 1, rebuild="once", keep_alive=False)
    assert batches.instances() == 3 and [batches.renews_at(r) for r in (1, 2, 3)] == [
        False, True, True]  # fmt: skip
    assert '"rebuild_every": 2' in every2.to_json() and '"instances": 3' in every2.to_json()
    with pytest.raises(ValueError, match="rebuild"):
        make_plan(FACTORS, 3, 1, rebuild="sometimes")
