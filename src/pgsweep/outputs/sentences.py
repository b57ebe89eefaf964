"""Sentences every format prints alike (terminal, Markdown, HTML): where an adaptive run
stopped, and what a fleet's verdicts rest on. Plain text; each format escapes it."""

from __future__ import annotations

from typing import Any

from ..analysis import Analysis


def _pct(ratio: float) -> str:
    return f"{ratio - 1:+.1%}"


def fleet_lines(a: Analysis) -> list[str]:
    """A sharded or merged folder: how many groups and rounds the verdicts rest on, and
    whether the effect is the same on every group (verdict.groups)."""
    f = a.fleet
    if not f:
        return []
    ran = ", ".join(f"{g} {n}" for g, n in f["rounds"].items())
    if len(f["groups"]) == 1:
        return [f"one host group ({ran} of {a.experiment['rounds']} rounds): a shard's "
                "verdicts; `pgsweep merge` joins the shards for the fleet's"]  # fmt: skip
    out = [f"host groups: {len(f['groups'])} ({ran} rounds); every verdict rests on "
           f"{len(f['groups'])} groups and {f['rounds_total']} rounds, its effect estimated "
           "within rounds, so a group's own speed is no part of it"]  # fmt: skip
    if f.get("facts_differ"):
        out.append(f"the groups are different machines, as the file allows "
                   f"(hosts_may_differ): {f['facts_differ']}; the configuration x group test "
                   "below asks whether the effect depends on them")  # fmt: skip
    test = f["interaction"]
    if test["p"] is None:
        out.append(f"configuration x group: not tested ({test['why_not']})")
    elif not test["differs"]:
        out.append(f"configuration x group: no evidence that the effect differs between groups "
                   f"(F = {test['f']:.2f} on {test['df'][0]} and {test['df'][1]} df, "
                   f"p = {test['p']:.2g})")  # fmt: skip
    else:
        out.append(f"configuration x group: the effect differs between groups (F = "
                   f"{test['f']:.2f} on {test['df'][0]} and {test['df'][1]} df, p = "
                   f"{test['p']:.2g}); the verdicts are the groups' average")  # fmt: skip
        out += [f"  {e['config']} on {e['group']}: {_pct(e['ratio'])} against the baseline, "
                f"{_pct(e['others'])} on the other groups (p = {e['p_adjusted']:.2g}, adjusted)"
                for e in test["disagree"]]  # fmt: skip
        if not test["disagree"]:
            out.append("  no single group stands out from the rest (each against the others, "
                       "adjusted for the number of comparisons)")  # fmt: skip
    return out + [line for t in f.get("by_fact", []) for line in fact_lines(t)]


def fact_lines(t: dict[str, Any]) -> list[str]:
    """The configuration x fact test of one host fact the groups differ in."""
    levels = "; ".join(f"{v}: {', '.join(gs)}" for v, gs in t["levels"].items())
    head = f"configuration x {t['fact']} ({levels})"
    if t["p"] is None:
        return [f"{head}: not tested ({t['why_not']})"]
    stat = f"F = {t['f']:.2f} on {t['df'][0]} and {t['df'][1]} df, p = {t['p']:.2g}, adjusted"
    if not t["depends"]:
        return [f"{head}: no evidence that the effect depends on it beyond how it varies "
                f"between machines ({stat})"]  # fmt: skip
    out = [f"{head}: the effect depends on it ({stat})"]
    configs = sorted({c for by in t["ratios"].values() for c in by})
    out += [f"  {c}: " + ", ".join(f"{_pct(by[c])} on {v}" for v, by in t["ratios"].items()
                                   if c in by) for c in configs]  # fmt: skip
    return out


def adaptive_line(ad: dict[str, Any]) -> str:
    """Where an adaptive run stopped and why, and what its intervals are."""
    return (
        f"Adaptive rounds: {ad['rounds']} of at most {ad['max_rounds']} rounds run; "
        f"{ad['reason']}. Verdicts use group-sequential boundaries (looks after rounds "
        f"{ad['min_rounds']}-{ad['max_rounds']}), so their intervals are wider than a "
        "fixed design's of the same rounds, and stay valid however the run stopped."
    )
