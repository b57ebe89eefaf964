"""The plan: a pure function of the factors, their costs, the rounds, a seed, the rebuild
schedule, and whether the resources of every configuration can be alive at once.

Full factorial, repeated in rounds; every round holds every configuration. Configurations
that share the levels of every expensive factor (a new cluster: a "whole plot") form a
group. When every group's cluster can be kept alive (the usual case), each round is a
plain shuffle of all configurations: the engine switches between live clusters, so
expensive factors are compared side by side like cheap ones. When they cannot (one real
device, not enough disk), each round visits every group once, as a batch, in an order
drawn afresh for every round (a rotation of one fixed order puts the same neighbours
side by side every time: measured on this machine's noise, 5.4-7.3% false "different"
instead of 4.0-5.2%), with the configurations inside the batch shuffled; the group's
cluster is rebuilt for each visit.

Replication: a whole plot's level is an *instance* (a cluster, a filesystem), and two
instances of one level differ (data layout, free-space state, where the page cache sits);
a verdict about the level, not about one instance, needs several instances per level and
an error that includes their spread (split-plot). `rebuild_every = N` takes every group
down at the start of every N-th round, so the run holds ceil(rounds / N) instances per
level (a *period* is the rounds one instance serves); 0 keeps one instance per level for
the whole run, and then no cross-level contrast is a verdict. A compiled build is not an
instance: compiling the same source with the same options gives the same binary, so the
cache serves it again; the clusters made with it are rebuilt.

Never sequential blocks (all rounds of one cluster, then the next): measured on this
machine's noise through pgsweep's own analysis, that order called a cluster factor with no
effect "different" 20-61% of the time.

Shards (a fleet): the same plan spread over N host groups, each running complete rounds
(every configuration once per round, in that round's own shuffled order). Group K runs a
contiguous block of rounds, the first `rounds % N` groups one more than the rest;
contiguous, so a whole plot's rebuild schedule stays within one group (an instance is
never shared by two machines). Every shard computes the whole plan from the same file and
seed, then runs its block: rounds are nested in groups, which is what the verdicts' round
blocks need (a group's offset is part of each of its rounds' level)."""

from __future__ import annotations

import functools
import itertools
import json
import random
import re
from dataclasses import asdict, dataclass
from typing import Any

from .core import Cost, Value
from .errors import PgsweepError


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
    what `decide` names is decided or precise to `precision` (a fraction), or once a
    change of `interest` could no longer be found (futility), at most `max_rounds` (see
    verdict.sequential)."""

    min_rounds: int
    max_rounds: int
    decide: str  # "baseline" or "effects"
    precision: float
    interest: float = 0.10  # the smallest change worth finding: what futility asks about
    budget_s: float = 0.0  # max_rounds not given: the machine time it may take
    why_max: str = ""  # how max_rounds was settled when it was not given


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
    rebuild: str  # "once" | "per_round" | "every N rounds": rebuild_every in words
    factors: tuple[PlanFactor, ...]
    configurations: tuple[Configuration, ...]
    trials: tuple[Trial, ...]
    keep_alive: bool = True  # every group's resources alive at once (else batches per round)
    why_not_alive: str = ""  # the reason when they cannot be
    adaptive: Adaptive | None = None  # rounds = "auto": `rounds` is the maximum
    rebuild_every: int = 0  # rounds one instance of each group serves; 0: the whole run
    shards: int = 1  # host groups the rounds are spread over: a fleet when > 1

    @property
    def replicated(self) -> bool:
        """Whole plots rest on at least two instances per level."""
        return self.instances() >= 2

    def period(self, round_: int) -> int:
        """The instance period (from 0) a round belongs to: batches rebuild every visit; a
        fleet's groups keep their own schedules (fleet_periods)."""
        every = self.rebuild_every if self.keep_alive else 1
        if self.shards > 1:
            return fleet_periods(self.rounds, self.shards, every)[round_ - 1]
        return period_of(round_, every)

    def shard_trials(self, k: int) -> list[Trial]:
        """The trials group K (from 1) runs: its block of rounds, in plan order."""
        mine = set(shard_rounds(self.rounds, self.shards)[k - 1])
        return [t for t in self.trials if t.round in mine]

    def instances(self) -> int:
        """Instances of each whole-plot group the run makes."""
        return self.period(self.rounds) + 1

    def renews_at(self, round_: int) -> bool:
        """Does the engine take every group down before this round (a new period)? Batches:
        every round, even when a round ends and the next starts with the same group."""
        return round_ > 1 and self.period(round_) != self.period(round_ - 1)

    def builds(self) -> int:
        """Cluster builds the run makes (every group once per instance)."""
        groups = len({c.group for c in self.configurations})
        return groups * self.instances()

    def replicates(self, factor: str) -> int:
        """Independent replicates a factor's verdict rests on: rounds for a cheap factor,
        instances per level for a whole-plot factor."""
        f = next(f for f in self.factors if f.name == factor)
        return self.instances() if f.cost >= Cost.CLUSTER else self.rounds

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
        data["replicated"] = self.replicated  # whole plots on two or more instances per level
        data["instances"] = self.instances()
        if self.shards > 1:
            data["shard_rounds"] = shard_rounds(self.rounds, self.shards)
        else:
            del data["shards"]  # plans of one machine read as they always did
        return json.dumps(data, indent=1, sort_keys=True)


def period_of(round_: int, rebuild_every: int) -> int:
    """The instance period of a round (from 1) when every group is rebuilt every
    `rebuild_every` rounds (0: never)."""
    return (round_ - 1) // rebuild_every if rebuild_every > 0 else 0


def rebuild_words(rebuild_every: int) -> str:
    return {0: "once", 1: "per_round"}.get(rebuild_every, f"every {rebuild_every} rounds")


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
    factors: list[PlanFactor], rounds: int, seed: int, rebuild: str | int = "once",
    keep_alive: bool = True, why_not_alive: str = "", adaptive: Adaptive | None = None,
    shards: int = 1,
) -> Plan:  # fmt: skip
    """`rebuild`: "once" (one instance per level), "per_round", or every N rounds (N >= 1)."""
    every = {"once": 0, "per_round": 1}.get(rebuild) if isinstance(rebuild, str) else rebuild
    if every is None or every < 0:
        raise ValueError(f"rebuild must be 'once', 'per_round' or a number of rounds, "
                         f"not {rebuild!r}")  # fmt: skip
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
        for r in range(1, rounds + 1):
            for g in shuffled(sorted(groups)):  # a fresh group order every round
                sequence += [(r, c) for c in shuffled(groups[g])]
    trials = tuple(
        Trial(f"r{r}-{c.id}", order, r, c.id) for order, (r, c) in enumerate(sequence, start=1)
    )
    return Plan(seed, rounds, rebuild_words(every), tuple(factors), tuple(configs), trials,
                keep_alive, why_not_alive, adaptive, every, shards)  # fmt: skip


@dataclass(frozen=True)
class Shard:
    """`--shard K/N`: this run is group K (from 1) of N."""

    k: int
    n: int

    def __str__(self) -> str:
        return f"{self.k}/{self.n}"

    @classmethod
    def parse(cls, text: str, flag: str = "--shard") -> Shard:
        m = re.fullmatch(r"\s*(\d{1,4})\s*/\s*(\d{1,4})\s*", text)
        if not m or not 1 <= int(m.group(1)) <= int(m.group(2)):
            raise PgsweepError(f"{flag} {text!r} is not K/N with 1 <= K <= N", where=flag,
                               expected="e.g. --shard 2/3 (the second of three groups)",
                               fix="write --shard K/N")  # fmt: skip
        return cls(int(m.group(1)), int(m.group(2)))


def shard_rounds(rounds: int, shards: int) -> list[list[int]]:
    """The rounds each group runs, from group 1: contiguous blocks whose sizes differ by
    one at most, the larger first."""
    if shards < 1 or rounds < shards:
        raise ValueError(f"{rounds} rounds cannot give each of {shards} groups a round")
    base, extra = divmod(rounds, shards)
    out, start = [], 1
    for k in range(shards):
        size = base + (1 if k < extra else 0)
        out.append(list(range(start, start + size)))
        start += size
    return out


@functools.lru_cache(maxsize=64)
def fleet_periods(rounds: int, shards: int, rebuild_every: int) -> tuple[int, ...]:
    """The instance period of every round (index 0 is round 1) when each group keeps its
    own rebuild schedule: periods count within a group's rounds, never span two groups."""
    out: list[int] = []
    offset = 0
    for block in shard_rounds(rounds, shards):
        local = [period_of(i + 1, rebuild_every) for i in range(len(block))]
        out += [offset + p for p in local]
        offset += max(local) + 1
    return tuple(out)


def round_spans(rounds: list[int]) -> str:
    """[1, 2, 3, 5] -> "1-3, 5"."""
    spans: list[list[int]] = []
    for r in sorted(rounds):
        if spans and spans[-1][1] == r - 1:
            spans[-1][1] = r
        else:
            spans.append([r, r])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


def parse_spans(text: str) -> list[int]:
    """"1-3, 5" -> [1, 2, 3, 5] (ValueError when it is not such a list)."""
    out: list[int] = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        a, _, b = part.partition("-")
        out += range(int(a), int(b or a) + 1)
    return out


@dataclass(frozen=True)
class TrialCost:
    """Seconds one trial of a configuration takes, and what building its cluster takes."""

    measure: float  # warm-up + duration + restart/restore overhead
    build: float  # initdb + load + snapshot


def estimate_parts(plan: Plan, costs: dict[str, TrialCost]) -> tuple[float, float]:
    """Rough wall time: (trials, cluster builds). Every trial's measurement; one build per
    group and instance."""
    trials = sum(costs[t.config].measure for t in plan.trials)
    first: dict[int, float] = {}
    for c in plan.configurations:
        first.setdefault(c.group, costs[c.id].build)
    builds = sum(first.values()) * plan.instances()
    return trials, builds


def estimate_seconds(plan: Plan, costs: dict[str, TrialCost]) -> float:
    return sum(estimate_parts(plan, costs))


def fleet_estimate(plan: Plan, costs: dict[str, TrialCost]) -> list[float]:
    """Rough wall time of each group's shard (its trials, and its builds: every group makes
    its own instances); the fleet's is the longest, as the groups run at once."""
    first: dict[int, float] = {}
    for c in plan.configurations:
        first.setdefault(c.group, costs[c.id].build)
    out = []
    for k, block in enumerate(shard_rounds(plan.rounds, plan.shards), start=1):
        trials = sum(costs[t.config].measure for t in plan.shard_trials(k))
        periods = {plan.period(r) for r in block}
        out.append(trials + sum(first.values()) * len(periods))
    return out
