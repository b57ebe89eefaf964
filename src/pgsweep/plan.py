"""The plan: a pure function of the factors, their costs, the rounds and a seed.

Full factorial; repeated in rounds; shuffled with the seed. Configurations that share the
levels of every expensive factor (a new cluster) form a group, so each cluster is built
once per group and the cheap factors are shuffled inside it: a split-plot order. Groups
run in a shuffled order too. With `rebuild = "per_round"` every round visits every group
again, which replicates the expensive factors at the price of more cluster builds."""

from __future__ import annotations

import itertools
import json
import random
from dataclasses import asdict, dataclass
from typing import Any

from .core import Cost, Value


@dataclass(frozen=True)
class PlanFactor:
    name: str  # "layer.key"
    levels: tuple[Value, ...]
    cost: Cost


@dataclass(frozen=True)
class Configuration:
    id: str  # "c01", in factorial order
    levels: dict[str, Value]  # factor name -> level
    group: int  # index of its expensive-factor group

    def label(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.levels.items()) or "(base)"


@dataclass(frozen=True)
class Trial:
    id: str  # "r2-c05": stable across resumes
    order: int  # position in the run, from 1
    round: int  # from 1
    config: str


@dataclass(frozen=True)
class Plan:
    seed: int
    rounds: int
    rebuild: str
    factors: tuple[PlanFactor, ...]
    configurations: tuple[Configuration, ...]
    trials: tuple[Trial, ...]

    def config(self, config_id: str) -> Configuration:
        return self._by_id()[config_id]

    def _by_id(self) -> dict[str, Configuration]:
        """Configurations by id, built once (plans reach 100,000 trials)."""
        cache: dict[str, Configuration] | None = self.__dict__.get("_index")
        if cache is None:
            cache = {c.id: c for c in self.configurations}
            object.__setattr__(self, "_index", cache)
        return cache

    def grouped_factors(self) -> list[str]:
        return [f.name for f in self.factors if f.cost >= Cost.CLUSTER]

    def to_json(self) -> str:
        data: dict[str, Any] = asdict(self)
        for f in data["factors"]:
            f["cost"] = Cost(f["cost"]).name.lower()
        return json.dumps(data, indent=1, sort_keys=True)


def short_names(names: list[str]) -> dict[str, str]:
    """Column headers: the key without its layer, unless two layers share the key."""
    keys = [n.split(".", 1)[-1] for n in names]
    return {n: k if keys.count(k) == 1 else n for n, k in zip(names, keys, strict=True)}


def expand(factors: list[PlanFactor]) -> list[Configuration]:
    """The full factorial, in file order (last factor varies fastest)."""
    names = [f.name for f in factors]
    expensive = [i for i, f in enumerate(factors) if f.cost >= Cost.CLUSTER]
    combos = list(itertools.product(*(f.levels for f in factors)))
    group_keys: dict[tuple[Value, ...], int] = {}
    configs = []
    width = max(2, len(str(len(combos))))
    for n, combo in enumerate(combos, start=1):
        key = tuple(combo[i] for i in expensive)
        group = group_keys.setdefault(key, len(group_keys))
        configs.append(Configuration(f"c{n:0{width}d}", dict(zip(names, combo, strict=True)),
                                     group))  # fmt: skip
    return configs


def make_plan(factors: list[PlanFactor], rounds: int, seed: int, rebuild: str = "once") -> Plan:
    if rebuild not in ("once", "per_round"):
        raise ValueError(f"rebuild must be 'once' or 'per_round', not {rebuild!r}")
    configs = expand(factors)
    rng = random.Random(seed)
    groups: dict[int, list[Configuration]] = {}
    for c in configs:
        groups.setdefault(c.group, []).append(c)
    sequence: list[tuple[int, Configuration]] = []  # (round, configuration)

    def shuffled(items: list[Any]) -> list[Any]:
        items = list(items)
        rng.shuffle(items)
        return items

    reserve = [f.name for f in factors if f.cost == Cost.RESERVE]

    def visit(group: list[Configuration]) -> list[Configuration]:
        batches: dict[tuple[Value, ...], list[Configuration]] = {}
        for c in group:
            batches.setdefault(tuple(c.levels[n] for n in reserve), []).append(c)
        return [c for key in shuffled(list(batches)) for c in shuffled(batches[key])]

    if rebuild == "once":
        for g in shuffled(sorted(groups)):
            for r in range(1, rounds + 1):
                sequence += [(r, c) for c in visit(groups[g])]
    else:
        for r in range(1, rounds + 1):
            for g in shuffled(sorted(groups)):
                sequence += [(r, c) for c in visit(groups[g])]
    trials = tuple(
        Trial(f"r{r}-{c.id}", order, r, c.id) for order, (r, c) in enumerate(sequence, start=1)
    )
    return Plan(seed, rounds, rebuild, tuple(factors), tuple(configs), trials)


@dataclass(frozen=True)
class TrialCost:
    """Seconds one trial of a configuration takes, and what building its cluster takes."""

    measure: float  # warm-up + duration + restart/restore overhead
    build: float  # initdb + load + snapshot


def estimate_seconds(plan: Plan, costs: dict[str, TrialCost]) -> float:
    """Rough wall time: every trial's measurement plus one build per cluster group visit."""
    total = 0.0
    previous_group = None
    for t in plan.trials:
        c = plan.config(t.config)
        if c.group != previous_group:
            total += costs[c.id].build
            previous_group = c.group
        total += costs[c.id].measure
    return total
