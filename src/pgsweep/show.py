"""Reading a results folder: per-configuration TPS summary (n, mean, median), failures, and
the plan as `pgsweep plan` prints it. Statistics beyond mean and median come later.
The p99 column is the median over trials of each trial's 99th percentile latency."""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from .errors import PgsweepError
from .plan import Plan, short_names
from .store import Store
from .units import human_seconds


@dataclass
class ConfigSummary:
    id: str
    planned: int
    n: int
    failed: int
    mean_tps: float | None
    median_tps: float | None
    median_p99_ms: float | None = None


def open_store(results: Path) -> Store:
    db = results / "results.db"
    if not db.is_file():
        raise PgsweepError(
            f"{results} holds no results.db",
            where=str(results),
            fix="name a folder written by `pgsweep run`",
        )
    return Store(db)


def summarize(store: Store) -> list[ConfigSummary]:
    exp = store.experiment()
    rounds = json.loads(exp["plan_json"])["rounds"] if exp else 0
    out = []
    for c in store.rows("SELECT id FROM configuration ORDER BY id"):
        trials = store.rows("SELECT status, tps FROM trial WHERE config_id = ?", (c["id"],))
        tps = [t["tps"] for t in trials if t["status"] == "ok"]
        p99 = [
            r["value"]
            for r in store.rows(
                "SELECT m.value FROM metric m JOIN trial t ON t.id = m.trial_id "
                "WHERE t.config_id = ? AND t.status = 'ok' AND m.name = 'latency.p99_ms'",
                (c["id"],),
            )
        ]
        out.append(
            ConfigSummary(
                c["id"],
                rounds,
                len(tps),
                sum(t["status"] == "failed" for t in trials),
                statistics.fmean(tps) if tps else None,
                statistics.median(tps) if tps else None,
                statistics.median(p99) if p99 else None,
            )
        )
    return out


def _fmt(value: float | None) -> str:
    return f"{value:,.1f}" if value is not None else "-"


def render_summary(store: Store, console: Console) -> None:
    exp = store.experiment()
    assert exp is not None
    factors = [f["name"] for f in json.loads(exp["plan_json"])["factors"]]
    levels = {
        c["id"]: json.loads(c["levels_json"])
        for c in store.rows("SELECT id, levels_json FROM configuration")
    }
    title = f"{exp['name']}: TPS per configuration (PostgreSQL {exp['postgres_version']})"
    table = Table(title=title)
    table.add_column("config")
    for header in short_names(factors).values():
        table.add_column(header, min_width=len(header))
    for col in ("n", "failed", "mean TPS", "median TPS", "median p99 ms"):
        table.add_column(col, justify="right")
    for s in summarize(store):
        row = [str(levels[s.id].get(name, "")) for name in factors]
        table.add_row(
            s.id,
            *row,
            f"{s.n}/{s.planned}",
            str(s.failed),
            _fmt(s.mean_tps),
            _fmt(s.median_tps),
            f"{s.median_p99_ms:,.2f}" if s.median_p99_ms is not None else "-",
        )
    console.print(table)
    for f in store.rows("SELECT id, reason FROM trial WHERE status = 'failed' ORDER BY ord"):
        console.print(
            f"failed {f['id']}: {(f['reason'] or '').splitlines()[0]}",
            markup=False,
            highlight=False,
        )


def render_environment(store: Store, console: Console) -> None:
    """Host first, then the storage under each cluster, then settings per configuration."""
    rows = store.rows(
        "SELECT scope, name, value FROM environment ORDER BY "
        "scope <> 'host', scope LIKE 'cluster-%' DESC, scope, name"
    )
    if not rows:
        console.print("no environment recorded")
        return
    scope = None
    for row in rows:
        if row["scope"] != scope:
            scope = row["scope"]
            heading = {"host": "host"}.get(scope) or (
                f"storage of {scope}"
                if scope.startswith("cluster-")
                else f"settings not at their default, configuration {scope}"
            )
            console.print(f"\n[{heading}]", markup=False)
        console.print(f"  {row['name']} = {row['value']}", markup=False, highlight=False)


def render_plan(plan: Plan, estimate: float, console: Console, notes: list[str]) -> None:
    table = Table(title=f"{len(plan.configurations)} configurations")
    table.add_column("config")
    for header in short_names([f.name for f in plan.factors]).values():
        table.add_column(header, min_width=len(header))
    table.add_column("cluster group", justify="right")
    for c in plan.configurations:
        table.add_row(c.id, *(str(v) for v in c.levels.values()), str(c.group + 1))
    console.print(table)
    console.print(
        f"{len(plan.trials)} trials: {len(plan.configurations)} configurations x "
        f"{plan.rounds} rounds, seed {plan.seed}, clusters rebuilt {plan.rebuild.replace('_', ' ')}"
    )
    grouped = plan.grouped_factors()
    if grouped:
        console.print(
            f"split-plot order: {', '.join(grouped)} need a new cluster, so their levels "
            "are grouped and the other factors shuffled within each group; comparisons "
            "across groups rest on fewer independent replicates"
        )
    order = " ".join(t.id for t in plan.trials)
    console.print(f"run order: {order}", markup=False, highlight=False, soft_wrap=False)
    console.print(f"estimated duration: {human_seconds(estimate)}")
    for note in notes:
        console.print(f"note: {note}")


def render_compare(result: dict[str, Any], a: Path, b: Path, console: Console) -> None:
    table = Table(title=f"TPS in {b} against {a} (same factor levels)")
    for col in ("levels", "n before", "n after", "ratio", "95% CI", "verdict"):
        table.add_column(col)
    for r in result["matched"]:
        levels = ", ".join(f"{k}={v}" for k, v in r["levels"].items()) or "(no factors)"
        ci = "-" if r["ci_low"] is None else f"{r['ci_low']:.3f} to {r['ci_high']:.3f}"
        table.add_row(levels, str(r["n_b"]), str(r["n_a"]), f"{r['ratio']:.3f}", ci, r["verdict"])
    console.print(table)
    for side, rows in (("before", result["only_in_a"]), ("after", result["only_in_b"])):
        for levels in rows:
            console.print(f"only in {side}: {levels}", markup=False, highlight=False)
    for w in result["warnings"]:
        console.print(f"warning: {w}", markup=False, highlight=False)
