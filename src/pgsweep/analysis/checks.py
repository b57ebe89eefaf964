"""Warnings a person can act on, from an analysis and its results folder: too few trials,
noisy configurations, failed trials, metrics left out, a machine that drifted by as much as
the differences being judged, windows whose own TPS disagrees with pgbench's, checkpoints
in some windows only, whole-plot factors resting on one build per level."""

from __future__ import annotations

import re

from ..store import TPS, Results
from .types import METRICS, NEGLIGIBLE_BYTES, Analysis

CV_WARN = 0.05
WINDOW_TOLERANCE = 0.02


def warnings(a: Analysis, results: Results) -> list[str]:

    few, noisy, failed, empty = [], [], [], []
    for c in a.configurations:
        s = c.summary.get(TPS)
        n = s["n"] if s else 0
        if 0 < n < 3:
            few.append(f"{c.id} ({n})")
        if s and s["cv"] is not None and s["cv"] > CV_WARN:
            noisy.append(f"{c.id} ({s['cv']:.1%})")
        if c.failed:
            failed.append(c.id)
        zero = [r for r, v in c.values.get(TPS, {}).items() if not v or v <= 0]
        if zero:
            empty.append(f"{c.id} ({len(zero)})")
    out = _failures(results)  # one line per cause, with the configurations it hit
    if few:
        out.append(f"only 1-2 successful trials, and intervals need 3 or more: {_ids(few)}")
    if noisy:
        out.append(f"TPS varies by a CV above {CV_WARN:.0%} across trials (add rounds or longer "
                   f"windows): {_ids(noisy)}")  # fmt: skip
    if empty:
        out.append("trials that completed no transaction, left out of the comparisons: "
                   f"{_ids(empty)}")  # fmt: skip
    for name, (label, _, _) in METRICS.items():
        quiet = [c.id for c in a.configurations if name in c.negligible]
        if quiet:
            out.append(f"{label}: {', '.join(quiet)} wrote under {NEGLIGIBLE_BYTES:.0f} B "
                       "per transaction in some trials; those trials are not compared on "
                       "it")  # fmt: skip
    if a.drift and a.drift["large"]:
        out.append(f"the machine drifted during the run: {a.drift['reason']}; comparisons "
                   "within rounds cancel most of it, but per-configuration levels, and "
                   "factors built once per level, carry it (see the per-round levels)")  # fmt: skip
    out += _windows(results)
    out += _stalls(results)
    if a.whole_plot_factors and not a.experiment.get("replicated"):
        out.append(f"{', '.join(a.whole_plot_factors)}: each level ran on one cluster built "
                   "once, so no comparison across their levels is a verdict: the report says "
                   "what those builds differ by in this run (run-to-run noise only, not "
                   "build-to-build variation); rebuild = \"per_round\" or \"auto\" "
                   "replicates them")  # fmt: skip
    out += [f"method: {n}" for n in _grouped_notes(a.method.get("notes", []))]
    return out


def _ids(items: list[str], most: int = 12) -> str:
    more = f" and {len(items) - most} more" if len(items) > most else ""
    return ", ".join(items[:most]) + more


def _failures(results: Results) -> list[str]:
    """Failed trials grouped by cause: one line each, with the configurations it hit."""
    causes: dict[str, tuple[str, list[str]]] = {}
    for t in results.trials():
        if t.status == "failed":
            key, text = cause(t.reason or "(no reason stored)")
            causes.setdefault(key, (text, []))[1].append(t.config_id)
    out = []
    for text, where in sorted(causes.values(), key=lambda tw: -len(tw[1])):
        configs = sorted(set(where))
        out.append(f"{len(where)} trial(s) failed ({_ids(configs)}): {text} "
                   "(`pgsweep show` lists each)")  # fmt: skip
    return out


def cause(reason: str) -> tuple[str, str]:
    """A failure reason as one line, and the key that groups reasons saying the same: the
    command it quotes cut to its program, the error its output ends with, and numbers
    (PIDs, client ids, paths of trials) not told apart in the key. When the server said
    why (ERROR, FATAL, PANIC), that is the cause, wherever the client put it: pgbench
    words one statement timeout in two ways, by whether a client had started."""
    lines = reason.splitlines() or [""]
    head = re.sub(r"`(?:[^`\s]*/)?([^`\s/]+)[^`]*`", r"`\1 ...`", lines[0])
    server = [ln.strip() for ln in lines[1:] if re.search(r"(ERROR|FATAL|PANIC):", ln)]
    other = [ln.strip() for ln in lines[1:] if "error" in ln.lower()]
    detail = (server or other[-1:] or [""])[0]
    text = f"{head} {detail}".strip()
    said = [m.group(0) for ln in lines if (m := re.search(r"(ERROR|FATAL|PANIC):.*", ln))]
    key = f"{head.split(':')[0]}: {' '.join(said[0].split())}" if said else text
    return re.sub(r"\d+", "N", key), text


def _grouped_notes(notes: list[str]) -> list[str]:
    """The method's notes, those saying the same of many contrasts on one line."""
    same = ": not estimable from these trials"
    grouped: dict[str, list[str]] = {}
    out = []
    for note in notes:
        if note.endswith(same):
            metric, _, what = note.removesuffix(same).partition(": ")
            grouped.setdefault(metric, []).append(what)
        else:
            out.append(note)
    out += [f"{metric}: not estimable from these trials: {_ids(whats)}"
            for metric, whats in grouped.items()]  # fmt: skip
    return out


def _stalls(results: Results) -> list[str]:
    """Seconds in which the primary completed no transaction: pgbench's average hides them
    (remote_apply behind a standby that holds replay back freezes every commit)."""
    zero = results.metric("stability.zero_tps_seconds", ok_only=True)
    hit = {t: v for t, v in zero.items() if v > 0}
    if not hit:
        return []
    worst = max(hit, key=lambda t: hit[t])
    return [f"{len(hit)} trial(s) had seconds in which no transaction completed (stalls; "
            f"worst {hit[worst]:.0f} s in {worst}): their average TPS hides a frozen "
            "server; see the per-second TPS"]  # fmt: skip


def replication_rows(results: Results) -> list[dict[str, object]]:
    """Per configuration with standbys: the mean over its trials of each replication
    figure (lags in ms, bytes behind, the synchronous share of seconds, conflicts), and its
    stall seconds; [] when no trial had standbys."""
    names = ("replication.write_lag_ms_mean", "replication.flush_lag_ms_mean",
             "replication.replay_lag_ms_mean", "replication.replay_lag_ms_max",
             "replication.replay_bytes_behind_max", "replication.sync_share",
             "replication.conflicts", "stability.zero_tps_seconds")  # fmt: skip
    values = {n: results.metric(n, ok_only=True) for n in names}
    if not values["replication.replay_lag_ms_mean"]:
        return []
    by_config: dict[str, list[str]] = {}
    for t in results.trials(ok_only=True):
        by_config.setdefault(t.config_id, []).append(t.id)
    rows: list[dict[str, object]] = []
    for config, trials in sorted(by_config.items()):
        row: dict[str, object] = {"config": config}
        for n in names:
            got = [values[n][t] for t in trials if t in values[n]]
            row[n.split(".", 1)[1]] = sum(got) / len(got) if got else None
        rows.append(row)
    return rows


def _windows(results: Results) -> list[str]:
    out = []
    ratios = list(results.metric("window.tps_vs_summary").values())  # failed trials too
    off = [v for v in ratios if abs(v - 1) > WINDOW_TOLERANCE]
    if off:
        worst = max(off, key=lambda v: abs(v - 1))
        out.append(f"{len(off)} trial(s) counted a window TPS from the transaction log more "
                   f"than {WINDOW_TOLERANCE:.0%} away from pgbench's own (worst {worst:.3f}x): "
                   "check those trials' logs")  # fmt: skip
    checkpoints = list(results.metric("stability.checkpoints", ok_only=True).values())
    hit = sum(v > 0 for v in checkpoints)
    if 0 < hit < len(checkpoints):
        out.append(f"checkpoints started inside {hit} of {len(checkpoints)} measured windows: "
                   "those trials paid for writes the others did not")  # fmt: skip
    return out
