"""`pgsweep report`: the analysis rendered for a terminal, as Markdown (the seeds' tables:
rounds x configurations with mean and median rows, then verdicts and factor effects), or
as JSON (the analysis itself; schema in docs/report-schema.md). HTML is report_html."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from .analysis import METRICS, Analysis, Config
from .plan import short_names

FORMATS = ("terminal", "markdown", "html", "json")


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


def render_terminal(a: Analysis, console: Console) -> None:
    exp = a.experiment
    title = (f"{exp['name']}: TPS per configuration, baseline {a.baseline} "
             f"(PostgreSQL {exp['postgres_version']})")  # fmt: skip
    table = Table(title=title)
    for col in ("config", "levels", "n", "mean", "median", "95% CI", "CV", "p99 ms", "verdict"):
        table.add_column(col, justify="right" if col in ("n", "mean", "median", "CV") else "left")
    verdicts = _verdicts(a, "tps")
    for c in a.configurations:
        s = c.summary.get("tps") or {}
        p99 = c.summary.get("latency.p99_ms") or {}
        table.add_row(
            c.id, levels_text(a, c), str(s.get("n", 0)), _num(s.get("mean")),
            _num(s.get("median")), _interval(s),
            f"{s['cv']:.1%}" if s.get("cv") is not None else "-",
            _num(p99.get("median"), 2),
            "baseline" if c.id == a.baseline else verdicts.get(c.id, "-"),
        )  # fmt: skip
    console.print(table)
    for e in a.effects:
        if e["metric"] == "tps":
            console.print(
                f"effect of {e['factor']} = {e['level']} (vs {e['reference']}), averaged over "
                f"the other factors: {e['verdict']}",
                markup=False, highlight=False,
            )  # fmt: skip
    for w in a.warnings:
        console.print(f"warning: {w}", markup=False, highlight=False)


def _md_row(cells: list[str]) -> str:
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"


def render_markdown(a: Analysis) -> str:
    exp, out = a.experiment, []
    out.append(f"# {exp['name']}\n")
    out.append(f"PostgreSQL {exp['postgres_version']}, {exp['rounds']} rounds, seed "
               f"{exp['seed']}, baseline **{a.baseline}**. TPS of each trial; rows are "
               "rounds (each ran every configuration once, in shuffled order).\n")  # fmt: skip
    configs = a.configurations
    out.append(_md_row(["", *[f"{c.id}" for c in configs]]))
    out.append(_md_row(["---"] * (len(configs) + 1)))
    out.append(_md_row(["levels", *[levels_text(a, c) for c in configs]]))
    rounds = sorted({r for c in configs for r in c.values.get("tps", {})})
    for r in rounds:
        out.append(
            _md_row([f"round {r}", *[_num(c.values.get("tps", {}).get(r)) for c in configs]])
        )
    for stat in ("mean", "median"):
        row = [_num((c.summary.get("tps") or {}).get(stat)) for c in configs]
        out.append(_md_row([f"**{stat}**", *row]))
    out.append("\n## Against the baseline\n")
    out.append(_md_row(["metric", "config", "levels", "ratio", "95% CI", "p (Holm)", "verdict"]))
    out.append(_md_row(["---"] * 7))
    by_id = {c.id: c for c in configs}
    for cmp in a.comparisons:
        ci = "-" if cmp["ci_low"] is None else f"{cmp['ci_low']:.3f} to {cmp['ci_high']:.3f}"
        p = "-" if cmp["p_adjusted"] is None else f"{cmp['p_adjusted']:.3g}"
        out.append(_md_row([cmp["label"], cmp["config"], levels_text(a, by_id[cmp["config"]]),
                            f"{cmp['ratio']:.3f}", ci, p, cmp["verdict"]]))  # fmt: skip
    if a.effects:
        out.append("\n## Factor effects (averaged over the other factors, within rounds)\n")
        out.append(_md_row(["factor", "level", "vs", "metric", "verdict"]))
        out.append(_md_row(["---"] * 5))
        for e in a.effects:
            out.append(_md_row([e["factor"], str(e["level"]), str(e["reference"]), e["label"],
                                e["verdict"]]))  # fmt: skip
    for it in a.interactions:
        out.append(f"\n## Does the effect of {it['factor']} depend on {it['by']}? (TPS)\n")
        out.append(_md_row([f"{it['by']}", f"{it['factor']}", "ratio", "95% CI"]))
        out.append(_md_row(["---"] * 4))
        for row in it["table"]:
            ci = "-"
            if row.get("ci_low") is not None:
                ci = f"{row['ci_low']:.3f} to {row['ci_high']:.3f}"
            ratio = f"{row['ratio']:.3f}" if "ratio" in row else "-"
            out.append(
                _md_row([str(row["at"]), f"{row['level']} vs {row['reference']}", ratio, ci])
            )
        dep = it["depends"]
        if dep and dep.get("p") is not None:
            word = "yes" if dep["p"] < 0.05 else "no significant dependence"
            out.append(
                f"\nRatio of the two effects: {dep['ratio']:.3f} "
                f"[{dep['ci_low']:.3f}, {dep['ci_high']:.3f}], p = {dep['p']:.3g}: {word}."
            )
    if a.warnings:
        out.append("\n## Warnings\n")
        out += [f"- {w}" for w in a.warnings]
    out.append("\n## Metrics\n")
    out.append(", ".join(f"{label} ({unit}, {'higher' if hi else 'lower'} is better)"
                         for label, hi, unit in METRICS.values()) + ".")  # fmt: skip
    return "\n".join(out) + "\n"
