"""From a results folder to what a report says: per-configuration summaries of each metric,
comparisons with the baseline (Holm-adjusted, with verdicts), marginal effects of every
factor, two-factor interaction tables, and warnings. The result is plain data: the JSON
report is this, serialised; the other formats render it."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from itertools import combinations
from typing import Any

from . import stats
from .store import Store

# metric -> (label, higher is better, unit); values per trial come from trial.tps or metric
METRICS: dict[str, tuple[str, bool, str]] = {
    "tps": ("TPS", True, "tx/s"),
    "latency.p50_ms": ("p50 latency", False, "ms"),
    "latency.p95_ms": ("p95 latency", False, "ms"),
    "latency.p99_ms": ("p99 latency", False, "ms"),
    "io.device_bytes_written_per_tx": ("device bytes written / tx", False, "B"),
    "io.wal_bytes_per_tx": ("WAL bytes / tx", False, "B"),
}
# A workload that writes less than this per transaction (select-only) writes next to
# nothing: ratios of such values are noise, so those trials are left out of the byte metrics.
NEGLIGIBLE_BYTES = 64.0
CV_WARN = 0.05
WINDOW_TOLERANCE = 0.02


@dataclass
class Config:
    id: str
    levels: dict[str, Any]
    label: str
    group: int
    values: dict[str, dict[int, float]] = field(default_factory=dict)  # metric -> round -> v
    negligible: list[str] = field(default_factory=list)  # byte metrics under NEGLIGIBLE_BYTES
    summary: dict[str, dict[str, Any]] = field(default_factory=dict)
    failed: int = 0


@dataclass
class Analysis:
    experiment: dict[str, Any]
    factors: list[str]
    cluster_factors: list[str]
    baseline: str
    configurations: list[Config]
    comparisons: list[dict[str, Any]]
    effects: list[dict[str, Any]]
    interactions: list[dict[str, Any]]
    warnings: list[str]

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, default=str, allow_nan=False)


def analyse(
    store: Store, baseline: dict[str, Any] | None = None, margin: float | None = None
) -> Analysis:
    exp = store.experiment()
    assert exp is not None
    plan = json.loads(exp["plan_json"])
    factors = [f["name"] for f in plan["factors"]]
    cluster_factors = [f["name"] for f in plan["factors"] if f.get("cost") == "cluster"]
    configs = _load(store)
    base = _baseline(configs, factors, baseline)
    for c in configs:
        c.summary = {
            m: asdict(s)
            for m in METRICS
            if (s := stats.summarize(list(c.values.get(m, {}).values())))
        }
    comparisons = _comparisons(configs, base, margin)
    effects = _effects(configs, factors, margin)
    interactions = [_interaction(configs, a, b) for a, b in combinations(factors, 2)][:6]
    warnings = _warnings(configs, cluster_factors, plan, store)
    info = {
        k: exp[k] for k in ("name", "seed", "created_at", "postgres_version", "pgsweep_version")
    }
    info["rounds"], info["rebuild"] = plan.get("rounds"), plan.get("rebuild")
    return Analysis(info, factors, cluster_factors, base.id, configs, comparisons, effects,
                    interactions, warnings)  # fmt: skip


def _load(store: Store) -> list[Config]:
    configs = {
        r["id"]: Config(r["id"], json.loads(r["levels_json"]), r["label"], r["grp"])
        for r in store.rows("SELECT * FROM configuration ORDER BY id")
    }
    for t in store.rows("SELECT id, config_id, round, status, tps FROM trial"):
        c = configs[t["config_id"]]
        if t["status"] != "ok":
            c.failed += 1
            continue
        c.values.setdefault("tps", {})[t["round"]] = t["tps"]
    names = tuple(m for m in METRICS if m != "tps")
    marks = ", ".join("?" * len(names))
    for r in store.rows(
        "SELECT t.config_id, t.round, m.name, m.value FROM metric m JOIN trial t ON "
        f"t.id = m.trial_id WHERE t.status = 'ok' AND m.name IN ({marks})",
        names,
    ):
        c = configs[r["config_id"]]
        if METRICS[r["name"]][2] == "B" and r["value"] < NEGLIGIBLE_BYTES:
            if r["name"] not in c.negligible:
                c.negligible.append(r["name"])
            continue
        c.values.setdefault(r["name"], {})[r["round"]] = r["value"]
    return list(configs.values())


def _baseline(configs: list[Config], factors: list[str], wanted: dict[str, Any] | None) -> Config:
    if wanted:
        for c in configs:
            if all(str(c.levels.get(k)) == str(v) for k, v in wanted.items()):
                return c
    return configs[0]  # configuration ids follow the level order: c01 holds every first level


def _comparisons(configs: list[Config], base: Config, margin: float | None) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for metric, (label, higher, _) in METRICS.items():
        rows = []
        for c in configs:
            if c is base or metric not in c.values or metric not in base.values:
                continue
            cmp = stats.compare(c.values[metric], base.values[metric])
            if cmp is not None:
                rows.append((c, cmp))
        adjusted = stats.holm([cmp.p for _, cmp in rows])
        for (c, cmp), p_adj in zip(rows, adjusted, strict=True):
            cmp = stats.Comparison(**{**asdict(cmp), "p_adjusted": p_adj})
            out.append({"metric": metric, "label": label, "config": c.id, "baseline": base.id,
                        **asdict(cmp), "verdict": stats.verdict(cmp, higher, margin)})  # fmt: skip
    return out


def _per_round_log_ratio(
    configs: list[Config], factor: str, level: Any, ref: Any, metric: str, where: dict[str, Any]
) -> dict[int, float]:
    """For each round: the mean over matching configuration pairs (same levels of every
    other factor, restricted by `where`) of log(value at `level` / value at `ref`)."""
    by_rest: dict[str, dict[str, Config]] = {}
    for c in configs:
        if any(str(c.levels.get(k)) != str(v) for k, v in where.items()):
            continue
        rest = json.dumps({k: v for k, v in c.levels.items() if k != factor}, sort_keys=True)
        by_rest.setdefault(rest, {})[str(c.levels.get(factor))] = c
    sums: dict[int, list[float]] = {}
    for pair in by_rest.values():
        a, b = pair.get(str(level)), pair.get(str(ref))
        if a is None or b is None:
            continue
        va, vb = a.values.get(metric, {}), b.values.get(metric, {})
        for r in set(va) & set(vb):
            if va[r] > 0 < vb[r]:
                sums.setdefault(r, []).append(math.log(va[r] / vb[r]))
    return {r: math.exp(sum(v) / len(v)) for r, v in sums.items()}


def _levels(configs: list[Config], factor: str) -> list[Any]:
    seen: list[Any] = []
    for c in configs:
        if c.levels.get(factor) not in seen:
            seen.append(c.levels.get(factor))
    return seen


def _effects(
    configs: list[Config], factors: list[str], margin: float | None
) -> list[dict[str, Any]]:
    """Marginal effect of each level against the factor's first level, averaged over the
    other factors within each round."""
    out = []
    for f in factors:
        levels = _levels(configs, f)
        for metric, (label, higher, _) in METRICS.items():
            for level in levels[1:]:
                ratios = _per_round_log_ratio(configs, f, level, levels[0], metric, {})
                cmp = stats.compare(ratios, dict.fromkeys(ratios, 1.0))
                if cmp is None:
                    continue
                out.append({"factor": f, "level": level, "reference": levels[0], "metric": metric,
                            "label": label, **asdict(cmp),
                            "verdict": stats.verdict(cmp, higher, margin)})  # fmt: skip
    return out


def _interaction(configs: list[Config], a: str, b: str) -> dict[str, Any]:
    """TPS effect of a's levels (against its first) at each level of b, and for the first
    two levels of each, whether the effect of a depends on b (difference of log ratios)."""
    la, lb = _levels(configs, a), _levels(configs, b)
    table = []
    for vb in lb:
        for va in la[1:]:
            ratios = _per_round_log_ratio(configs, a, va, la[0], "tps", {b: vb})
            cmp = stats.compare(ratios, dict.fromkeys(ratios, 1.0))
            table.append(
                {"at": vb, "level": va, "reference": la[0], **(asdict(cmp) if cmp else {})}
            )
    test = None
    if len(la) >= 2 and len(lb) >= 2:
        hi = _per_round_log_ratio(configs, a, la[1], la[0], "tps", {b: lb[1]})
        lo = _per_round_log_ratio(configs, a, la[1], la[0], "tps", {b: lb[0]})
        cmp = stats.compare(hi, lo)
        test = asdict(cmp) if cmp else None
    return {"factor": a, "by": b, "metric": "tps", "table": table, "depends": test}


def _warnings(configs: list[Config], cluster_factors: list[str], plan: dict[str, Any],
              store: Store) -> list[str]:  # fmt: skip
    out = []
    for c in configs:
        s = c.summary.get("tps")
        n = s["n"] if s else 0
        if n < 3:
            out.append(f"{c.id}: only {n} successful trial(s); intervals need 3 or more")
        if s and s["cv"] is not None and s["cv"] > CV_WARN:
            out.append(f"{c.id}: TPS varies by CV {s['cv']:.1%} across trials (above "
                       f"{CV_WARN:.0%}); add rounds or longer windows")  # fmt: skip
        if c.failed:
            out.append(f"{c.id}: {c.failed} failed trial(s) (`pgsweep show` lists why)")
    for name, (label, _, _) in METRICS.items():
        quiet = [c.id for c in configs if name in c.negligible]
        if quiet:
            out.append(
                f"{label}: {', '.join(quiet)} wrote under {NEGLIGIBLE_BYTES:.0f} B per "
                "transaction in some trials; those trials are not compared on it"
            )
    means: dict[int, list[float]] = {}
    for c in configs:
        for r, v in c.values.get("tps", {}).items():
            if v > 0:  # a trial of 0 TPS has no place on a log scale
                means.setdefault(r, []).append(math.log(v))
    trend = stats.drift({r: math.exp(sum(v) / len(v)) for r, v in means.items()})
    if trend and trend[1] < stats.ALPHA:
        out.append(
            f"TPS drifts across rounds by {trend[0]:+.1%} per round (p = {trend[1]:.3f}): the "
            "machine changed during the run; blocked comparisons absorb most of it"
        )
    checkpoints = [r["value"] for r in store.rows(
        "SELECT m.value FROM metric m JOIN trial t ON t.id = m.trial_id "
        "WHERE t.status = 'ok' AND m.name = 'stability.checkpoints'")]  # fmt: skip
    ratios = [r["value"] for r in store.rows(
        "SELECT value FROM metric WHERE name = 'window.tps_vs_summary'")]  # fmt: skip
    off = [v for v in ratios if abs(v - 1) > WINDOW_TOLERANCE]
    if off:
        worst = max(off, key=lambda v: abs(v - 1))
        out.append(
            f"{len(off)} trial(s) counted a window TPS from the transaction log more than "
            f"{WINDOW_TOLERANCE:.0%} away from pgbench's own (worst {worst:.3f}x): check "
            "those trials' logs"
        )
    hit = sum(v > 0 for v in checkpoints)
    if 0 < hit < len(checkpoints):
        out.append(f"checkpoints started inside {hit} of {len(checkpoints)} measured windows: "
                   "those trials paid for writes the others did not")  # fmt: skip
    if cluster_factors and plan.get("rebuild") != "per_round":
        out.append(f"{', '.join(cluster_factors)}: each level ran on one cluster built once, "
                   "so their intervals rest on fewer independent replicates than the rounds "
                   "suggest (rebuild = \"per_round\" replicates them)")  # fmt: skip
    return out
