"""Per-second series of a representative trial per configuration (the trial closest to
its configuration's median TPS): TPS with its stalls marked, p99 latency, the worst
standby's replay lag, and the busiest device's writes (kB/s) and the machine's dirty
memory. Zoomable in the HTML report (report.js). With more configurations
than colours, the baseline and the largest changes in TPS."""

from __future__ import annotations

from typing import Any

from ..analysis import Analysis, Config
from ..store import Results
from .plots import kept_configs, label, representative, thin
from .svgplot import PALETTE, Scale, Series, xy_plot

SECONDS = "second of the measured window (s)"


def _trials(a: Analysis, results: Results) -> list[tuple[Config, str]]:
    tps: dict[str, dict[str, float]] = {}  # configuration -> trial id -> TPS, run order
    for t in results.trials(ok_only=True):
        if t.tps is not None:
            tps.setdefault(t.config_id, {})[t.id] = t.tps
    out = []
    for c in kept_configs(a, len(PALETTE)):
        tid = representative(c, tps)
        if tid is not None:
            out.append((c, tid))
    return out


def _rows(results: Results, tid: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = [
        {"second": s.second, "tps": s.tps, "latency_p99_ms": s.latency_p99_ms}
        for s in results.seconds(tid)
    ]
    if not rows:  # no transaction log: pgbench's progress lines
        rows = [{"second": p.at_s - 1, "tps": p.tps, "latency_p99_ms": None}
                for p in results.samples(tid)]  # fmt: skip
    return rows


def over_time_plots(a: Analysis, results: Results) -> list[dict[str, str]]:
    chosen = _trials(a, results)
    data = [(c, tid, _rows(results, tid)) for c, tid in chosen]
    data = [d for d in data if d[2]]
    if not data:
        return []
    shown = len(data)
    total = len([c for c in a.configurations if c.summary.get("tps")])
    few = "" if shown >= total else (f" {shown} of {total} configurations: the baseline and "
                                     "the largest changes in TPS.")  # fmt: skip
    out = []
    for key, unit, name in (("tps", "TPS (transactions per second)", "tps-over-time"),
                            ("latency_p99_ms", "p99 latency, ms", "p99-over-time")):  # fmt: skip
        series = []
        for i, (c, tid, rows) in enumerate(data):
            xs, ys = thin([float(r["second"]) for r in rows], [r[key] for r in rows])
            stalls = [float(r["second"]) for r in rows
                      if key == "tps" and r["tps"] is not None and r["tps"] <= 0]  # fmt: skip
            series.append(Series(f"{label(a, c)} (trial {tid})", xs, ys, PALETTE[i],
                                 marks=stalls))  # fmt: skip
        values = [y for s in series for y in s.ys if y is not None]
        if not values:
            continue
        xs_all = [x for s in series for x in s.xs]
        x = Scale(min(xs_all), max(xs_all))
        caption = (f"Per-second {unit.split(' (')[0]} of a representative trial per "
                   "configuration (the one closest to its configuration's median TPS)."
                   + (" Red dots at 0: seconds in which no transaction completed."
                      if any(s.marks for s in series) else "") + few)  # fmt: skip
        out.append(xy_plot(name, series, x, Scale(0, max(values) * 1.08), SECONDS, unit,
                           caption, zoom=True))  # fmt: skip
    picked = [(c, tid) for c, tid, _ in data]
    more = [lag_plot(a, picked, results), *device_plots(a, picked, results)]
    return out + [p for p in more if p]


def lag_plot(a: Analysis, trials: list[tuple[Config, str]],
             results: Results) -> dict[str, str] | None:  # fmt: skip
    """Per-second replay lag (the largest over the standbys) of the same trials."""
    seconds = results.standby_seconds()
    series = []
    for i, (c, tid) in enumerate(trials):
        worst: dict[int, float] = {}
        for s in seconds.get(tid, []):
            worst[s.second] = max(worst.get(s.second, 0.0), s.replay_lag_ms or 0.0)
        if worst:
            xs, ys = thin([float(k) for k in sorted(worst)], [worst[k] for k in sorted(worst)])
            series.append(Series(f"{label(a, c)} (trial {tid})", xs, ys, PALETTE[i]))
    if not series:
        return None
    xs_all = [x for s in series for x in s.xs]
    top = max([y for s in series for y in s.ys if y is not None] + [1.0])
    return xy_plot("replay-lag-over-time", series, Scale(min(xs_all), max(xs_all)),
                   Scale(0, top * 1.08), SECONDS, "replay lag, ms (worst standby)",
                   "Per-second replay lag of the same representative trials (NULL, caught up "
                   "and idle, drawn as 0).", zoom=True)  # fmt: skip


def device_plots(a: Analysis, trials: list[tuple[Config, str]],
                 results: Results) -> list[dict[str, str] | None]:  # fmt: skip
    """Per-second writes of each trial's busiest device (most kB written over the window),
    and the machine's Dirty memory, of the same trials."""
    seconds = results.device_seconds()
    plots: list[dict[str, str] | None] = []
    for key, unit, name, what in (
        ("write_kb_s", "writes, kB/s (the trial's busiest device)", "device-writes-over-time",
         "writes of each trial's busiest device (the one it wrote most to)"),
        ("dirty_kb", "Dirty memory, kB", "dirty-over-time",
         "Dirty memory of the machine (/proc/meminfo)"),
    ):  # fmt: skip
        series = []
        for i, (c, tid) in enumerate(trials):
            rows = seconds.get(tid, [])
            if key == "dirty_kb":
                mine = [r for r in rows if r.device == "memory"]
            else:
                written: dict[str, float] = {}
                for r in rows:
                    if r.device != "memory":
                        written[r.device] = written.get(r.device, 0.0) + (r.write_kb_s or 0)
                busiest = max(written, key=lambda d: written[d]) if written else None
                mine = [r for r in rows if r.device == busiest]
            if mine:
                xs, ys = thin([float(r.second) for r in mine], [getattr(r, key) for r in mine])
                series.append(Series(f"{label(a, c)} (trial {tid})", xs, ys, PALETTE[i]))
        if not series:
            plots.append(None)
            continue
        xs_all = [x for s in series for x in s.xs]
        top = max([y for s in series for y in s.ys if y is not None] + [1.0])
        plots.append(xy_plot(name, series, Scale(min(xs_all), max(xs_all)),
                             Scale(0, top * 1.08), SECONDS, unit,
                             f"Per-second {what}, of the same representative trials.",
                             zoom=True))  # fmt: skip
    return plots
