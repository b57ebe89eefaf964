"""The plan: a pure function of the factors, their costs, the rounds, a seed, and whether
the resources of every configuration can be alive at once.

Full factorial, repeated in rounds; every round holds every configuration. Configurations
that share the levels of every expensive factor (a new cluster: a "whole plot") form a
group. When every group's cluster can be kept alive (the usual case), each round is a
plain shuffle of all configurations: the engine switches between live clusters, so
expensive factors are compared side by side like cheap ones. When they cannot (one real
device, not enough disk), each round visits every group once, as a batch, in an order
counterbalanced across rounds (a Latin square: every group takes every position equally
often), with the configurations inside the batch shuffled; the group's cluster is rebuilt
for each visit. `rebuild = "per_round"` rebuilds every cluster at each round's start, so
whole-plot factors rest on independent builds, analysed with the between-build error.

Never sequential blocks (all rounds of one cluster, then the next): measured on this
machine's noise through pgsweep's own analysis, that order called a cluster factor with no
effect "different" 20-61% of the time."""

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
class Adaptive:
    """`[repeat] rounds = "auto"`: look after every round from `min_rounds`, stop once
    what `decide` names is decided or precise to `precision` (a fraction), at most
    `max_rounds` (see verdict.sequential)."""

    min_rounds: int
    max_rounds: int
    decide: str  # "baseline" or "effects"
    precision: float


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
    keep_alive: bool = True  # every group's resources alive at once (else batches per round)
    why_not_alive: str = ""  # the reason when they cannot be
    adaptive: Adaptive | None = None  # rounds = "auto": `rounds` is the maximum

    @property
    def replicated(self) -> bool:
        """Whole plots rest on independent builds (one per round per group)."""
        return self.rebuild == "per_round" or not self.keep_alive

    def builds(self) -> int:
        """Cluster builds the run makes (every group once, or once per round)."""
        groups = len({c.group for c in self.configurations})
        return groups * (self.rounds if self.replicated else 1)

    def replicates(self, factor: str) -> int:
        """Independent replicates a factor's verdict rests on: rounds for a cheap factor
        or a replicated whole-plot factor; one build per level otherwise."""
        f = next(f for f in self.factors if f.name == factor)
        return 1 if f.cost >= Cost.CLUSTER and not self.replicated else self.rounds

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
        data["replicated"] = self.replicated  # whole plots on independent builds
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


def make_plan(
    factors: list[PlanFactor], rounds: int, seed: int, rebuild: str = "once",
    keep_alive: bool = True, why_not_alive: str = "", adaptive: Adaptive | None = None,
) -> Plan:  # fmt: skip
    if rebuild not in ("once", "per_round"):
        raise ValueError(f"rebuild must be 'once' or 'per_round', not {rebuild!r}")
    configs = expand(factors)
    rng = random.Random(seed)

    def shuffled(items: list[Any]) -> list[Any]:
        items = list(items)
        rng.shuffle(items)
        return items

    sequence: list[tuple[int, Configuration]] = []  # (round, configuration)
    if keep_alive:
        for r in range(1, rounds + 1):
            sequence += [(r, c) for c in shuffled(configs)]
    else:
        groups: dict[int, list[Configuration]] = {}
        for c in configs:
            groups.setdefault(c.group, []).append(c)
        base = shuffled(sorted(groups))
        for r in range(1, rounds + 1):
            shift = (r - 1) % len(base)
            for g in base[shift:] + base[:shift]:  # every group in every position in turn
                sequence += [(r, c) for c in shuffled(groups[g])]
    trials = tuple(
        Trial(f"r{r}-{c.id}", order, r, c.id) for order, (r, c) in enumerate(sequence, start=1)
    )
    return Plan(seed, rounds, rebuild, tuple(factors), tuple(configs), trials, keep_alive,
                why_not_alive, adaptive)  # fmt: skip


@dataclass(frozen=True)
class TrialCost:
    """Seconds one trial of a configuration takes, and what building its cluster takes."""

    measure: float  # warm-up + duration + restart/restore overhead
    build: float  # initdb + load + snapshot


def estimate_parts(plan: Plan, costs: dict[str, TrialCost]) -> tuple[float, float]:
    """Rough wall time: (trials, cluster builds). Every trial's measurement; one build per
    group (kept alive), or per group and round (replicated or batched)."""
    trials = sum(costs[t.config].measure for t in plan.trials)
    first: dict[int, float] = {}
    for c in plan.configurations:
        first.setdefault(c.group, costs[c.id].build)
    builds = sum(first.values()) * (plan.rounds if plan.replicated else 1)
    return trials, builds


def estimate_seconds(plan: Plan, costs: dict[str, TrialCost]) -> float:
    return sum(estimate_parts(plan, costs))
