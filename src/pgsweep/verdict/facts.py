"""A host fact as a factor of a fleet's verdicts: does the effect depend on the kernel (or
the CPU model, the memory, ...) that differs between the host groups, as the file allows?

Groups are nested in the fact's values (each group has one kernel), so the question is
asked against how much the effect varies from machine to machine, not against the trial
noise alone: the configuration x fact term's mean square over the configuration x group
(within fact) term's, both on the round-blocked model of verdict.groups. That needs two
groups at least on some value of the fact; where every value has one group, the fact
cannot be told from the machine and the configuration x group test is the only one (the
report says so). One test per differing fact, Bonferroni over the facts. Checked on
recorded noise with simulated host offsets (tests/unit/test_fleet_verdicts.py,
bench/fleet_verdicts.py)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
from scipy import stats as sps

from .dist import ALPHA
from .groups import _rss, blocked, by_label
from .model import Observations


@dataclass(frozen=True)
class FactTest:
    fact: str
    levels: dict[str, list[str]]  # the fact's value -> the groups that have it
    f: float = math.nan
    df: tuple[int, int] = (0, 0)
    p: float = math.nan  # Bonferroni over the facts tested
    depends: bool = False
    ratios: dict[str, dict[int, float]] = field(default_factory=dict)  # value -> config -> ratio
    why_not: str = ""


def fact_tests(obs: Observations, group_of_round: list[str],
               facts: Mapping[str, Mapping[str, str]], alpha: float = ALPHA
               ) -> list[FactTest]:  # fmt: skip
    """One test per fact whose value differs between the groups of `group_of_round`
    (`facts`: group -> fact -> value; a fact a group did not report is its own value)."""
    groups = list(dict.fromkeys(group_of_round))
    names = sorted({f for g in groups for f in facts.get(g, {})})
    differ = {}
    for fact in names:
        value = {g: facts.get(g, {}).get(fact, "(not reported)") for g in groups}
        if len(set(value.values())) > 1:
            differ[fact] = value
    out = []
    for fact, value in differ.items():
        levels: dict[str, list[str]] = {}
        for g in groups:
            levels.setdefault(value[g], []).append(g)
        out.append(_test(obs, group_of_round, fact, value, levels, alpha, len(differ)))
    return out


def _test(obs: Observations, group_of_round: list[str], fact: str, value: dict[str, str],
          levels: dict[str, list[str]], alpha: float, tests: int) -> FactTest:  # fmt: skip
    y = np.log(obs.values)
    ratios = _ratios(obs, y, [value[g] for g in group_of_round])
    if all(len(gs) == 1 for gs in levels.values()):
        return FactTest(fact, levels, ratios=ratios,
                        why_not="one group per value: the fact cannot be told from the "
                        "machine (the configuration x group test is the test)")  # fmt: skip
    cells, yy, base = blocked(obs, y)
    by_value = by_label(obs, cells, [value[g] for g in group_of_round])
    by_group = by_label(obs, cells, group_of_round)
    rss0, df0 = _rss(base, yy)
    rss_f, df_f = _rss(np.hstack([base, by_value]), yy)
    rss_g, df_g = _rss(np.hstack([base, by_value, by_group]), yy)
    if df0 <= df_f or df_f <= df_g or rss_f - rss_g <= 0:
        return FactTest(fact, levels, ratios=ratios, why_not="too few groups or rounds to "
                        "tell the fact from the machine")  # fmt: skip
    f = ((rss0 - rss_f) / (df0 - df_f)) / ((rss_f - rss_g) / (df_f - df_g))
    p = min(1.0, tests * float(sps.f.sf(f, df0 - df_f, df_f - df_g)))
    return FactTest(fact, levels, float(f), (df0 - df_f, df_f - df_g), p, p < alpha, ratios)


def _ratios(obs: Observations, y: np.ndarray, value_of_round: list[str]
            ) -> dict[str, dict[int, float]]:  # fmt: skip
    """Each configuration's within-round ratio to the baseline, by value of the fact."""
    out: dict[str, dict[int, float]] = {}
    for v in dict.fromkeys(value_of_round):
        mine = np.array([x == v for x in value_of_round])
        for i in range(obs.n_configs):
            d = (y[i] - y[obs.baseline])[mine]
            d = d[~np.isnan(d)]
            if i != obs.baseline and d.size:
                out.setdefault(v, {})[i] = math.exp(float(d.mean()))
    return out
