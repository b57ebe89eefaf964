"""What a report can still judge when configurations were lost (every trial failed, or
completed no transaction): the baseline moves to the nearest configuration with data, and
the verdicts rest on the largest complete factorial the surviving configurations form.

A factor one of whose levels lost every configuration is fixed at the levels left (its
effect cannot be judged; the others can, within what survives). Where losses are
scattered, levels are dropped one at a time (the one with the fewest surviving
configurations first) until what is left is complete: a main effect averaged over an
incomplete set of the other factors' levels would mix their effects into it. Every
configuration left out, and why, is said."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..store import TPS


class HasLevels(Protocol):
    id: str
    levels: dict[str, Any]
    values: dict[str, dict[int, float]]


@dataclass
class Design:
    configs: list[Any]  # the complete factorial judged (in the original order)
    baseline: Any
    notes: list[str] = field(default_factory=list)  # what moved or was left out, and why


def has_data(c: HasLevels) -> bool:
    return any(v is not None and v > 0 for v in c.values.get(TPS, {}).values())


def _describe(c: HasLevels) -> str:
    return f"{c.id} ({', '.join(f'{k}={v}' for k, v in c.levels.items()) or 'no factors'})"


def surviving(configs: Sequence[HasLevels], baseline: HasLevels) -> Design:
    """The configurations to judge and the baseline to judge them against."""
    alive = [c for c in configs if has_data(c)]
    if len(alive) == len(configs) or not alive:
        return Design(list(configs), baseline)
    notes = [f"{len(configs) - len(alive)} of {len(configs)} configurations have no "
             f"successful trial: {', '.join(c.id for c in configs if c not in alive)}"]  # fmt: skip
    factors = list(configs[0].levels)
    declared = {f: list(dict.fromkeys(c.levels[f] for c in configs)) for f in factors}
    keep = _complete(alive, factors, declared, notes)
    base = baseline
    if base not in keep:
        base = min(keep, key=lambda c: (_distance(c, baseline), configs.index(c)))
        why = "has no successful trial" if baseline not in alive else \
            "is outside the complete factorial that survives"  # fmt: skip
        notes.append(f"the baseline {_describe(baseline)} {why}: every comparison is against "
                     f"{_describe(base)}, the nearest configuration with data")  # fmt: skip
    left = [c for c in alive if c not in keep]
    if left:
        notes.append(f"{', '.join(c.id for c in left)} have data but lie outside the complete "
                     "factorial that survives: not judged (effects over an incomplete set "
                     "would mix the other factors' effects in)")  # fmt: skip
    return Design([c for c in configs if c in keep], base, notes)


def _distance(c: HasLevels, base: HasLevels) -> int:
    return sum(c.levels.get(k) != v for k, v in base.levels.items())


def _complete(alive: list[HasLevels], factors: list[str], declared: dict[str, list[Any]],
              notes: list[str]) -> list[HasLevels]:  # fmt: skip
    """The largest complete factorial in `alive`, dropping levels (fewest survivors first)."""
    levels = {f: list(dict.fromkeys(c.levels[f] for c in alive)) for f in factors}
    while True:
        cells = {tuple(c.levels[f] for f in factors): c for c in alive}
        wanted = list(itertools.product(*(levels[f] for f in factors)))
        if all(w in cells for w in wanted):
            break
        count = {(f, lv): sum(1 for w in wanted if w[i] == lv and w in cells)
                 for i, f in enumerate(factors) for lv in levels[f]
                 if len(levels[f]) > 1}  # fmt: skip
        f, lv = min(count, key=lambda k: (count[k], -factors.index(k[0])))
        levels[f].remove(lv)
        notes.append(f"{f}={lv}: left out, so that the configurations judged form a complete "
                     "factorial")  # fmt: skip
    for f in factors:
        if len(levels[f]) == 1 and len(declared[f]) > 1:
            lost = [str(lv) for lv in declared[f] if lv not in levels[f]]
            notes.append(f"{f}: not judged: no configuration with {f}={' or '.join(lost)} "
                         f"is left to compare {f}={levels[f][0]} with")  # fmt: skip
    return [cells[w] for w in itertools.product(*(levels[f] for f in factors))]
