"""The HTML report: one self-contained file (inline SVG plots from matplotlib, inline CSS,
no script, no CDN) that works offline, reads on a phone and prints. Jinja2 escapes every
value that comes from the experiment file or the machine."""

from __future__ import annotations

import io
import re
import statistics
from typing import Any

import jinja2
import matplotlib

matplotlib.use("svg")
import matplotlib.pyplot as plt

from ..analysis import NEGLIGIBLE_BYTES, Analysis, Config
from ..store import Fact, Results
from .builds import BUILDS_NOTE, PHASES_NOTE, builds_table, phases_table
from .report import REPLICATION_COLUMNS, adaptive_line, effect_name, levels_text

# text.parse_math off: a level such as "$5$" is shown as written, never as mathtext
plt.rcParams.update({"svg.fonttype": "none", "font.size": 9, "figure.dpi": 100,
                     "text.parse_math": False})  # fmt: skip
_ENV = jinja2.Environment(
    loader=jinja2.PackageLoader("pgsweep", "outputs/templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
)


def render(a: Analysis, results: Results) -> str:
    verdicts = {c["config"]: c["verdict"] for c in a.comparisons if c["metric"] == "tps"}
    configs = []
    for c in a.configurations:
        s = c.summary.get("tps") or {}
        p99 = c.summary.get("latency.p99_ms") or {}
        verdict = "baseline" if c.id == a.baseline else verdicts.get(c.id, "-")
        configs.append({
            "id": c.id, "levels": {f: str(c.levels.get(f)) for f in a.factors},
            "n": s.get("n", 0), "mean": _num(s.get("mean")), "median": _num(s.get("median")),
            "ci": _ci(s), "cv": f"{s['cv']:.1%}" if s.get("cv") is not None else "-",
            "p99": _num(p99.get("median"), 2), "verdict": verdict, "verdict_class": _cls(verdict),
        })  # fmt: skip
    comparisons = [
        {"label": r["label"], "config": r["config"], "ratio": f"{r['ratio']:.3f}",
         "ci": f"{r['ci_low']:.3f} to {r['ci_high']:.3f}", "p": f"{r['p_adjusted']:.3g}",
         "error": r["error"], "verdict": r["verdict"], "verdict_class": _cls(r["verdict"])}
        for r in a.comparisons
    ]  # fmt: skip
    effects = [{**e, "name": effect_name(e), "verdict_class": _cls(e["verdict"])}
               for e in a.effects]  # fmt: skip
    environment = _host_first(results.environment())
    return _ENV.get_template("report.html.j2").render(
        exp=a.experiment, baseline=a.baseline, factors=a.factors, configs=configs,
        comparisons=comparisons, effects=effects, warnings=a.warnings, rounds=a.rounds,
        whole_plot_factors=", ".join(a.whole_plot_factors), environment=environment,
        alpha=a.method["alpha"], plots=plots(a, results),
        adaptive=adaptive_line(a.method["adaptive"]) if "adaptive" in a.method else "",
        replication=[{"config": r["config"], "cells": [_num(r.get(k), d)
                                                       for k, _, d in REPLICATION_COLUMNS]}
                     for r in a.replication],
        replication_columns=[h for _, h, _ in REPLICATION_COLUMNS],
        tables=[{"name": name, "title": title, "note": note, "header": t[0], "rows": t[1]}
                for name, title, note, t, show in (
                    ("builds", "Builds", BUILDS_NOTE, builds_table(a), a.builds),
                    ("phases", "Bytes written by phase", PHASES_NOTE, phases_table(a), a.phases))
                if show],
    )  # fmt: skip


def _host_first(facts: list[Fact]) -> list[Fact]:
    """The host, then every other scope by name (configurations before clusters, unlike
    `pgsweep show --env`): the order this report has always listed them in."""
    return sorted(facts, key=lambda f: (f.scope != "host", f.scope, f.name))


def _num(v: float | None, digits: int = 1) -> str:
    return "-" if v is None else f"{v:,.{digits}f}"


def _ci(s: dict[str, Any]) -> str:
    return "-" if s.get("ci_low") is None else f"{s['ci_low']:,.1f} to {s['ci_high']:,.1f}"


def _cls(verdict: str) -> str:
    return (
        verdict.split(":")[0]
        if verdict.split(":")[0] in ("faster", "slower", "lower", "higher")
        else ""
    )


def _svg(fig: Any) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    plt.close(fig)
    text = buf.getvalue()
    text = re.sub(r"<metadata>.*?</metadata>", "", text, flags=re.S)  # creator and date
    return text[text.index("<svg") :]  # drop the XML prolog and DOCTYPE: inline SVG


def plots(a: Analysis, results: Results) -> list[dict[str, str]]:
    out = [_tps_plot(a)]
    out += [p for f in a.factors if (p := _numeric_factor_plot(a, f))]
    out += [p for p in (_latency_plot(a), _bytes_plot(a)) if p]
    out += _over_time_plots(a, results)
    return out


def _labels(a: Analysis) -> list[str]:
    return [f"{c.id}: {levels_text(a, c)}" for c in a.configurations]


def _tps_plot(a: Analysis) -> dict[str, str]:
    fig, ax = plt.subplots(figsize=(7, 0.45 * len(a.configurations) + 1.2))
    for i, c in enumerate(a.configurations):
        s = c.summary.get("tps")
        if not s:
            continue
        ax.plot(list(c.values["tps"].values()), [i] * len(c.values["tps"]), "o", color="#bbb", ms=4)
        if s["ci_low"] is not None:  # the model's level over this run, with its interval
            level = s["level"]
            ax.errorbar(level, i, xerr=[[level - s["ci_low"]], [s["ci_high"] - level]],
                        fmt="o", color="#1f5fbf", capsize=4)  # fmt: skip
        else:
            ax.plot(s["mean"], i, "o", color="#1f5fbf")
    ax.set_yticks(range(len(a.configurations)), _labels(a))
    ax.invert_yaxis()
    ax.set_xlabel("TPS (dots: trials; blue: level over this run's rounds, 95% interval)")
    ax.grid(axis="x", alpha=0.3)
    return {"name": "tps", "svg": _svg(fig), "caption": "TPS per configuration"}


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _numeric_factor_plot(a: Analysis, factor: str) -> dict[str, str] | None:
    levels = {c.levels.get(factor) for c in a.configurations}
    if len(levels) < 2 or not all(_is_number(v) for v in levels):
        return None
    lines: dict[str, list[tuple[float, float]]] = {}
    for c in a.configurations:
        s = c.summary.get("tps")
        if s:
            rest = ", ".join(f"{f}={c.levels.get(f)}" for f in a.factors if f != factor) or "all"
            lines.setdefault(rest, []).append((float(c.levels[factor]), s["mean"]))
    fig, ax = plt.subplots(figsize=(7, 3.6))
    for rest, pts in lines.items():
        pts.sort()
        ax.plot([x for x, _ in pts], [y for _, y in pts], "o-", label=rest)
    ax.set_xlabel(factor)
    ax.set_ylabel("mean TPS")
    ax.grid(alpha=0.3)
    if len(lines) > 1:
        ax.legend(fontsize=7)
    return {"name": f"factor-{factor}", "svg": _svg(fig), "caption": f"TPS against {factor}"}


def _latency_plot(a: Analysis) -> dict[str, str] | None:
    keys = [("latency.p50_ms", "p50"), ("latency.p95_ms", "p95"), ("latency.p99_ms", "p99")]
    if not any(c.summary.get(k) for c in a.configurations for k, _ in keys):
        return None
    fig, ax = plt.subplots(figsize=(7, 0.45 * len(a.configurations) + 1.2))
    for j, (key, name) in enumerate(keys):
        xs = [(c.summary.get(key) or {}).get("median") for c in a.configurations]
        ys = [i + (j - 1) * 0.2 for i in range(len(a.configurations))]
        ax.plot([x if x is not None else float("nan") for x in xs], ys, "o", label=name)
    ax.set_yticks(range(len(a.configurations)), _labels(a))
    ax.invert_yaxis()
    ax.set_xlabel("latency, ms (median over trials of each trial's percentile)")
    ax.legend(fontsize=7)
    ax.grid(axis="x", alpha=0.3)
    return {"name": "latency", "svg": _svg(fig), "caption": "Latency percentiles per configuration"}


def _bytes_plot(a: Analysis) -> dict[str, str] | None:
    """Bytes written per transaction. A configuration whose transactions write no WAL
    (select-only) writes nothing of its own: its device bytes are other processes' and
    it gets no bar; when no configuration writes, one line says why instead of a plot."""
    keys = [("io.device_bytes_written_per_tx", "device"), ("io.wal_bytes_per_tx", "WAL")]
    writing = [c for c in a.configurations if "io.wal_bytes_per_tx" in c.values]
    if not writing:
        if not any(c.negligible for c in a.configurations):
            return None  # no byte counters at all (e.g. every trial failed)
        why = (f"No bytes-per-transaction plot: every configuration wrote under "
               f"{NEGLIGIBLE_BYTES:.0f} B of WAL per transaction (a read-only workload), "
               "so those figures are noise.")  # fmt: skip
        return {"name": "bytes", "svg": "", "caption": why}
    fig, ax = plt.subplots(figsize=(7, 0.45 * len(a.configurations) + 1.2))
    height = 0.38
    for j, (key, name) in enumerate(keys):
        xs = [
            ((c.summary.get(key) or {}).get("mean") or 0) / 1024 if c in writing else 0
            for c in a.configurations
        ]
        ax.barh([i + (j - 0.5) * height for i in range(len(xs))], xs, height, label=name)
    ax.set_yticks(range(len(a.configurations)), _labels(a))
    ax.invert_yaxis()
    ax.set_xlabel("kB written per transaction (mean over trials)")
    ax.legend(fontsize=7)
    return {"name": "bytes", "svg": _svg(fig), "caption": "Bytes written per transaction"}


def _representative(c: Config, tps: dict[str, dict[str, float]]) -> str | None:
    """The trial whose TPS is closest to its configuration's median (the first such trial
    in run order)."""
    rows = tps.get(c.id)
    if not rows:
        return None
    median = statistics.median(rows.values())
    return min(rows, key=lambda tid: abs(rows[tid] - median))


def _over_time_plots(a: Analysis, results: Results) -> list[dict[str, str]]:
    tps: dict[str, dict[str, float]] = {}  # configuration -> trial id -> TPS, run order
    for t in results.trials(ok_only=True):
        if t.tps is not None:
            tps.setdefault(t.config_id, {})[t.id] = t.tps
    series = []
    series_ids: list[tuple[str, str]] = []  # (label, trial id)
    for c in a.configurations:
        tid = _representative(c, tps)
        if tid is None:
            continue
        rows: list[dict[str, Any]] = [
            {"second": s.second, "tps": s.tps, "latency_p99_ms": s.latency_p99_ms}
            for s in results.seconds(tid)
        ]
        if not rows:  # no transaction log: pgbench's progress lines
            rows = [
                {"second": p.at_s - 1, "tps": p.tps, "latency_p99_ms": None}
                for p in results.samples(tid)
            ]
        series.append((f"{c.id} ({tid})", rows))
        series_ids.append((f"{c.id} ({tid})", tid))
    if not series:
        return []
    out = []
    for key, label, name in (("tps", "TPS", "tps-over-time"),
                             ("latency_p99_ms", "p99 latency, ms", "p99-over-time")):  # fmt: skip
        if not any(r[key] is not None for _, rows in series for r in rows):
            continue
        fig, ax = plt.subplots(figsize=(7, 3.4))
        for name_, rows in series:
            ax.plot([r["second"] for r in rows], [r[key] for r in rows], label=name_, lw=1)
            if key == "tps":  # stalls: seconds without a transaction, marked
                stalls = [r["second"] for r in rows if r["tps"] is not None and r["tps"] <= 0]
                ax.plot(stalls, [0] * len(stalls), "x", color="#c0392b", ms=6)
        ax.set_xlabel("second of the measured window")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        out.append({"name": name, "svg": _svg(fig),
                    "caption": f"Per-second {label} of a representative trial (closest to its "
                               "configuration's median TPS)"
                               + ("; red crosses: stalls (no transaction completed)"
                                  if key == "tps" else "")})  # fmt: skip
    lag = _lag_plot(series_ids, results)
    return out + ([lag] if lag else [])


def _lag_plot(trials: list[tuple[str, str]], results: Results) -> dict[str, str] | None:
    """Per-second replay lag (the largest over the standbys) of the same representative
    trials, for runs with standbys."""
    seconds = results.standby_seconds()
    fig = None
    for label, tid in trials:
        worst: dict[int, float] = {}
        for s in seconds.get(tid, []):
            worst[s.second] = max(worst.get(s.second, 0.0), s.replay_lag_ms or 0.0)
        if not worst:
            continue
        if fig is None:
            fig, ax = plt.subplots(figsize=(7, 3.4))
        ax.plot(sorted(worst), [worst[k] for k in sorted(worst)], label=label, lw=1)
    if fig is None:
        return None
    ax.set_xlabel("second of the measured window")
    ax.set_ylabel("replay lag, ms (worst standby)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return {"name": "replay-lag-over-time", "svg": _svg(fig),
            "caption": "Per-second replay lag of the same representative trials (NULL, caught "
                       "up and idle, drawn as 0)"}  # fmt: skip
