"""A fleet's folder as one experiment: each host group's facts as the fleet compared them,
the rounds each group ran, the configuration x group test and, for each fact the groups
differ in (as the file allowed), the configuration x fact test, as plain data for the
reports."""

from __future__ import annotations

import math
from typing import Any

from .. import verdict as sm
from ..collect import hostfacts
from ..store import Results
from ..verdict import groups
from ..verdict.facts import FactTest, fact_tests
from .types import Config


def group_facts(results: Results) -> dict[str, dict[str, str]]:
    """Each group's host facts, as the fleet compared them before dispatch (environment
    scope "hostfacts", names `fact@group`); {} for folders from before that check, or
    merged by hand."""
    out: dict[str, dict[str, str]] = {}
    for fact in results.environment():
        if fact.scope == "hostfacts" and "@" in fact.name:
            name, group = fact.name.rsplit("@", 1)
            out.setdefault(group, {})[name] = fact.value
    return out


def fleet_rows(obs: sm.Observations, group_of: list[str], configs: list[Config],
               alpha: float, facts: dict[str, dict[str, str]]) -> dict[str, Any]:  # fmt: skip
    """The host groups of a sharded or merged folder, the rounds each ran, their facts,
    the configuration x group test on TPS (verdict.groups) and, for each fact the groups
    differ in, the configuration x fact test (verdict.facts), as plain data."""
    test = groups.interaction(obs, group_of, alpha)
    # the facts the fleet compared before dispatch (a host's name is no fact)
    compared = {g: {k: v for k, v in f.items() if k in hostfacts.FACTS}
                for g, f in facts.items()}  # fmt: skip

    def row(e: groups.GroupEffect) -> dict[str, Any]:
        return {"config": configs[e.config].id, "group": e.group, "rounds": e.rounds,
                "ratio": e.ratio, "others": e.others, "p_adjusted": e.p_adjusted}  # fmt: skip

    return {
        "groups": test.groups, "rounds": test.rounds,
        "rounds_total": sum(test.rounds.values()),
        "interaction": {"f": test.f if math.isfinite(test.f) else None, "df": list(test.df),
                        "p": test.p if math.isfinite(test.p) else None,
                        "differs": test.differs, "why_not": test.why_not,
                        "effects": [row(e) for e in test.effects],
                        "disagree": [row(e) for e in test.disagree]},
        "facts": facts,
        "by_fact": [_fact_row(t, configs) for t in fact_tests(obs, group_of, compared, alpha)],
    }  # fmt: skip


def _fact_row(t: FactTest, configs: list[Config]) -> dict[str, Any]:
    return {"fact": t.fact, "levels": t.levels,
            "f": t.f if math.isfinite(t.f) else None, "df": list(t.df),
            "p": t.p if math.isfinite(t.p) else None, "depends": t.depends,
            "why_not": t.why_not,
            "ratios": {v: {configs[i].id: r for i, r in by.items()}
                       for v, by in t.ratios.items()}}  # fmt: skip
