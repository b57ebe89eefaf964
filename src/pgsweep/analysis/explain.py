"""Why is it faster? The explain panel of one comparison (issue 26): every explain metric
of the two configurations (analysis.explain_data) judged with the verdicts' own model
(log value ~ round + configuration over every configuration, pooled error or paired),
the panel's metrics one family: each interval at alpha / m for m metrics (Bonferroni), so
the chance that a panel shows any false "different" is at most alpha. Rows are ranked by
the size of their change; one sentence says the verdict and the largest changes in words.

Amounts per transaction are compared as ratios (log scale) when every trial has some;
shares of session time, and amounts some trial has none of (a wait that vanishes, no
checkpoint), as differences on their own scale: the same model on exp(value / scale),
whose log is the value itself. A ratio's size is |log ratio|, a share's the change in its
fraction of session time (0.38 for 41% -> 3%, ranked like a 46% change) and an amount's
difference |log((after + f) / (before + f))| with f 1% of the larger level."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import verdict as sm
from ..errors import PgsweepError
from ..store import TPS, Results
from .explain_data import MIN_SHARE, SHARE, Metric, io_latency, per_trial, settings_differ
from .headline import percent_interval, verdict_words
from .types import Analysis

SENTENCE_CHANGES = 3  # changes the sentence names, largest first


@dataclass(frozen=True)
class Row:
    metric: Metric
    before: float  # mean over the trials of the configuration compared against
    after: float
    scale: str  # "ratio" | "difference"
    change: float  # ratio, or after - before
    low: float
    high: float
    decision: str  # "different" | "undecided" | ...
    size: float

    def as_dict(self) -> dict[str, Any]:
        return {"key": self.metric.key, "name": self.metric.label, "unit": self.metric.unit,
                "kind": self.metric.kind, "before_value": self.before,
                "after_value": self.after, "scale": self.scale, "change_value": self.change,
                "low": self.low, "high": self.high, "decision": self.decision,
                "size": self.size, "before": amount(self.metric, self.before),
                "after": amount(self.metric, self.after), "change": self.change_text(),
                "verdict": self.words()}  # fmt: skip

    def change_text(self) -> str:
        if self.scale == "ratio":
            return percent_interval(self.change, self.low, self.high,
                                    self.decision == "different")  # fmt: skip
        if self.metric.kind == SHARE:
            return (f"{_signed(self.change * 100)} pts [{_signed(self.low * 100)}, "
                    f"{_signed(self.high * 100)}]")  # fmt: skip
        top = max(abs(self.change), abs(self.low), abs(self.high))
        d = max(0, 2 - math.floor(math.log10(top))) if top > 0 else 0  # 3 significant digits
        return (f"{_signed(self.change, d)} [{_signed(self.low, d)}, "
                f"{_signed(self.high, d)}]")  # fmt: skip

    def words(self) -> str:
        if self.decision == "unreplicated":
            return "no verdict (1 build/level)"
        if self.decision != "different":
            return "no sig. diff."
        return "higher" if self.change > (1 if self.scale == "ratio" else 0) else "lower"

    def clause(self) -> str:
        """The row in the sentence: "waits on IO:WALSync fell from 41% to 3% of session
        time", "WAL bytes / tx -40%"."""
        m = self.metric
        if self.scale == "ratio":
            return f"{m.label} {_signed((self.change - 1) * 100, 0)}%"
        verb = "rose" if self.change > 0 else "fell"
        if m.kind == SHARE:
            return (f"{m.label} {verb} from {amount(m, self.before)} to "
                    f"{amount(m, self.after)} of session time")  # fmt: skip
        unit = f" {m.unit}" if m.unit else ""
        return (f"{m.label} {verb} from {amount(m, self.before)}{unit} to "
                f"{amount(m, self.after)}{unit}")  # fmt: skip


def _signed(v: float, digits: int = 1) -> str:
    return f"{0.0 if round(v, digits) == 0 else v:+,.{digits}f}"


def amount(m: Metric, v: float) -> str:
    if m.kind == SHARE:
        return f"{v * 100:.0f}%" if v >= 0.1 or v == 0 else f"{v * 100:.1f}%"
    if v == 0:
        return "0"
    digits = max(0, 2 - math.floor(math.log10(abs(v))))
    return f"{v:,.{min(digits, 6)}f}"


@dataclass(frozen=True)
class Panel:
    config: str
    against: str
    contrast: str
    sentence: str
    tps: dict[str, Any] | None  # the verdict on TPS (the report's, against the baseline)
    rows: list[Row]
    alpha: float
    compared: int  # m, the family's size
    rounds: int
    profile: list[dict[str, Any]]  # client backends' wait states, both sides (shares)
    settings: list[dict[str, str]]  # the server settings in force that differ
    waits_from: str = ""  # what sampled the wait states, in words
    others: list[dict[str, Any]] = field(default_factory=list)  # other process types' bars
    io_latency: list[dict[str, Any]] = field(default_factory=list)  # block requests, by device

    def as_dict(self) -> dict[str, Any]:
        return {"config": self.config, "against": self.against, "contrast": self.contrast,
                "sentence": self.sentence, "alpha": self.alpha, "family": self.compared,
                "rounds": self.rounds, "tps": self.tps, "profile": self.profile,
                "settings": self.settings, "waits_from": self.waits_from,
                "others": self.others, "io_latency": self.io_latency,
                "rows": [r.as_dict() for r in self.rows]}  # fmt: skip


def panel(a: Analysis, results: Results, config: str, against: str | None = None,
          alpha: float | None = None) -> Panel:  # fmt: skip
    """The explain panel of `config` against `against` (the baseline by default)."""
    against = against or a.baseline
    ids = [c.id for c in a.configurations]
    for cid in (config, against):
        if cid not in ids:
            raise PgsweepError(f"{results.folder} has no configuration {cid}",
                               expected=", ".join(ids), fix="name one of its configurations")
    if config == against:
        raise PgsweepError(f"{config} cannot be explained against itself",
                           fix="name another configuration with --against")  # fmt: skip
    alpha = float(a.method.get("alpha", sm.ALPHA)) if alpha is None else alpha
    values, known = per_trial(results)
    where = {t.id: (t.config_id, t.round) for t in results.trials(ok_only=True)}
    rounds = sorted({r for _, r in where.values()})
    every = a.experiment.get("rebuild_every")  # 0: one instance per level for the run
    design = Design({c.id: c.levels for c in a.configurations}, tuple(a.whole_plot_factors),
                    1 if every is None else int(every))  # fmt: skip
    table = {key: _by_config(values, where, key) for key in known}
    rows, m = judge(design, table, known, config, against, rounds, alpha)
    if against == a.baseline:  # the report's own verdict
        tps = next((r for r in a.comparisons if r["metric"] == TPS
                    and r.get("config") == config), None)  # fmt: skip
    else:
        tps = _tps(design, table_tps(results, where), config, against, rounds, alpha)
    name = a.names.get(config, config)
    other = a.names.get(against, against) if against != a.baseline else "the baseline"
    return Panel(config, against, f"{name} vs {other}", sentence(tps, rows, m), tps, rows,
                 alpha, m, len(rounds), profile(table, known, config, against),
                 settings_differ(results, config, against),
                 waits_from(results, [t for t, (c, _) in where.items()
                                      if c in (config, against)]),
                 other_profiles(table, known, config, against),
                 io_latency(results, config, against))  # fmt: skip


def waits_from(results: Results, trials: list[str]) -> str:
    """What sampled the trials' wait states: pg_wait_sampling where the server preloaded
    it (explain.wait_source 1), else pgsweep's own sampling of pg_stat_activity."""
    metrics = results.metrics()
    got = [metrics.get(t, {}) for t in trials if "explain.wait_hz" in metrics.get(t, {})]
    if not got:
        return ""
    hz = statistics.median(m["explain.wait_hz"] for m in got)
    sources = {m.get("explain.wait_source", 0.0) for m in got}
    what = ("pg_wait_sampling" if sources == {1.0} else "pg_stat_activity" if sources == {0.0}
            else "pg_wait_sampling in some trials, pg_stat_activity in others")  # fmt: skip
    return f"wait states sampled by {what}, {hz:.0f} times a second"


PROFILED = "client backend"  # the process type whose wait profile the panel draws


def profile(table: dict[str, dict[str, dict[int, float]]], known: dict[str, Metric],
            config: str, against: str,
            process_type: str = PROFILED) -> list[dict[str, Any]]:  # fmt: skip
    """A process type's time by wait state in both configurations (mean shares over their
    trials, in rounds both ran), largest first; states under MIN_SHARE in both as one
    "other" (the stacked bars of the panel)."""
    out: list[dict[str, Any]] = []
    rest = [0.0, 0.0]
    for key, m in known.items():
        if m.kind != SHARE or key.split(".", 2)[1] != process_type:
            continue
        by = table[key]
        both = sorted(set(by.get(config, {})) & set(by.get(against, {})))
        if not both:
            continue
        before = float(np.mean([by[against][r] for r in both]))
        after = float(np.mean([by[config][r] for r in both]))
        if max(before, after) < MIN_SHARE:
            rest = [rest[0] + before, rest[1] + after]
            continue
        out.append({"label": m.label, "before": before, "after": after})
    out.sort(key=lambda x: -max(float(x["before"]), float(x["after"])))
    if max(rest) >= 0.005:  # what prints as 1% or more
        out.append({"label": "other", "before": rest[0], "after": rest[1]})
    return out


def other_profiles(table: dict[str, dict[str, dict[int, float]]], known: dict[str, Metric],
                   config: str, against: str) -> list[dict[str, Any]]:  # fmt: skip
    """The other process types' bars (walwriter, checkpointer, autovacuum, ...): each one's
    time in a wait state or on CPU, its idle main loop left out."""
    types = sorted({k.split(".", 2)[1] for k, m in known.items() if m.kind == SHARE} - {PROFILED})
    out = [{"type": t, "states": profile(table, known, config, against, t)} for t in types]
    return [o for o in out if o["states"]]


@dataclass(frozen=True)
class Design:
    """What the model needs of the experiment: each configuration's levels, the factors
    whose levels need instances of their own, and how many rounds an instance serves."""

    levels: dict[str, dict[str, Any]]
    whole: tuple[str, ...] = ()
    every: int = 1


def judge(design: Design, table: dict[str, dict[str, dict[int, float]]],
          known: dict[str, Metric], config: str, against: str, rounds: list[int],
          alpha: float) -> tuple[list[Row], int]:  # fmt: skip
    """The panel's rows, ranked (changes called different first, then by size), and the
    family's size m; `table` is metric key -> configuration -> round -> value."""
    chosen = [k for k in sorted(known) if _worth(known[k], table[k], config, against)]
    m = max(1, len(chosen))
    rows = [r for k in chosen if (r := _judge(design, table[k], known[k], config, against,
                                                rounds, alpha / m)) is not None]  # fmt: skip
    rows.sort(key=lambda r: (r.decision != "different", -r.size, r.metric.label))
    return rows, len(chosen)


def _by_config(values: dict[str, dict[str, float]], where: dict[str, tuple[str, int]],
               key: str) -> dict[str, dict[int, float]]:  # fmt: skip
    out: dict[str, dict[int, float]] = {}
    for tid, per in values.items():
        if key in per and math.isfinite(per[key]):
            cid, r = where[tid]
            out.setdefault(cid, {})[r] = per[key]
    return out


def table_tps(results: Results, where: dict[str, tuple[str, int]]) -> dict[str, dict[int, float]]:
    out: dict[str, dict[int, float]] = {}
    for tid, v in results.metric(TPS, ok_only=True).items():
        cid, r = where[tid]
        out.setdefault(cid, {})[r] = v
    return out


def _worth(m: Metric, by: dict[str, dict[int, float]], config: str, against: str) -> bool:
    """In the family: measured in both configurations in two rounds or more, and not
    negligible (a share of at least MIN_SHARE in one of them; an amount not 0 throughout).
    Decided on the levels alone, never on the difference, so the family stays honest."""
    both = set(by.get(config, {})) & set(by.get(against, {}))
    if len(both) < 2:
        return False
    mean = [float(np.mean([by[c][r] for r in both])) for c in (config, against)]
    if m.kind == SHARE:
        return max(mean) >= MIN_SHARE
    return max(abs(v) for v in mean) > 0


def _matrix(by: dict[str, dict[int, float]], ids: list[str],
            rounds: list[int]) -> tuple[np.ndarray, list[str]]:  # fmt: skip
    """values[configuration, round] (NaN: missing) of the configurations that have any."""
    kept = [c for c in ids if by.get(c)]
    values = np.full((len(kept), len(rounds)), np.nan)
    for i, c in enumerate(kept):
        for j, r in enumerate(rounds):
            values[i, j] = by[c].get(r, np.nan)
    return values, kept


def _fit(design: Design, values: np.ndarray, kept: list[str], base: int,
         resolution: float | None = None) -> sm.Model:  # fmt: skip
    levels = [design.levels[cid] for cid in kept]
    obs = sm.Observations(values, levels, base, True, design.whole, design.every)
    return sm.fit(obs, resolution)


def _judge(design: Design, by: dict[str, dict[int, float]], m: Metric, config: str,
           against: str, rounds: list[int], level: float) -> Row | None:  # fmt: skip
    values, kept = _matrix(by, list(design.levels), rounds)
    i, j = kept.index(config), kept.index(against)
    pair = ~np.isnan(values[i]) & ~np.isnan(values[j])
    before, after = float(np.mean(values[j][pair])), float(np.mean(values[i][pair]))
    seen = values[~np.isnan(values)]
    if m.kind != SHARE and np.all(seen > 0):  # a ratio, on the log scale
        c = sm.pair_contrast(_fit(design, values, kept, j, m.step or None), i, j, level)
        if c is None:
            return None
        return Row(m, before, after, "ratio", c.ratio, c.low, c.high, c.decision,
                   abs(math.log(c.ratio)))  # fmt: skip
    scale = 1.0 if m.kind == SHARE else float(np.max(np.abs(seen))) or 1.0
    step = m.step / scale or 1e-6  # what one trial resolves, in units of the scale
    shifted = np.exp(values / scale)
    c = sm.pair_contrast(_fit(design, shifted, kept, j, step * float(np.nanmedian(shifted))), i, j,
                         level)  # fmt: skip
    if c is None:
        return None
    diff, low, high = (math.log(x) * scale for x in (c.ratio, c.low, c.high))
    if m.kind == SHARE:
        size = abs(diff)
    else:
        f = 0.01 * max(abs(before), abs(after))
        size = abs(math.log((abs(after) + f) / (abs(before) + f))) if f > 0 else 0.0
    return Row(m, before, after, "difference", diff, low, high, c.decision, size)


def _tps(design: Design, by: dict[str, dict[int, float]], config: str, against: str,
         rounds: list[int], alpha: float) -> dict[str, Any] | None:  # fmt: skip
    """TPS against a configuration other than the baseline: the same model's contrast of
    the two at alpha (against the baseline the report's own verdict serves)."""
    values, kept = _matrix(by, list(design.levels), rounds)
    if config not in kept or against not in kept:
        return None
    c = sm.pair_contrast(_fit(design, values, kept, kept.index(against)), kept.index(config),
                         kept.index(against), alpha)  # fmt: skip
    if c is None:
        return None
    return {"metric": TPS, "ratio": c.ratio, "ci_low": c.low, "ci_high": c.high,
            "decision": c.decision, "verdict": sm.verdict(c, True),
            "detectable": c.detectable, "replicates": c.replicates, "error": c.error}  # fmt: skip


def sentence(tps: dict[str, Any] | None, rows: list[Row], compared: int) -> str:
    """"faster, +27% [+18, +36]; waits on IO:DataFileRead fell from 41% to 3% of session
    time; WAL bytes / tx -40%"."""
    lead = f"TPS {verdict_words(tps)}" if tps is not None else "TPS not compared"
    changed = [r for r in rows if r.decision == "different"]
    waits = [r for r in changed if r.metric.kind == SHARE]  # the mechanism, when one shows
    changed = waits[:1] + [r for r in changed if r not in waits[:1]]
    if not compared:
        return f"{lead}; no explain figures were recorded for these trials"
    if not changed:
        return f"{lead}; none of {compared} explain figures changed beyond noise"
    return "; ".join([lead, *(r.clause() for r in changed[:SENTENCE_CHANGES])])


def panels(a: Analysis, results: Results) -> list[dict[str, Any]]:
    """A panel per configuration whose TPS the report calls different from the baseline
    (none where the folder holds no explain figure: a run of a pgsweep before them)."""
    out = []
    for row in a.comparisons:
        if row["metric"] == TPS and row["decision"] == "different" and row.get("config"):
            p = panel(a, results, str(row["config"]))
            if p.rows:
                out.append(p.as_dict())
    return out
