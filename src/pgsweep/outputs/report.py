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
from .sentences import adaptive_line, fleet_lines


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
