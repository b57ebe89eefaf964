"""Reading a results folder: per-configuration TPS summary (n, mean, median), failures, and
the plan as `pgsweep plan` prints it. Statistics beyond mean and median come later.
The p99 column is the median over trials of each trial's 99th percentile latency."""

from __future__ import annotations

import shlex
import statistics
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from ..core import printable
from ..plan import Adaptive, Plan, round_spans, shard_rounds, short_names
from ..store import Results
from ..units import human_seconds
from .safetext import term
from .terminal import print_table


@dataclass
class ConfigSummary:
    id: str
    planned: int
    n: int
    failed: int
    mean_tps: float | None
    median_tps: float | None
    median_p99_ms: float | None = None


def open_store(results: Path) -> Results:
    """The results in a folder, read-only (PgsweepError if it holds none)."""
    return Results(results)


def summarize(results: Results) -> list[ConfigSummary]:
    exp = results.experiment()
    all_trials = results.trials()
    rounds = len(results.rounds_here())  # a shard's, or the merged shards'
    if exp.plan.get("adaptive"):  # it may have stopped early: out of the rounds it ran
        rounds = max((t.round for t in all_trials), default=0)
    p99_by_trial = results.metric("latency.p99_ms", ok_only=True)
    out = []
    for c in results.configurations():
        trials = [t for t in all_trials if t.config_id == c.id]
        tps = [t.tps for t in trials if t.ok and t.tps is not None]
        p99 = [p99_by_trial[t.id] for t in trials if t.id in p99_by_trial]
        out.append(
            ConfigSummary(
                c.id,
                rounds,
                len(tps),
                sum(t.status == "failed" for t in trials),
                statistics.fmean(tps) if tps else None,
                statistics.median(tps) if tps else None,
                statistics.median(p99) if p99 else None,
            )
        )
    return out


def _fmt(value: float | None) -> str:
    return f"{value:,.1f}" if value is not None else "-"


def render_summary(results: Results, console: Console) -> None:
    exp = results.experiment()
    factors = exp.factors
    levels = {c.id: c.levels for c in results.configurations()}
    title = f"{exp.name}: TPS per configuration (PostgreSQL {exp.postgres_version})"
    console.print(term(title))
    table = Table(box=None, pad_edge=False, show_edge=False, header_style="bold")
    table.add_column("config", no_wrap=True)
    for header in short_names(factors).values():
        table.add_column(term(header), min_width=len(header))
    for col in ("n", "failed", "mean TPS", "median TPS", "median p99 ms"):
        table.add_column(col, justify="right", no_wrap=True)
    for s in summarize(results):
        row = [term(levels[s.id].get(name, "")) for name in factors]
        table.add_row(
            term(s.id),
            *row,
            f"{s.n}/{s.planned}",
            str(s.failed),
            _fmt(s.mean_tps),
            _fmt(s.median_tps),
            f"{s.median_p99_ms:,.2f}" if s.median_p99_ms is not None else "-",
        )
    print_table(console, table)
    tools = sorted({_tool(t) for t in results.trials() if _tool(t)})
    if tools:
        console.print(printable(f"workload: {', '.join(tools)} (show --commands: each "
                                "trial's command line)"), markup=False, highlight=False)
    for t in results.trials():
        if t.ok:
            continue
        console.print(
            printable(f"failed {t.id}: {(t.reason or ' ').splitlines()[0]}"),
            markup=False,
            highlight=False,
        )


def _tool(t: Any) -> str:
    """The tool and version a trial ran, as it recorded them (trials before issue 27: "")."""
    return " ".join(t.effective[k] for k in ("workload.tool", "workload.tool_version")
                    if k in t.effective)  # fmt: skip


def render_commands(results: Results, console: Console) -> None:
    """Every trial's workload tool, its version and its command line, in run order."""
    for t in results.trials():
        argv = " ".join(shlex.quote(a) for a in t.pgbench_argv or ()) or "(not started)"
        console.print(printable(f"{t.id} [{_tool(t) or 'tool not recorded'}] {argv}"),
                      markup=False, highlight=False, soft_wrap=True)  # fmt: skip


def render_environment(results: Results, console: Console) -> None:
    """Host first, then the storage under each cluster, then settings per configuration."""
    facts = results.environment()
    if not facts:
        console.print("no environment recorded")
        return
    scope = None
    for fact in facts:
        if fact.scope != scope:
            scope = fact.scope
            heading = {"host": "host", "notes": "what ran otherwise than the file says",
                       "roles": "where each role ran"}.get(scope) or (
                f"storage of {scope}"
                if scope.startswith("cluster-")
                else f"settings not at their default, configuration {scope}"
            )
            console.print(f"\n[{heading}]", markup=False)
        # values come from the server: shown, never obeyed (no escape reaches the terminal)
        console.print(f"  {printable(fact.name)} = {printable(fact.value)}", markup=False,
                      highlight=False)  # fmt: skip


def render_plan(plan: Plan, estimate: tuple[float, float], console: Console,
                notes: list[str]) -> None:  # fmt: skip
    """The configurations, how the run order treats expensive factors, how many independent
    replicates each factor's verdict rests on, the order and the estimated time."""
    table = Table(title=f"{len(plan.configurations)} configurations")
    table.add_column("config")
    for header in short_names([f.name for f in plan.factors]).values():
        table.add_column(term(header), min_width=len(header))
    table.add_column("cluster group", justify="right")
    for c in plan.configurations:
        table.add_row(c.id, *(term(v) for v in c.levels.values()), str(c.group + 1))
    console.print(table)
    at_most = "at most " if plan.adaptive else ""
    console.print(
        f"{at_most}{len(plan.trials)} trials: {len(plan.configurations)} configurations x "
        f"{at_most}{plan.rounds} rounds, seed {plan.seed}"
    )
    if plan.adaptive:
        console.print(adaptive_text(plan.adaptive), markup=False)
    from ..analysis.planning import replication_lines  # loads scipy: plan only

    for line in replication_lines(plan, estimate):
        console.print(line, markup=False, highlight=False)
    order = " ".join(t.id for t in plan.trials)
    console.print(f"run order: {order}", markup=False, highlight=False, soft_wrap=False)
    trials, builds = estimate
    parts = f"trials {human_seconds(trials)}, cluster builds {human_seconds(builds)}"
    console.print(f"estimated duration: {human_seconds(trials + builds)} ({parts})")
    for note in notes:
        console.print(f"note: {note}", markup=False)


def render_fleet(plan: Plan, seconds: list[float], mine: int | None,
                 console: Console) -> None:  # fmt: skip
    """`plan --shards N` / `--shard K/N`: the rounds each shard runs and its time; the
    fleet's is the longest shard's, the groups running at once."""
    table = Table(title=f"{plan.shards} shards (host groups), each running complete rounds")
    for col in ("shard", "rounds", "trials", "estimated"):
        table.add_column(col, justify="right")
    for k, (block, secs) in enumerate(zip(shard_rounds(plan.rounds, plan.shards), seconds,
                                          strict=True), start=1):  # fmt: skip
        mark = " (this run)" if mine == k else ""
        table.add_row(f"{k}/{plan.shards}{mark}", round_spans(block),
                      str(len(plan.shard_trials(k))), human_seconds(secs))  # fmt: skip
    console.print(table)
    console.print(f"fleet ETA: {human_seconds(max(seconds))} with every shard running at once "
                  f"(one machine: {human_seconds(sum(seconds))})", markup=False)  # fmt: skip


def render_builds(root: Path, entries: list[Any], console: Console) -> None:
    """`pgsweep builds`: every entry of the cache (host.builds.entries)."""
    table = Table(title=term(f"PostgreSQL builds in {root}"))
    for col in ("key", "version", "built from", "compile", "size", "last used"):
        table.add_column(col)
    for name, build, facts in entries:
        used = datetime.fromtimestamp(float(facts["mtime"])).strftime("%Y-%m-%d %H:%M")
        size = f"{int(facts['bytes']) / 1024**2:,.0f} MiB"
        if build is None:
            table.add_row(term(name), "-", "(unfinished: --prune removes it)", "-", size, used)
        else:
            table.add_row(term(build.key), term(build.version), term(build.spec.describe()),
                          human_seconds(build.seconds), size, used)  # fmt: skip
    console.print(table)
    logs = sorted(p.name for p in root.glob("*.failed.log"))
    if logs:
        console.print(f"logs of failed builds: {', '.join(logs)}", markup=False)


def build_notes(planned: list[Any]) -> list[str]:
    """What `run` compiles before the first trial (engine.buildprep.PlannedBuild), and how
    long that takes: apart from the trials' estimate, since it is paid once."""
    if not planned:
        return []
    todo = [b for b in planned if not b.cached]
    lines = [
        f"PostgreSQL builds: {len(planned)} ({len(planned) - len(todo)} cached, "
        f"{len(todo)} to compile before the first trial"
        + (f", about {human_seconds(sum(b.seconds for b in todo))})" if todo else ")")
    ]
    for b in planned:
        state = f"cached {b.key}" if b.cached else f"to compile, ~{human_seconds(b.seconds)}"
        lines.append(f"  build {b.spec.describe()}: {state}")
    return lines


def adaptive_text(ad: Adaptive) -> str:
    from ..verdict.words import format_percent  # the verdict package loads scipy

    asked = ("every configuration against the baseline" if ad.decide == "baseline"
             else "every factor effect")  # fmt: skip
    return (f"adaptive rounds: looks after every round from round {ad.min_rounds} and stops "
            f"once {asked} is decided (different, or equivalent within "
            f"{format_percent(ad.precision)}), every interval is narrower than "
            f"±{format_percent(ad.precision)}, or futility says a change of "
            f"{format_percent(ad.interest)} can no longer be found; O'Brien-Fleming "
            "boundaries for t hold the false 'different' rate at alpha over all looks; the "
            "estimate is for the maximum")  # fmt: skip


def render_compare(result: dict[str, Any], a: Path, b: Path, console: Console) -> None:
    table = Table(title=term(f"TPS in {b} against {a} (same factor levels)"))
    level = f"{1 - result['alpha']:.0%}".rstrip("%")
    for col in ("levels", "n before", "n after", "ratio", f"{level}% CI (simultaneous)", "verdict"):
        table.add_column(col)
    for r in result["matched"]:
        levels = ", ".join(f"{k}={v}" for k, v in r["levels"].items()) or "(no factors)"
        ci = "-" if r["ci_low"] is None else f"{r['ci_low']:.3f} to {r['ci_high']:.3f}"
        table.add_row(term(levels), str(r["n_a"]), str(r["n_b"]), f"{r['ratio']:.3f}", ci,
                      term(r["verdict"]))  # fmt: skip
    console.print(table)
    for side, rows in (("before", result["only_in_a"]), ("after", result["only_in_b"])):
        for levels in rows:
            console.print(f"only in {side}: {printable(str(levels))}", markup=False,
                          highlight=False)  # fmt: skip
    for n in result.get("notes", []):
        console.print(f"note: {printable(n)}", markup=False, highlight=False)
    for w in result["warnings"]:
        console.print(f"warning: {printable(w)}", markup=False, highlight=False)
