"""`pgsweep report` as Markdown (the headline first, then the seeds' tables: rounds x
configurations with mean and median rows, verdicts and factor effects), and the pieces
the other formats share. The terminal is outputs/terminal.py, HTML outputs/html.py, JSON
the analysis itself (schema in docs/report-schema.md)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..analysis import METRICS, Analysis, Config
from ..analysis.headline import baseline_text
from ..analysis.workload import workload_line
from ..plan import short_names
from .builds import BUILDS_NOTE, PHASES_NOTE, builds_table, phases_table
from .explain import markdown as explain_markdown
from .safetext import md


def levels_text(a: Analysis, c: Config) -> str:
    names = short_names(a.factors)
    return ", ".join(f"{names[f]}={c.levels.get(f)}" for f in a.factors) or "(no factors)"


def _num(v: float | None, digits: int = 1) -> str:
    return "-" if v is None else f"{v:,.{digits}f}"


def _interval(s: dict[str, Any] | None) -> str:
    if not s or s.get("ci_low") is None:
        return "-"
    return f"[{s['ci_low']:,.1f}, {s['ci_high']:,.1f}]"


def _verdicts(a: Analysis, metric: str) -> dict[str, str]:
    return {c["config"]: c["verdict"] for c in a.comparisons if c["metric"] == metric}


def effect_name(e: dict[str, Any]) -> str:
    """ "shared_buffers = 1GB (vs 128MB)", or for an interaction "the effect of A = x (vs y)
    at B = u rather than v"."""
    terms = e.get("terms") or [{"factor": e["factor"], "level": e["level"],
                                "reference": e["reference"]}]  # fmt: skip
    first = f"{terms[0]['factor']} = {terms[0]['level']} (vs {terms[0]['reference']})"
    if e["kind"] == "main" or len(terms) < 2:
        return first
    t = terms[1]
    return f"the effect of {first} at {t['factor']} = {t['level']} rather than {t['reference']}"


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


def _md_row(cells: list[str]) -> str:
    """A Markdown table row; every cell is text (safetext.md): a level such as
    "<img src=...>" or "[x](http://...)" is shown as written, never rendered."""
    return "| " + " | ".join(md(c) for c in cells) + " |"


def _md_rounds(a: Analysis) -> list[str]:
    """The seeds' table: rows are rounds, columns configurations, then mean and median."""
    configs, out = a.configurations, []
    out.append(_md_row(["", *[f"{c.id}" for c in configs]]))
    out.append(_md_row(["---"] * (len(configs) + 1)))
    out.append(_md_row(["levels", *[levels_text(a, c) for c in configs]]))
    level = {r["round"]: r["tps"] for r in a.rounds}
    for r in sorted({r for c in configs for r in c.values.get("tps", {})}):
        cells = [_num(c.values.get("tps", {}).get(r)) for c in configs]
        out.append(_md_row([f"round {r} (level {_num(level.get(r))})", *cells]))
    for stat in ("mean", "median"):
        row = [_num((c.summary.get("tps") or {}).get(stat)) for c in configs]
        out.append(_md_row([f"**{stat}**", *row]))
    return out


def adaptive_line(ad: dict[str, Any]) -> str:
    """Where an adaptive run stopped and why, and what its intervals are."""
    return (
        f"Adaptive rounds: {ad['rounds']} of at most {ad['max_rounds']} rounds run; "
        f"{ad['reason']}. Verdicts use group-sequential boundaries (looks after rounds "
        f"{ad['min_rounds']}-{ad['max_rounds']}), so their intervals are wider than a "
        "fixed design's of the same rounds, and stay valid however the run stopped."
    )


REPLICATION_COLUMNS = (
    ("write_lag_ms_mean", "write lag ms", 2), ("flush_lag_ms_mean", "flush lag ms", 2),
    ("replay_lag_ms_mean", "replay lag ms", 2), ("replay_lag_ms_max", "max replay lag ms", 1),
    ("replay_bytes_behind_max", "max replay bytes behind", 0),
    ("sync_share", "seconds in sync", 2), ("conflicts", "conflicts", 1),
    ("zero_tps_seconds", "stall s", 1),
)  # fmt: skip


def _md_replication(a: Analysis) -> list[str]:
    """Seed 4's table: per configuration, the mean over its trials of each standby figure
    (lags are means of the per-second samples, then of the trials)."""
    if not a.replication:
        return []
    out = ["\n## Replication\n", "Per configuration, means over its trials of the "
           "once-a-second samples of pg_stat_replication (every standby); stall s: seconds "
           "in which the primary completed no transaction.\n"]  # fmt: skip
    by_id = {c.id: c for c in a.configurations}
    out.append(_md_row(["config", "levels", *(h for _, h, _ in REPLICATION_COLUMNS)]))
    out.append(_md_row(["---"] * (2 + len(REPLICATION_COLUMNS))))
    for row in a.replication:
        c = by_id.get(str(row["config"]))
        cells = [_num(row.get(k), d) for k, _, d in REPLICATION_COLUMNS]
        out.append(_md_row([str(row["config"]), levels_text(a, c) if c else "", *cells]))
    return out


TextTable = tuple[list[str], list[list[str]]]


def _md_table(a: Analysis, title: str, note: str,
              table: Callable[[Analysis], TextTable]) -> list[str]:  # fmt: skip
    header, rows = table(a)
    return [f"\n## {title}\n", note + "\n", _md_row(header), _md_row(["---"] * len(header)),
            *(_md_row(r) for r in rows)]  # fmt: skip


def render_markdown(a: Analysis) -> str:
    exp, out = a.experiment, []
    out.append(f"# {md(exp['name'])}\n")
    out.append(f"PostgreSQL {md(exp['postgres_version'])}, {exp['rounds']} rounds, seed "
               f"{exp['seed']}, baseline **{md(a.baseline)}**: {md(baseline_text(a))}.\n")
    if workload_line(exp):
        out.append(md(workload_line(exp)) + ".\n")
    out.append("## What this experiment found\n")
    alpha = a.method["alpha"]
    out.append(f"TPS, each verdict with its simultaneous {1 - alpha:.0%} interval.\n")
    out += [f"- {md(line['text'])}" for line in a.headline]
    out.append("")
    out += explain_markdown(a.explain, a.names)
    if "adaptive" in a.method:
        out.append(md(adaptive_line(a.method["adaptive"])) + "\n")
    out.append("## TPS of every trial\n\nRows are rounds (each ran every configuration once, "
               "in shuffled order); a round's level is the geometric mean of its trials.\n")
    out += _md_rounds(a)
    out.append(f"\n## Against the baseline\n\nSimultaneous {1 - alpha:.0%} intervals over "
               "every comparison of a metric; a verdict says \"different\" exactly when its "
               "interval leaves out no change (ratio 1).\n")  # fmt: skip
    out.append(_md_row(["metric", "config", "levels", "ratio", "interval", "p (adj.)",
                        "verdict", "error"]))  # fmt: skip
    out.append(_md_row(["---"] * 8))
    by_id = {c.id: c for c in a.configurations}
    for cmp in a.comparisons:
        ci = f"{cmp['ci_low']:.3f} to {cmp['ci_high']:.3f}"
        out.append(_md_row([cmp["label"], cmp["config"], levels_text(a, by_id[cmp["config"]]),
                            f"{cmp['ratio']:.3f}", ci, f"{cmp['p_adjusted']:.3g}",
                            cmp["verdict"], cmp["error"]]))  # fmt: skip
    for kind, heading in (("main", "Factor effects (averaged over the other factors)"),
                          ("interaction", "Interactions: does one factor's effect depend on "
                           "another's level?")):  # fmt: skip
        rows = [e for e in a.effects if e["kind"] == kind]
        if not rows:
            continue
        out.append(f"\n## {heading}\n")
        out.append(_md_row(["metric", "effect", "verdict", "error", "replicates"]))
        out.append(_md_row(["---"] * 5))
        out += [_md_row([e["label"], effect_name(e), e["verdict"], e["error"],
                         str(e["replicates"])]) for e in rows]  # fmt: skip
    if a.fleet:
        out.append("\n## Host groups\n")
        out += [md(line) for line in fleet_lines(a)]
    out += _md_replication(a)
    out += _md_table(a, "Builds", BUILDS_NOTE, builds_table) if a.builds else []
    out += _md_table(a, "Bytes written by phase", PHASES_NOTE, phases_table) if a.phases else []
    if a.warnings:
        out.append("\n## Warnings\n")
        out += [f"- {md(w)}" for w in a.warnings]
    if exp.get("run_notes"):
        out.append("\n## What ran otherwise than the file says\n")
        out += [f"- {md(n)}" for n in exp["run_notes"]]
    out.append("\n## Metrics\n")
    out.append(", ".join(f"{label} ({unit}, {'higher' if hi else 'lower'} is better)"
                         for label, hi, unit in METRICS.values()) + ".")  # fmt: skip
    return "\n".join(out) + "\n"
