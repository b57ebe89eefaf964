"""Shards: the plan gives each host group complete rounds, the same plan on every machine."""

from __future__ import annotations

import itertools

import pytest

from pgsweep.core import Cost
from pgsweep.errors import PgsweepError
from pgsweep.plan import (
    PlanFactor,
    Shard,
    fleet_periods,
    make_plan,
    parse_spans,
    round_spans,
    shard_rounds,
)

CHEAP = PlanFactor("server.work_mem", ("4MB", "64MB", "256MB"), Cost.RELOAD)
CLUSTER = PlanFactor("cluster.scale", (1, 10), Cost.CLUSTER)


@pytest.mark.parametrize("rounds,n", [(r, n) for r in range(1, 13) for n in range(1, r + 1)])
def test_every_round_once_contiguous_sizes_within_one(rounds: int, n: int) -> None:
    blocks = shard_rounds(rounds, n)
    assert len(blocks) == n
    assert list(itertools.chain(*blocks)) == list(range(1, rounds + 1))  # once, in order
    sizes = [len(b) for b in blocks]
    assert max(sizes) - min(sizes) <= 1 and min(sizes) >= 1
    assert sizes == sorted(sizes, reverse=True)  # the larger blocks first


def test_too_few_rounds_for_the_groups() -> None:
    with pytest.raises(ValueError):
        shard_rounds(2, 3)


def test_each_shard_runs_complete_rounds_of_the_one_plan() -> None:
    plan = make_plan([CHEAP], 7, seed=11, shards=3)
    configs = {c.id for c in plan.configurations}
    seen: list[str] = []
    for k in (1, 2, 3):
        mine = plan.shard_trials(k)
        by_round: dict[int, list[str]] = {}
        for t in mine:
            by_round.setdefault(t.round, []).append(t.config)
        assert sorted(by_round) == shard_rounds(7, 3)[k - 1]
        assert all(sorted(v) == sorted(configs) for v in by_round.values())  # every config once
        seen += [t.id for t in mine]
    assert sorted(seen) == sorted(t.id for t in plan.trials)  # every trial in one shard only
    # each round in its own shuffled order: not one order repeated
    orders = {tuple(t.config for t in plan.trials if t.round == r) for r in range(1, 8)}
    assert len(orders) > 1


def test_same_file_same_plan_on_every_machine() -> None:
    """The plan is a function of the file (and its seed) and N, not of K."""
    a, b = make_plan([CHEAP], 6, seed=3, shards=2), make_plan([CHEAP], 6, seed=3, shards=2)
    assert a.trials == b.trials and a.to_json() == b.to_json()
    assert '"shard_rounds"' in a.to_json() and '"shards"' not in make_plan([CHEAP], 6, 3).to_json()


def test_rebuilds_never_span_two_groups() -> None:
    """A whole plot's instance is one machine's: periods restart at each group's block."""
    plan = make_plan([CLUSTER, CHEAP], 6, seed=1, rebuild=2, shards=2)
    periods = [plan.period(r) for r in range(1, 7)]
    assert periods == [0, 0, 1, 2, 2, 3]  # rounds 1-3 on group 1, 4-6 on group 2
    assert plan.instances() == 4
    assert fleet_periods(5, 2, 0) == (0, 0, 0, 1, 1)  # once: one instance per group
    assert plan.renews_at(4) and not plan.renews_at(5)


def test_shard_parse_and_spans() -> None:
    assert Shard.parse(" 2/3 ") == Shard(2, 3)
    for bad in ("0/3", "4/3", "2", "a/b", "1/0", "-1/2"):
        with pytest.raises(PgsweepError) as e:
            Shard.parse(bad)
        assert e.value.exit_code == 2
    assert round_spans([5, 1, 2, 3, 7, 8]) == "1-3, 5, 7-8"
    assert parse_spans("1-3, 5, 7-8") == [1, 2, 3, 5, 7, 8]
    with pytest.raises(ValueError):
        parse_spans("1-x")
