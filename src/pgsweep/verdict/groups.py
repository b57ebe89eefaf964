"""Host groups as blocks: a fleet's verdicts and the configuration x group test.

A sharded run gives each host group complete rounds, so rounds are nested in groups: the
model's round blocks (log value ~ round + configuration) already hold each machine's
offset, and every configuration effect is estimated within rounds, hence within groups. A
machine twice as fast as another changes no verdict.

What the round blocks cannot say is whether the effect is the same on every machine.
`interaction` answers it: the model with a configuration x group term against the model
without, an F test on the within-round noise (rounds within groups are its replicates:
a group needs two rounds to add to it). When it is significant, each group's effect of
each configuration against the baseline is compared with the rest of the fleet's
(Bonferroni over groups and configurations) and the groups that disagree are named,
step by step, with their effect and the others'. Checked on recorded noise with simulated
host offsets: bench/fleet_verdicts.py."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np
from scipy import stats as sps

from .dist import ALPHA
from .model import Observations


@dataclass(frozen=True)
class GroupEffect:
    config: int  # configuration index (against the baseline)
    group: str
    rounds: int  # rounds of this group with both trials
    ratio: float  # the configuration's ratio to the baseline within this group
    others: float  # the same ratio in the rest of the fleet
    p_adjusted: float  # this group against the rest (Bonferroni)


@dataclass(frozen=True)
class Interaction:
    groups: list[str]  # in first-round order
    rounds: dict[str, int]  # group -> rounds with data
    f: float
    df: tuple[int, int]
    p: float
    differs: bool  # p < alpha
    effects: list[GroupEffect] = field(default_factory=list)  # every group x configuration
    disagree: list[GroupEffect] = field(default_factory=list)  # those whose p_adjusted < alpha
    why_not: str = ""  # when no test could be made


def _rss(x: np.ndarray, y: np.ndarray) -> tuple[float, int]:
    coef, *_ = np.linalg.lstsq(x, y, rcond=None)
    resid = y - x @ coef
    return float(resid @ resid), len(y) - int(np.linalg.matrix_rank(x))


def interaction(obs: Observations, group_of_round: list[str], alpha: float = ALPHA) -> Interaction:
    """The configuration x group test of one metric; `group_of_round[r]` names the group
    of round column r."""
    groups = list(dict.fromkeys(group_of_round))
    y = np.log(obs.values)
    rounds = {g: len({r for r in range(obs.n_rounds) if group_of_round[r] == g
                      and not np.isnan(y[:, r]).all()}) for g in groups}  # fmt: skip
    if len(groups) < 2 or obs.n_configs < 2:
        return Interaction(groups, rounds, math.nan, (0, 0), math.nan, False,
                           why_not="one host group: nothing to compare")  # fmt: skip
    cells, yy, x0 = blocked(obs, y)
    x1 = np.hstack([x0, by_label(obs, cells, group_of_round)])
    rss0, df0 = _rss(x0, yy)
    rss1, df1 = _rss(x1, yy)
    if df1 <= 0 or df0 <= df1 or rss1 <= 0:
        return Interaction(groups, rounds, math.nan, (df0 - df1, df1), math.nan, False,
                           why_not="too few rounds per group to tell (two in a group at "
                           "least)")  # fmt: skip
    f = ((rss0 - rss1) / (df0 - df1)) / (rss1 / df1)
    p = float(sps.f.sf(f, df0 - df1, df1))
    effects = _per_group(obs, y, group_of_round, groups, math.sqrt(rss1 / df1), df1)
    disagree: list[GroupEffect] = []
    if p < alpha:  # name the groups that stand out, one at a time (see _outliers)
        disagree = _outliers(obs, group_of_round, effects, alpha)
    return Interaction(groups, rounds, float(f), (df0 - df1, df1), p, p < alpha, effects,
                       disagree)  # fmt: skip


def blocked(obs: Observations, y: np.ndarray
            ) -> tuple[list[tuple[int, int]], np.ndarray, np.ndarray]:  # fmt: skip
    """The cells with a value (configuration, round), their log values, and the
    round-blocked model's columns: configuration + block, a block being a round, or a whole
    plot's part of it (cluster levels are compared through their instances: their x group
    term is not tested here)."""
    cells = [(i, r) for i in range(obs.n_configs) for r in range(obs.n_rounds)
             if not np.isnan(y[i, r])]  # fmt: skip
    keys = [tuple(lv.get(f) for f in obs.whole_plot_factors) for lv in obs.levels]
    block: dict[tuple[int, object], int] = {}
    for i, r in cells:
        block.setdefault((r, keys[i]), len(block))
    x = np.zeros((len(cells), obs.n_configs + len(block)))
    for n, (i, r) in enumerate(cells):
        x[n, i] = x[n, obs.n_configs + block[(r, keys[i])]] = 1.0
    return cells, np.array([y[i, r] for i, r in cells]), x


def by_label(obs: Observations, cells: list[tuple[int, int]], label_of_round: list[str]
             ) -> np.ndarray:  # fmt: skip
    """Configuration x label indicators (each round's label: its group, or its group's
    value of a host fact), labels in first-round order."""
    labels = list(dict.fromkeys(label_of_round))
    x = np.zeros((len(cells), obs.n_configs * len(labels)))
    for n, (i, r) in enumerate(cells):
        x[n, i * len(labels) + labels.index(label_of_round[r])] = 1.0
    return x


def _outliers(obs: Observations, group_of_round: list[str], effects: list[GroupEffect],
              alpha: float) -> list[GroupEffect]:  # fmt: skip
    """Step down: the group whose effect is farthest from the rest's (smallest adjusted
    p) is named when that p is below alpha; its rounds leave, and the test is made again
    on the remaining groups while it still says "differs". One group unlike the others
    is named alone, not the others with it (each of which also differs from a "rest"
    that holds it)."""
    worst = min(effects, key=lambda e: e.p_adjusted)
    if worst.p_adjusted >= alpha:
        return []
    keep = [r for r, g in enumerate(group_of_round) if g != worst.group]
    if len({group_of_round[r] for r in keep}) < 2:
        return [worst]
    rest = replace(obs, values=obs.values[:, keep], period_list=None)
    again = interaction(rest, [group_of_round[r] for r in keep], alpha)
    return [worst, *again.disagree] if again.differs else [worst]


def _per_group(obs: Observations, y: np.ndarray, group_of_round: list[str], groups: list[str],
               sigma: float, df: int) -> list[GroupEffect]:  # fmt: skip
    """Each configuration's within-round log difference to the baseline, by group, against
    the rest of the fleet: t on the interaction model's noise, Bonferroni over all."""
    base = obs.baseline
    tests = (obs.n_configs - 1) * len(groups)
    out = []
    for i in (i for i in range(obs.n_configs) if i != base):
        d = y[i] - y[base]  # per round; NaN where either trial is missing
        for g in groups:
            here = np.array([gr == g for gr in group_of_round]) & ~np.isnan(d)
            rest = np.array([gr != g for gr in group_of_round]) & ~np.isnan(d)
            if not here.any() or not rest.any():
                continue
            a, b = float(d[here].mean()), float(d[rest].mean())
            se = sigma * math.sqrt(2 / here.sum() + 2 / rest.sum())
            p = min(1.0, tests * 2 * float(sps.t.sf(abs(a - b) / se, df)))
            out.append(GroupEffect(i, g, int(here.sum()), math.exp(a), math.exp(b), p))
    return out
