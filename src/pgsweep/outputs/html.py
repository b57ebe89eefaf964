"""The HTML report: one self-contained file that works offline (inline CSS, inline SVG
plots drawn by outputs/plots.py, one small inline script for zooming per-second plots; no
CDN, nothing fetched), reads on a phone and prints. It answers first: the headline
sentences, the plot that shows them, the explain panels (issue 26, when filled), warnings;
then the details, folded: tables, more plots, rounds, methodology, environment. Jinja2
escapes every value from the experiment file or the machine; the plots escape their own."""

from __future__ import annotations

from collections import Counter
from importlib import resources
from typing import Any

import jinja2
from markupsafe import Markup

from ..analysis import Analysis
from ..analysis.headline import baseline_text
from ..analysis.workload import workload_line
from ..collect import perf
from ..store import Fact, Results
from . import flamegraph, plots
from .builds import BUILDS_NOTE, PHASES_NOTE, builds_table, phases_table
from .explain import IO_SENTENCE, latency_cells
from .plots_time import over_time_plots
from .report import REPLICATION_COLUMNS, effect_name
from .sentences import adaptive_line

_ENV = jinja2.Environment(
    loader=jinja2.PackageLoader("pgsweep", "outputs/templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
)
_ENV.globals["latency_cells"] = latency_cells
_ENV.globals["io_note"] = IO_SENTENCE
TITLES = {"tps": "TPS per configuration", "latency": "latency percentiles",
          "bytes": "bytes per transaction", "tps-over-time": "TPS per second",
          "p99-over-time": "p99 per second",
          "replay-lag-over-time": "replay lag per second",
          "device-writes-over-time": "device writes per second",
          "dirty-over-time": "dirty memory per second"}  # fmt: skip


# the wait states of an explain panel's stacked bars, in order (colour-blind safe: Okabe-Ito)
WAIT_COLOURS = ("#0072b2", "#e69f00", "#009e73", "#cc79a7", "#56b4e9", "#d55e00", "#f0e442",
                "#999999")  # fmt: skip


def _asset(name: str) -> Markup:
    """report.css and report.js, inlined as written (they hold no data)."""
    return Markup(resources.files("pgsweep").joinpath(f"outputs/templates/{name}").read_text())


def render(a: Analysis, results: Results) -> str:
    verdicts = {c["config"]: c["verdict"] for c in a.comparisons if c["metric"] == "tps"}
    configs = []
    for c in a.configurations:
        s = c.summary.get("tps") or {}
        p99 = c.summary.get("latency.p99_ms") or {}
        verdict = "baseline" if c.id == a.baseline else verdicts.get(c.id, "-")
        configs.append({
            "id": c.id, "name": a.names.get(c.id, ""),
            "levels": {f: str(c.levels.get(f)) for f in a.factors},
            "n": s.get("n", 0), "mean": _num(s.get("mean")), "median": _num(s.get("median")),
            "ci": _ci(s), "cv": f"{s['cv']:.1%}" if s.get("cv") is not None else "-",
            "p99": _num(p99.get("median"), 2), "verdict": verdict, "verdict_class": _cls(verdict),
        })  # fmt: skip
    comparisons = [
        {"label": r["label"], "config": r["config"], "name": a.names.get(r["config"], ""),
         "ratio": f"{r['ratio']:.3f}", "ci": f"{r['ci_low']:.3f} to {r['ci_high']:.3f}",
         "p": f"{r['p_adjusted']:.3g}", "error": r["error"], "verdict": r["verdict"],
         "verdict_class": _cls(r["verdict"])}
        for r in a.comparisons
    ]  # fmt: skip
    effects = [{**e, "name": effect_name(e), "verdict_class": _cls(e["verdict"])}
               for e in a.effects]  # fmt: skip
    return _ENV.get_template("report.html.j2").render(
        exp=a.experiment, baseline=a.baseline, baseline_text=baseline_text(a),
        workload=workload_line(a.experiment),
        factors=a.factors, configs=configs, headline=a.headline, names=a.names,
        headline_plot=plots.headline_plot(a), explain=a.explain, palette=WAIT_COLOURS,
        flames=flames(a, results),
        comparisons=comparisons, effects=effects, warnings=a.warnings, rounds=a.rounds,
        whole_plot_factors=", ".join(a.whole_plot_factors),
        environment=_host_first(results.environment()), alpha=a.method["alpha"],
        plots=detail_plots(a, results),
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
        css=_asset("report.css"), js=_asset("report.js"),
    )  # fmt: skip


def detail_plots(a: Analysis, results: Results) -> list[dict[str, str]]:
    """The plots under the headline's, each with a short title for the section's summary."""
    out = [p for p in (plots.tps_plot(a),) if p]
    out += [p for f in a.factors if (p := plots.factor_plot(a, f))]
    out += [p for p in (plots.latency_plot(a), plots.bytes_plot(a)) if p]
    out += over_time_plots(a, results)
    for p in out:
        p["title"] = TITLES.get(p["name"], f"TPS against {p['name'].removeprefix('factor-')}")
    return out


def _host_first(facts: list[Fact]) -> list[Fact]:
    """The host, then every other scope by name (configurations before clusters, unlike
    `pgsweep show --env`): the order this report has always listed them in."""
    return sorted(facts, key=lambda f: (f.scope != "host", f.scope, f.name))


def _num(v: float | None, digits: int = 1) -> str:
    return "-" if v is None else f"{v:,.{digits}f}"


def _ci(s: dict[str, Any]) -> str:
    return "-" if s.get("ci_low") is None else f"{s['ci_low']:,.1f} to {s['ci_high']:,.1f}"


def _cls(verdict: str) -> str:
    word = verdict.split(":")[0]
    return word if word in ("faster", "slower", "lower", "higher") else ""


def flames(a: Analysis, results: Results) -> dict[str, Markup]:
    """Configuration -> the differential flame graph of its explain panel, where both it and
    the configuration it is explained against have a CPU profile ([experiment] cpu_profile)."""
    profiles: dict[str, Counter[str]] = {}
    for t in results.trials(ok_only=True):
        raw = results.artifact(t.id, perf.ARTIFACT) if t.config_id not in profiles else None
        if raw:
            profiles[t.config_id] = perf.parse(raw.decode(errors="replace"))
    out: dict[str, Markup] = {}
    for p in a.explain:
        after, before = profiles.get(p["config"]), profiles.get(p["against"])
        if after and before:
            title = (f"{a.names.get(p['config'], p['config'])} against "
                     f"{a.names.get(p['against'], p['against'])}: the server's CPU samples")
            out[p["config"]] = Markup(flamegraph.svg(after, before, title))  # escaped inside
    return out
