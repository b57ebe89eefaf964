"""Plots as inline SVG inside a little HTML, drawn so that they read at any width: text is
HTML or SVG text at its own size (never scaled with the plot), the data area of an x-y
plot is an SVG whose coordinates stretch with the page (preserveAspectRatio="none") while
its strokes and dots keep their size (vector-effect="non-scaling-stroke"; a dot is a
zero-length round-capped stroke), and rows of a dot plot place their marks in percent of
the row's width. Every mark a person may ask about carries a <title> (a tooltip, no script
needed); per-second series also carry their data for report.js (zoom and a readout).

Every string that reaches the markup goes through `esc`: levels and names are data."""

from __future__ import annotations

import html
import json
import math
from dataclasses import dataclass, field
from typing import Any

from .safetext import xml

# Okabe-Ito, distinguishable with any colour vision (yellow left out: unreadable on white)
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#000000")
TONE_COLOURS = {"faster": "#0a7a2f", "lower": "#0a7a2f", "slower": "#b3261e",
                "higher": "#b3261e", "baseline": "#1d1d1f"}  # fmt: skip
GREY = "#8a8a8a"
AREA = 1000.0  # the data area's coordinates: 0..1000 both ways, stretched to the page


def esc(value: Any) -> str:
    """Text for markup: characters XML forbids as visible escapes, then entities."""
    return html.escape(xml(value), quote=True)


def data_json(value: Any) -> str:
    """JSON inside a <script type="application/json">: no "</script>" or "<!--" can end it."""
    text = json.dumps(value, separators=(",", ":"), allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


@dataclass
class Scale:
    """Data -> a fraction of the axis (0..1), linear or logarithmic."""

    lo: float
    hi: float
    log: bool = False

    def __post_init__(self) -> None:
        if self.log:
            self.lo, self.hi = max(self.lo, 1e-12), max(self.hi, 1e-12)
        if not self.hi > self.lo:
            pad = abs(self.lo) * 0.05 or 1.0
            self.lo, self.hi = (self.lo / 1.1, self.lo * 1.1) if self.log else (
                self.lo - pad, self.lo + pad)  # fmt: skip

    def frac(self, v: float) -> float:
        if self.log:
            return (math.log(max(v, 1e-12)) - math.log(self.lo)) / math.log(self.hi / self.lo)
        return (v - self.lo) / (self.hi - self.lo)

    def pct(self, v: float) -> str:
        return f"{100 * min(1.02, max(-0.02, self.frac(v))):.2f}%"

    def area(self, v: float, flip: bool = False) -> float:
        f = self.frac(v)
        return round(AREA * (1 - f if flip else f), 1)


def nice_step(span: float, count: int = 5) -> float:
    raw = span / max(count, 1)
    mag = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1.0
    return next((m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw), 10 * mag)


def ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """Round values covering [lo, hi], about `count` of them."""
    step = nice_step(hi - lo, count)
    first = math.ceil(lo / step - 1e-9) * step
    out, v = [], first
    while v <= hi + step * 1e-9:
        out.append(round(v, 10))
        v += step
    return out


def log_ticks(lo: float, hi: float) -> list[float]:
    """1, 2, 5 x 10^k inside [lo, hi] (thinned to at most 8)."""
    out = [m * 10**k for k in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)
           for m in (1, 2, 5) if lo <= m * 10**k <= hi]  # fmt: skip
    while len(out) > 8:
        out = out[::2]
    return out or [lo, hi]


def number(v: float, step: float | None = None) -> str:
    """A tick or a value: thousands separated, as many decimals as the step needs."""
    if step is None:  # a value: three significant digits, none beyond 100
        size = abs(v)
        if size == 0:
            return "0"
        return f"{v:,.{0 if size >= 100 else 1 if size >= 10 else 2 if size >= 0.1 else 3}f}"
    digits = max(0, -math.floor(math.log10(step))) if step > 0 else 0
    while digits < 4 and abs(round(step, digits) - step) > step * 1e-6:  # 2.5: one decimal
        digits += 1
    v = 0.0 if abs(v) < step * 1e-6 else v  # never "-0"
    return f"{v:,.{digits}f}"


# ---- rows: one line of marks per configuration (a dot plot), in percent of the width ----


@dataclass
class Row:
    label: str  # shown as HTML text beside the track
    marks: list[str] = field(default_factory=list)  # SVG elements in percent coordinates
    value: str = ""  # the figure at the row's end
    title: str = ""  # the row's tooltip
    css: str = ""  # "baseline", "group" (a heading row), a tone


def mark_dot(x: str, colour: str, title: str, r: float = 4.5, hollow: bool = False) -> str:
    fill = "#fff" if hollow else colour
    return (f'<circle cx="{x}" cy="10" r="{r}" fill="{fill}" stroke="{colour}" '
            f'stroke-width="1.5"><title>{esc(title)}</title></circle>')  # fmt: skip


def mark_line(x1: str, x2: str, colour: str, width: float = 2, y: float = 10) -> str:
    return (f'<line x1="{x1}" x2="{x2}" y1="{y}" y2="{y}" stroke="{colour}" '
            f'stroke-width="{width}"/>')  # fmt: skip


def mark_bar(width: str, colour: str, title: str, y: float, h: float) -> str:
    """A bar from the left edge (a scale starting at 0) to `width`."""
    return (f'<rect x="0" y="{y}" width="{width}" height="{h}" fill="{colour}">'
            f"<title>{esc(title)}</title></rect>")


def mark_rule(x: str, dashed: bool = False) -> str:
    dash = ' stroke-dasharray="3 3"' if dashed else ""
    return f'<line x1="{x}" x2="{x}" y1="0" y2="20" stroke="#555" stroke-width="1"{dash}/>'


def rows_plot(name: str, rows: list[Row], scale: Scale, tick_values: list[float],
              tick_labels: list[str], axis_label: str, caption: str,
              legend: list[tuple[str, str]] | None = None) -> dict[str, str]:  # fmt: skip
    """A dot plot: a label, a track and a figure per row; the axis under the last row."""
    parts = [f'<div class="rows" role="img" aria-label="{esc(caption)}">']
    grid = "".join(mark_rule(scale.pct(t), dashed=True) for t in tick_values)
    for row in rows:
        if row.css == "group":
            parts.append(f'<div class="row group"><span class="label">{esc(row.label)}</span>'
                         "</div>")  # fmt: skip
            continue
        title = f' title="{esc(row.title)}"' if row.title else ""
        parts.append(
            f'<div class="row {esc(row.css)}"{title}><span class="label">{esc(row.label)}</span>'
            f'<svg class="track" width="100%" height="20" aria-hidden="true">'
            f'<g class="grid">{grid}</g>{"".join(row.marks)}</svg>'
            f'<span class="value">{esc(row.value)}</span></div>'
        )  # fmt: skip
    axis = "".join(
        f'<text x="{scale.pct(t)}" y="12" text-anchor="middle"{_minor(i, tick_values)}>'
        f"{esc(label)}</text>" for i, (t, label) in enumerate(zip(tick_values, tick_labels,
                                                                strict=True))
    )  # fmt: skip
    parts.append(f'<div class="row axis"><span class="label"></span><svg class="track" '
                 f'width="100%" height="16" aria-hidden="true">{axis}</svg>'
                 f'<span class="value"></span></div>')  # fmt: skip
    parts.append(f'<div class="axis-label">{esc(axis_label)}</div>')
    parts.append(_legend(legend or []))
    parts.append("</div>")
    return {"name": name, "html": "".join(parts), "caption": caption}


def _minor(i: int, values: list[float]) -> str:
    """Every other tick label of a long axis is minor: a phone's screen hides it."""
    return ' class="minor"' if len(values) > 5 and i % 2 == 1 else ""


def _legend(items: list[tuple[str, str]]) -> str:
    if not items:
        return ""
    spans = "".join(f'<span><i style="background:{c}"></i>{esc(t)}</span>' for c, t in items)
    return f'<div class="legend">{spans}</div>'


# ---- x-y plots: a stretched data area between HTML-sized axes ----


@dataclass
class Series:
    label: str
    xs: list[float]
    ys: list[float | None]
    colour: str
    dots: bool = False  # a dot per point, each with a tooltip
    titles: list[str] = field(default_factory=list)
    errors: list[tuple[float, float] | None] = field(default_factory=list)  # interval per point
    marks: list[float] = field(default_factory=list)  # x of marked points (stalls), at y = 0


def _path(s: Series, x: Scale, y: Scale) -> str:
    parts, pen = [], "M"
    for xv, yv in zip(s.xs, s.ys, strict=True):
        if yv is None or not math.isfinite(yv):
            pen = "M"
            continue
        parts.append(f"{pen}{x.area(xv)} {y.area(yv, flip=True)}")
        pen = "L"
    return "".join(parts)


def _series_svg(s: Series, x: Scale, y: Scale) -> str:
    out = [f'<path class="line" d="{_path(s, x, y)}" stroke="{s.colour}"><title>'
           f"{esc(s.label)}</title></path>"]  # fmt: skip
    for i, (xv, yv) in enumerate(zip(s.xs, s.ys, strict=True)):
        err = s.errors[i] if i < len(s.errors) else None
        if err is not None:
            out.append(f'<path class="err" d="M{x.area(xv)} {y.area(err[0], True)}V'
                       f'{y.area(err[1], True)}" stroke="{s.colour}"/>')  # fmt: skip
        if s.dots and yv is not None:
            tip = s.titles[i] if i < len(s.titles) else f"{s.label}: {number(yv)}"
            out.append(f'<path class="dot" d="M{x.area(xv)} {y.area(yv, True)}h0" '
                       f'stroke="{s.colour}"><title>{esc(tip)}</title></path>')  # fmt: skip
    if s.marks:
        d = "".join(f"M{x.area(m)} {AREA}h0" for m in s.marks)
        out.append(f'<path class="dot stall" d="{d}"><title>{esc(s.label)}: no transaction '
                   "completed in these seconds</title></path>")  # fmt: skip
    return "".join(out)


def xy_plot(name: str, series: list[Series], x: Scale, y: Scale, x_label: str,
            y_label: str, caption: str, zoom: bool = False, height: int = 220,
            x_ticks: list[float] | None = None) -> dict[str, str]:  # fmt: skip
    """An x-y plot; with `zoom`, report.js lets a drag zoom into x and shows every series'
    value at the pointer (the data ride along as JSON)."""
    xt = x_ticks or (log_ticks(x.lo, x.hi) if x.log else ticks(x.lo, x.hi, 6))
    yt = log_ticks(y.lo, y.hi) if y.log else ticks(y.lo, y.hi, 4)
    ystep = yt[1] - yt[0] if len(yt) > 1 else None
    xstep = xt[1] - xt[0] if len(xt) > 1 and not x.log else None
    hgrid = "".join(f"M0 {y.area(t, True)}H{AREA}" for t in yt)
    vgrid = "".join(f"M{x.area(t)} 0V{AREA}" for t in xt)
    body = "".join(_series_svg(s, x, y) for s in series)
    ylabels = "".join(
        f'<text x="48" y="{100 * (1 - y.frac(t)):.2f}%" dy="4" text-anchor="end">'
        f"{esc(number(t, ystep))}</text>" for t in yt
    )  # fmt: skip
    xlabels = "".join(
        f'<text x="{x.pct(t)}" y="12" text-anchor="middle"{_minor(i, xt)}>'
        f"{esc(number(t, xstep))}</text>" for i, t in enumerate(xt)
    )  # fmt: skip
    data = ""
    if zoom:
        payload = {"x": [x.lo, x.hi], "y": [y.lo, y.hi], "xlabel": x_label, "ylabel": y_label,
                   "series": [{"label": s.label, "colour": s.colour, "x": s.xs, "y": s.ys}
                              for s in series]}  # fmt: skip
        data = f'<script type="application/json" class="plot-data">{data_json(payload)}</script>'
    legend = _legend([(s.colour, s.label) for s in series]) if len(series) > 1 else ""
    zoom_note = ('<div class="zoom-help">drag across the plot to zoom in, double-click to '
                 'zoom out <button type="button" class="reset" hidden>reset zoom</button>'
                 "</div>") if zoom else ""  # fmt: skip
    html_ = (
        f'<div class="xy{" zoomable" if zoom else ""}" role="img" aria-label="{esc(caption)}">'
        f'<div class="y-label">{esc(y_label)}</div><div class="xy-grid">'
        f'<svg class="y-axis" width="52" height="{height}" aria-hidden="true">{ylabels}</svg>'
        f'<svg class="area" width="100%" height="{height}" viewBox="0 0 {AREA:g} {AREA:g}" '
        f'preserveAspectRatio="none"><path class="grid" d="{hgrid}"/>'
        f'<path class="grid vgrid" d="{vgrid}"/>{body}</svg>'
        f'<span></span><svg class="x-axis" width="100%" height="16" aria-hidden="true">'
        f"{xlabels}</svg></div>"
        f'<div class="x-label">{esc(x_label)}</div>{legend}{zoom_note}'
        f'<div class="readout" aria-live="polite"></div>{data}</div>'
    )  # fmt: skip
    return {"name": name, "html": html_, "caption": caption}
