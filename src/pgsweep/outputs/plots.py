"""The HTML report's plots (outputs/svgplot.py draws them): the headline plot (every
verdict on TPS as a change against the baseline, with its interval), then the details:
TPS per configuration with every trial, TPS against each numeric factor, latency
percentiles, bytes written per transaction, and per-second series of a representative
trial per configuration (zoomable). Configurations are named by the levels that differ
from the baseline's. Many configurations: the plots keep the baseline and the largest
changes, and say how many they leave to the tables."""

from __future__ import annotations

import math
import statistics
from typing import Any

from ..analysis import NEGLIGIBLE_BYTES, Analysis, Config
from ..analysis.headline import baseline_text, percent_interval
from ..plan import short_names
from .svgplot import (
    GREY,
    PALETTE,
    TONE_COLOURS,
    Row,
    Scale,
    Series,
    log_ticks,
    mark_bar,
    mark_dot,  # fmt: skip
    mark_line,
    number,
    rows_plot,
    ticks,
    xy_plot,
)

MAX_ROWS = 60  # configurations a per-configuration plot draws
MAX_CHANGES = 30  # comparisons the headline plot draws
MAX_DOTS = 60  # trials of one configuration drawn one by one; beyond, their range
MAX_POINTS = 4000  # points of one per-second series; beyond, each bucket's min and max


def label(a: Analysis, c: Config) -> str:
    if c.id == a.baseline:
        return f"baseline: {baseline_text(a)}"
    return a.names.get(c.id, c.id)


def _tps_rows(a: Analysis) -> dict[str, dict[str, Any]]:
    return {c["config"]: c for c in a.comparisons if c["metric"] == "tps"}


def kept_configs(a: Analysis, limit: int) -> list[Config]:
    """At most `limit` configurations with TPS: the baseline and the largest changes,
    in id order."""
    rows = _tps_rows(a)
    have = [c for c in a.configurations if c.summary.get("tps")]
    if len(have) <= limit:
        return have
    size = {c.id: abs(math.log(rows[c.id]["ratio"])) if c.id in rows else -1.0 for c in have}
    top = sorted((c for c in have if c.id != a.baseline), key=lambda c: -size[c.id])
    keep = {a.baseline} | {c.id for c in top[: limit - 1]}
    return [c for c in have if c.id in keep]


def _left_out(a: Analysis, shown: int, total: int) -> str:
    if shown >= total:
        return ""
    return (f" {shown} of {total} configurations drawn: the baseline and the largest changes "
            "in TPS; the tables list every one.")  # fmt: skip


def _tip(row: dict[str, Any]) -> str:
    return (f"{row['verdict']} · adjusted p {row['p_adjusted']:.3g} · {row['error']} error, "
            f"{row['replicates']} replicates")  # fmt: skip


def _change_row(text: str, row: dict[str, Any], x: Scale) -> Row:
    colour = TONE_COLOURS.get(str(row["verdict"]).split(":")[0], GREY)
    marks = [mark_line(x.pct(row["ci_low"]), x.pct(row["ci_high"]), colour, 2.5),
             mark_dot(x.pct(row["ratio"]), colour, f"{text}: {_tip(row)}")]  # fmt: skip
    decided = row["decision"] == "different"
    value = percent_interval(row["ratio"], row["ci_low"], row["ci_high"], decided)
    return Row(text, marks, value, _tip(row), str(row["verdict"]).split(":")[0].split(" ")[0])


def _change_ticks(x: Scale) -> tuple[list[float], list[str]]:
    """Ticks of a ratio axis, labelled as a change in percent."""
    if x.hi / x.lo < 2.5:
        pts = ticks((x.lo - 1) * 100, (x.hi - 1) * 100, 6)
        step = pts[1] - pts[0] if len(pts) > 1 else 1.0
        return [1 + p / 100 for p in pts], [_signed(p, 0 if step >= 1 else 1) for p in pts]
    marks = [0.01, 0.1, 0.2, 0.5, 0.8, 1, 1.25, 1.5, 2, 3, 5, 10, 20, 50, 100, 1000]
    vals = [m for m in marks if x.lo <= m <= x.hi]
    while len(vals) > 8:
        vals = [v for i, v in enumerate(vals) if i % 2 == 0 or v == 1]
    return vals, [_signed((v - 1) * 100, 0) for v in vals]


def _signed(percent: float, digits: int) -> str:
    """A tick of a change: "+25%", "-20%", and "0%" for no change."""
    return "0%" if round(percent, digits) == 0 else f"{percent:+,.{digits}f}%"


def headline_plot(a: Analysis) -> dict[str, str] | None:
    """Every verdict on TPS as a change against the baseline (log scale, labelled in
    percent): factor effects first (with two factors or more), then each configuration;
    the baseline is the line at 0."""
    tps = _tps_rows(a)
    mains = [e for e in a.effects if e["kind"] == "main" and e["metric"] == "tps"]
    if not tps:
        return None
    short = short_names(a.factors)
    comps = [tps[c.id] for c in kept_configs(a, MAX_CHANGES + 1) if c.id in tps]
    shown = [*comps, *(mains if len(a.factors) > 1 else [])]
    lo = min([r["ci_low"] for r in shown] + [1.0])
    hi = max([r["ci_high"] for r in shown] + [1.0])
    x = Scale(lo / (hi / lo) ** 0.05, hi * (hi / lo) ** 0.05, log=True)
    rows: list[Row] = []
    if len(a.factors) > 1 and mains:
        rows.append(Row("Factor effects (each averaged over the other factors)", css="group"))
        rows += [_change_row(f"{short[e['factor']]} {e['level']} vs {e['reference']}", e, x)
                 for e in mains]  # fmt: skip
        rows.append(Row("Configurations against the baseline", css="group"))
    base = next(c for c in a.configurations if c.id == a.baseline)
    s = base.summary.get("tps") or {}
    level = s.get("level") or s.get("mean")
    rows.append(Row(label(a, base), [mark_dot(x.pct(1.0), TONE_COLOURS["baseline"],
                                              "the baseline", 5, hollow=True)],
                    f"{number(level)} TPS" if level else "", "the baseline: every change is "
                    "measured against it", "baseline"))  # fmt: skip
    rows += [_change_row(a.names.get(r["config"], r["config"]), r, x) for r in comps]
    values, labels = _change_ticks(x)
    alpha = a.method["alpha"]
    caption = (f"Change in TPS against the baseline, with simultaneous {1 - alpha:.0%} "
               "intervals (green: faster, red: slower, grey: no significant difference). "
               "Hover a row for its verdict." + _left_out(a, len(comps), len(tps)))  # fmt: skip
    return rows_plot("tps-change", rows, x, values, labels,
                     "change in TPS against the baseline (log scale)", caption)


def tps_plot(a: Analysis) -> dict[str, str] | None:
    kept = kept_configs(a, MAX_ROWS)
    if not kept:
        return None
    vals = [v for c in kept for v in c.values.get("tps", {}).values() if v and v > 0]
    bounds = [b for c in kept for key in ("ci_low", "ci_high")
              if (b := c.summary["tps"].get(key) or 0) > 0]  # fmt: skip
    lo, hi = min(vals + bounds), max(vals + bounds)
    x = Scale(lo - 0.05 * (hi - lo), hi + 0.05 * (hi - lo))
    rows = []
    for c in kept:
        s = c.summary["tps"]
        trials = sorted(c.values.get("tps", {}).items())
        marks = []
        if len(trials) <= MAX_DOTS:
            marks += [mark_dot(x.pct(v), "#9a9a9a", f"round {r}: {number(v)} TPS", 2.5, True)
                      for r, v in trials if v and v > 0]  # fmt: skip
        else:
            marks.append(mark_line(x.pct(s["min"]), x.pct(s["max"]), "#c8c8c8", 6))
        colour = TONE_COLOURS["baseline"] if c.id == a.baseline else PALETTE[0]
        tip = (f"level {number(s['level'] or s['mean'])} TPS"
               + (f" [{number(s['ci_low'])}, {number(s['ci_high'])}]" if s.get("ci_low") else "")
               + f"; mean {number(s['mean'])}, median {number(s['median'])}, min "
               f"{number(s['min'])}, max {number(s['max'])}, {s['n']} trials")  # fmt: skip
        if s.get("ci_low"):
            marks.append(mark_line(x.pct(s["ci_low"]), x.pct(s["ci_high"]), colour, 2.5))
        marks.append(mark_dot(x.pct(s["level"] or s["mean"]), colour, f"{label(a, c)}: {tip}"))
        rows.append(Row(label(a, c), marks, f"{number(s['level'] or s['mean'])}", tip,
                        "baseline" if c.id == a.baseline else ""))  # fmt: skip
    values = ticks(x.lo, x.hi, 5)
    step = values[1] - values[0] if len(values) > 1 else None
    more = "" if all(c.summary["tps"]["n"] <= MAX_DOTS for c in kept) else (
        f" Configurations with more than {MAX_DOTS} trials show their range as a grey bar.")
    caption = ("TPS per configuration: grey circles are trials, the filled dot and line the "
               "configuration's level over this run's rounds with its interval." + more
               + _left_out(a, len(kept), len([c for c in a.configurations
                                               if c.summary.get("tps")])))  # fmt: skip
    return rows_plot("tps", rows, x, values, [number(v, step) for v in values],
                     "TPS (transactions per second)", caption)


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def factor_plot(a: Analysis, factor: str) -> dict[str, str] | None:
    """TPS against a numeric factor: one line per combination of the other factors."""
    levels = {c.levels.get(factor) for c in a.configurations}
    if len(levels) < 2 or not all(_is_number(v) for v in levels):
        return None
    short = short_names(a.factors)
    lines: dict[str, list[tuple[float, Config]]] = {}
    for c in a.configurations:
        if c.summary.get("tps"):
            rest = ", ".join(f"{short[f]} {c.levels.get(f)}" for f in a.factors if f != factor)
            lines.setdefault(rest or "TPS", []).append((float(c.levels[factor]), c))
    if not lines:
        return None
    series = []
    for i, (rest, pts) in enumerate(list(lines.items())[: len(PALETTE)]):
        pts.sort(key=lambda p: p[0])
        sums = [c.summary["tps"] for _, c in pts]
        titles = [f"{short[factor]} {number(xv)}, {rest}: {number(s['level'] or s['mean'])} TPS"
                  + (f" [{number(s['ci_low'])}, {number(s['ci_high'])}]" if s.get("ci_low")
                     else "") for (xv, _), s in zip(pts, sums, strict=True)]  # fmt: skip
        errors = [(s["ci_low"], s["ci_high"]) if s.get("ci_low") else None for s in sums]
        series.append(Series(rest, [p[0] for p in pts], [s["level"] or s["mean"] for s in sums],
                             PALETTE[i], dots=True, titles=titles, errors=errors))  # fmt: skip
    xs = sorted(float(v) for v in levels if v is not None)
    log = xs[0] > 0 and xs[-1] / xs[0] >= 8
    x = Scale(xs[0] / 1.15, xs[-1] * 1.15, log=True) if log else Scale(
        xs[0] - 0.05 * (xs[-1] - xs[0]), xs[-1] + 0.05 * (xs[-1] - xs[0]))  # fmt: skip
    top = max((e[1] for s in series for e in s.errors if e), default=0.0)
    top = max([top] + [v for s in series for v in s.ys if v is not None])
    left = "" if len(lines) <= len(PALETTE) else (
        f" {len(PALETTE)} of {len(lines)} lines drawn.")
    return xy_plot(f"factor-{factor}", series, x, Scale(0, top * 1.08),
                   f"{factor}{' (log scale)' if log else ''}", "TPS (transactions per second)",
                   f"TPS against {factor}: each configuration's level with its interval." + left,
                   x_ticks=xs if len(xs) <= 12 else None)  # fmt: skip


LATENCY = (("latency.p50_ms", "p50", PALETTE[0]), ("latency.p95_ms", "p95", PALETTE[1]),
           ("latency.p99_ms", "p99", PALETTE[5]))  # fmt: skip


def latency_plot(a: Analysis) -> dict[str, str] | None:
    kept = [c for c in kept_configs(a, MAX_ROWS) if any(c.summary.get(k) for k, _, _ in LATENCY)]
    if not kept:
        return None
    vals = [c.summary[k]["median"] for c in kept for k, _, _ in LATENCY
            if c.summary.get(k) and c.summary[k]["median"] > 0]  # fmt: skip
    if not vals:
        return None
    lo, hi = min(vals), max(vals)
    log = hi / lo >= 20
    x = Scale(lo / 1.2, hi * 1.2, log=True) if log else Scale(0, hi * 1.08)
    rows = []
    for c in kept:
        marks, parts = [], []
        for key, name, colour in LATENCY:
            s = c.summary.get(key)
            if s and s["median"] > 0:
                marks.append(mark_dot(x.pct(s["median"]), colour,
                                      f"{label(a, c)}: {name} {number(s['median'])} ms"))
                parts.append(f"{name} {number(s['median'])}")
        rows.append(Row(label(a, c), marks, " · ".join(parts), "",
                        "baseline" if c.id == a.baseline else ""))  # fmt: skip
    values = log_ticks(x.lo, x.hi) if log else ticks(x.lo, x.hi, 5)
    step = None if log else (values[1] - values[0] if len(values) > 1 else None)
    return rows_plot("latency", rows, x, values, [number(v, step) for v in values],
                     f"latency, ms{' (log scale)' if log else ''}: the median over trials of "
                     "each trial's percentile",
                     "Latency percentiles per configuration."
                     + _left_out(a, len(kept), len(a.configurations)),
                     legend=[(c, n) for _, n, c in LATENCY])  # fmt: skip


BYTES = (("io.device_bytes_written_per_tx", "device", PALETTE[0]),
         ("io.wal_bytes_per_tx", "WAL", PALETTE[1]))  # fmt: skip


def bytes_plot(a: Analysis) -> dict[str, str] | None:
    """Bytes written per transaction. A configuration whose transactions write no WAL
    (select-only) writes nothing of its own: its device bytes are other processes' and
    it gets no bar; when no configuration writes, one line says why instead of a plot."""
    writing = [c for c in a.configurations if "io.wal_bytes_per_tx" in c.values]
    if not writing:
        if not any(c.negligible for c in a.configurations):
            return None  # no byte counters at all (e.g. every trial failed)
        why = (f"No bytes-per-transaction plot: every configuration wrote under "
               f"{NEGLIGIBLE_BYTES:.0f} B of WAL per transaction (a read-only workload), "
               "so those figures are noise.")  # fmt: skip
        return {"name": "bytes", "html": "", "caption": why}
    kept = [c for c in kept_configs(a, MAX_ROWS) if c in writing]
    top = max(((c.summary.get(k) or {}).get("mean") or 0) / 1024 for c in kept
              for k, _, _ in BYTES)  # fmt: skip
    x = Scale(0, top * 1.08 or 1)
    rows = []
    for c in kept:
        marks, parts = [], []
        for j, (key, name, colour) in enumerate(BYTES):
            kb = ((c.summary.get(key) or {}).get("mean") or 0) / 1024
            marks.append(mark_bar(x.pct(kb), colour, f"{label(a, c)}: {name} {number(kb)} kB "
                                  "written per transaction", 3 + 7 * j, 6))  # fmt: skip
            parts.append(f"{name} {number(kb)}")
        rows.append(Row(label(a, c), marks, " · ".join(parts), "",
                        "baseline" if c.id == a.baseline else ""))  # fmt: skip
    values = ticks(0, x.hi, 5)
    step = values[1] - values[0] if len(values) > 1 else None
    return rows_plot("bytes", rows, x, values, [number(v, step) for v in values],
                     "kB written per transaction (mean over trials)",
                     "Bytes written per transaction: to the devices under the data and WAL "
                     "(device) and as WAL." + _left_out(a, len(kept), len(writing)),
                     legend=[(c, n) for _, n, c in BYTES])  # fmt: skip


def representative(c: Config, tps: dict[str, dict[str, float]]) -> str | None:
    """The trial whose TPS is closest to its configuration's median (the first such trial
    in run order)."""
    rows = tps.get(c.id)
    if not rows:
        return None
    median = statistics.median(rows.values())
    return min(rows, key=lambda tid: abs(rows[tid] - median))


def thin(xs: list[float], ys: list[float | None], limit: int = MAX_POINTS
         ) -> tuple[list[float], list[float | None]]:  # fmt: skip
    """At most about `limit` points: each bucket's lowest and highest value, in order, so
    a one-second stall in an hour's window still shows."""
    if len(xs) <= limit:
        return xs, ys
    size = math.ceil(2 * len(xs) / limit)
    ox: list[float] = []
    oy: list[float | None] = []
    for i in range(0, len(xs), size):
        pts = [(x, y) for x, y in zip(xs[i:i + size], ys[i:i + size], strict=True)
               if y is not None]  # fmt: skip
        if not pts:
            continue
        lo, hi = min(pts, key=lambda p: p[1] or 0), max(pts, key=lambda p: p[1] or 0)
        for p in sorted({lo, hi}):
            ox.append(p[0])
            oy.append(p[1])
    return ox, oy
