"""The answer first: what a report says before any table. One sentence per factor (each
level against the factor's first, averaged over the other factors), one per interaction
the model calls different, and one per configuration that differs from the baseline,
each in words with its simultaneous interval ("synchronous_commit off vs on: faster,
+207% [+184, +232]"). Configurations are named by the levels that differ from the
baseline's, never by their id alone. Everything here reads an Analysis; nothing is judged
again: the sentences restate the verdicts the model gave."""

from __future__ import annotations

import math
from typing import Any

from ..plan import short_names
from .types import METRICS, Analysis, Config

TPS = "tps"
# metrics a factor's sentence adds when their verdict is "different" (p50 and p95 latency
# stay in the tables: p99 says the latency story in one clause)
ALSO = ("latency.p99_ms", "io.device_bytes_written_per_tx", "io.wal_bytes_per_tx")
MAX_COMPARISONS = 8  # configurations against the baseline named one by one; the rest counted


def config_names(a: Analysis) -> dict[str, str]:
    """Configuration id -> the levels that differ from the baseline's ("synchronous_commit
    off, clients 8"); the baseline is "baseline"; with no factor, "the only configuration"."""
    short = short_names(a.factors)
    base = next((c for c in a.configurations if c.id == a.baseline), None)
    out = {}
    for c in a.configurations:
        if c.id == a.baseline:
            out[c.id] = "baseline" if a.factors else "the only configuration"
            continue
        differs = [f for f in a.factors if base is None or str(c.levels.get(f)) !=
                   str(base.levels.get(f))]  # fmt: skip
        out[c.id] = ", ".join(f"{short[f]} {c.levels.get(f)}" for f in differs) or c.id
    return out


def baseline_text(a: Analysis) -> str:
    """The baseline's levels, all of them: "synchronous_commit on, clients 1"."""
    short = short_names(a.factors)
    base = next((c for c in a.configurations if c.id == a.baseline), None)
    if base is None:
        return a.baseline
    return ", ".join(f"{short[f]} {base.levels.get(f)}" for f in a.factors) or base.id


def _digits(values: list[float], decided: bool) -> int:
    """Decimals for a percentage and its interval: none from 20% up, else one; more where
    the bounds would print alike or a decided interval would touch 0."""
    top = max(abs(v) for v in values)
    start = 0 if top >= 20 else 1
    for digits in range(start, 4):
        shown = [round(v, digits) for v in values]
        if shown[1] != shown[2] and not (decided and 0 in shown[1:]):
            return digits
    return 3


def percent_interval(ratio: float, low: float, high: float, decided: bool = False) -> str:
    """A ratio and its interval as a change in percent: "+207% [+184, +232]"."""
    values = [(ratio - 1) * 100, (low - 1) * 100, (high - 1) * 100]
    d = _digits(values, decided)

    def fmt(v: float, sign: bool = True) -> str:
        v = 0.0 if round(v, d) == 0 else v
        return f"{v:+,.{d}f}" if sign else f"{v:,.{d}f}"

    return f"{fmt(values[0])}% [{fmt(values[1])}, {fmt(values[2])}]"


def _replicates(row: dict[str, Any]) -> str:
    n = int(row.get("replicates") or 0)
    if row.get("error") in ("whole-plot", "split-plot", "within-run only"):
        return f"{n} build{'s' if n != 1 else ''} per level"
    return f"{n} round{'s' if n != 1 else ''}"


def verdict_words(row: dict[str, Any]) -> str:
    """A verdict of the model, short: "faster, +207% [+184, +232]", "no significant
    difference, +2% [-8, +12]; a change above 16% would have shown (3 rounds)"."""
    decided = row["decision"] == "different"
    text = percent_interval(row["ratio"], row["ci_low"], row["ci_high"], decided)
    if row["decision"] == "unreplicated":
        return f"not a verdict, these builds differ by {text} (one build per level)"
    if decided:
        word = str(row["verdict"]).split(":")[0]  # faster | slower | higher | lower
        return f"{word}, {text}"
    if row["decision"] == "equivalent":
        return str(row["verdict"]).split(":")[0] + f", {text}"
    seen = row.get("detectable")
    if seen is None or not math.isfinite(seen) or seen >= 10:
        tail = f"too few {_replicates(row).split(' ', 1)[1]} to see even a 1000% change"
    else:
        tail = f"a change above {_pct(seen)} would have shown ({_replicates(row)})"
    return f"no significant difference, {text}; {tail}"


def short_verdict(row: dict[str, Any]) -> str:
    """A verdict in a table cell: "faster +206% [+182, +233]", "no sig. diff. -0.5% [-6.1,
    +5.4]", "equivalent, ...", "no verdict (1 build/level)"."""
    decided = row["decision"] == "different"
    text = percent_interval(row["ratio"], row["ci_low"], row["ci_high"], decided)
    if row["decision"] == "unreplicated":
        return "no verdict (1 build/level)"
    if decided:
        return f"{str(row['verdict']).split(':')[0]} {text}"
    if row["decision"] == "equivalent":
        return f"equivalent {text}"
    return f"no sig. diff. {text}"


def _pct(fraction: float) -> str:
    return f"{round(fraction * 100, 9):g}%"


def _tone(row: dict[str, Any]) -> str:
    if row["decision"] != "different":
        return str(row["decision"])
    return str(row["verdict"]).split(":")[0]


def _factor_lines(a: Analysis) -> list[dict[str, Any]]:
    short = short_names(a.factors)
    out = []
    mains = [e for e in a.effects if e["kind"] == "main"]
    for f in a.factors:
        rows = [e for e in mains if e["factor"] == f and e["metric"] == TPS]
        if not rows:
            continue
        clauses = []
        for e in rows:
            clause = f"{e['level']} vs {e['reference']}: {verdict_words(e)}"
            also = [f"{METRICS[o['metric']][0]} {verdict_words(o)}" for o in mains
                    if o["factor"] == f and o["metric"] in ALSO and o["level"] == e["level"]
                    and o["decision"] == "different"]  # fmt: skip
            clauses.append(clause + (f"; also {'; '.join(also)}" if also else ""))
        text = f"{short[f]} " + "; ".join(clauses)
        tones = {_tone(e) for e in rows}
        out.append({"kind": "factor", "factor": f, "text": text,
                    "tone": tones.pop() if len(tones) == 1 else "mixed",
                    "contrasts": [e["contrast"] for e in rows]})  # fmt: skip
    return out


def _interaction_lines(a: Analysis) -> list[dict[str, Any]]:
    short = short_names(a.factors)
    out = []
    for e in a.interactions():
        if e["decision"] != "different":
            continue
        one, two = e["terms"][0], e["terms"][1]
        text = (f"interaction: the effect of {short.get(one['factor'], one['factor'])} "
                f"{one['level']} vs {one['reference']} is "
                f"{percent_interval(e['ratio'], e['ci_low'], e['ci_high'], True)} different at "
                f"{short.get(two['factor'], two['factor'])} {two['level']} than at "
                f"{two['reference']}")  # fmt: skip
        out.append({"kind": "interaction", "factor": one["factor"], "text": text,
                    "tone": "different", "contrasts": [e["contrast"]]})  # fmt: skip
    return out


def _comparison_lines(a: Analysis, names: dict[str, str]) -> list[dict[str, Any]]:
    if len(a.factors) < 2:  # one factor: its effects are these comparisons, said above
        return []
    rows = [c for c in a.comparisons if c["metric"] == TPS and c["decision"] == "different"]
    rows.sort(key=lambda c: -abs(math.log(c["ratio"])) if c["ratio"] > 0 else 0)
    out = [{"kind": "comparison", "config": c["config"], "tone": _tone(c),
            "text": f"{names[c['config']]} vs the baseline: {verdict_words(c)}",
            "contrasts": [c["contrast"]]} for c in rows[:MAX_COMPARISONS]]  # fmt: skip
    if len(rows) > MAX_COMPARISONS:
        more = len(rows) - MAX_COMPARISONS
        out.append({"kind": "more", "tone": "", "contrasts": [],
                    "text": f"{more} more configuration(s) differ from the baseline: see the "
                            "per-configuration table"})  # fmt: skip
    return out


def _single(a: Analysis, c: Config) -> list[dict[str, Any]]:
    s = c.summary.get(TPS) or {}
    if s.get("ci_low") is None:
        level = f"{s['mean']:,.0f} TPS" if s.get("mean") is not None else "no TPS measured"
    else:
        level = f"{s['level']:,.0f} TPS [{s['ci_low']:,.0f}, {s['ci_high']:,.0f}]"
    text = f"one configuration: {level} over {s.get('n', 0)} trial(s); nothing to compare"
    return [{"kind": "single", "tone": "", "text": text, "contrasts": []}]


def headline(a: Analysis, names: dict[str, str]) -> list[dict[str, Any]]:
    """The sentences a report opens with, in order: factors, interactions, configurations.
    Each is {"kind", "text", "tone" (faster/slower/higher/lower, equivalent, undecided,
    unreplicated, mixed), "contrasts" (the verdicts it restates), and "factor" or
    "config"}."""
    tps = [c for c in a.comparisons if c["metric"] == TPS]
    if not tps:
        base = next((c for c in a.configurations if c.id == a.baseline), None)
        return _single(a, base) if base is not None else []
    lines = _factor_lines(a) + _interaction_lines(a) + _comparison_lines(a, names)
    if not lines:  # comparisons without effects (a run judged against its baseline only)
        lines = [{"kind": "comparison", "config": c["config"], "tone": _tone(c),
                  "text": f"{names[c['config']]} vs the baseline: {verdict_words(c)}",
                  "contrasts": [c["contrast"]]} for c in tps[:MAX_COMPARISONS]]  # fmt: skip
    return lines
