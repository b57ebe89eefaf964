"""`pgsweep compare BEFORE AFTER`: the same configurations measured in separate result
folders (before and after an upgrade, a patch, two machines), and the regression gate.

Configurations are matched by their factor levels. Folders share no rounds, so a verdict
between them rests on sessions (verdict.sessions): each folder is one session, and the
spread of session means must be measured, from more sessions of a side (`--more-before`,
`--more-after`) or from an A/A calibration the user ran (`--calibration DIR DIR ...`: two
or more runs of one unchanged file, back to back). Without it, compare prints each
difference, says session drift cannot be told apart from it, and points to
`run --against`, which measures both sides in every round; and `--fail-if-slower` is an
input error (exit 2): a gate must decide from interleaved evidence (`run --against`, then
`report --fail-if-slower`) or a calibrated compare. Where it decides, it fails when the
one-sided upper bound of a configuration's ratio lies below 1 - X, and prints what slowdown
it catches with 80% power."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from scipy import stats as sps

from ..errors import PgsweepError
from ..store import TPS, Results
from ..verdict import sessions as ss
from ..verdict.dist import ALPHA as ALPHA  # the gate's default, for the CLI
from .types import Analysis

ENV_KEYS = ("kernel", "cpu_model", "cpu_count", "memory_total")
SESSION_WARNING = (
    "the folders ran in different sessions and the drift between sessions was not measured "
    "(one session per side, or each side's sessions run as one block in time, and no "
    "--calibration): each difference may be the machine's drift as much as the change, so "
    "no verdict is given; for a verdict on the change, measure both in one run: pgsweep run "
    "AFTER_FILE --against BEFORE_DIR (interleaved in every round), alternate before and "
    "after runs (--more-before, --more-after), or name an A/A calibration: --calibration AA1 "
    "AA2 (two runs of one unchanged file, back to back)"
)
CALIBRATED = ("session-to-session spread measured from {what}: each folder is one session, "
              "its mean one value ({df} degrees of freedom)")  # fmt: skip


@dataclass(frozen=True)
class Row:
    levels: dict[str, Any]
    n_a: int  # trials before (every session of the side)
    n_b: int
    ratio: float  # after / before
    ci_low: float | None  # simultaneous (Bonferroni over the matched configurations)
    ci_high: float | None
    p_adjusted: float | None
    decision: str  # "faster", "slower", "no significant difference", "drift not measured"
    slower_beyond_threshold: bool
    verdict: str
    bound: float | None = None  # one-sided upper bound (the gate's)
    catches: float | None = None  # the slowdown the gate catches with 80% power
    df: int = 0


def compare(
    a: Results | list[Results], b: Results | list[Results], alpha: float = ALPHA,
    fail_if_slower: float | None = None, calibration: list[Results] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """`a` the before session(s), `b` the after session(s), `calibration` A/A sessions."""
    before, after = (x if isinstance(x, list) else [x] for x in (a, b))
    calib = list(calibration or [])
    tps_a, tps_b = [_tps_by_levels(r) for r in before], [_tps_by_levels(r) for r in after]
    tps_c = [_tps_by_levels(r) for r in calib]
    matched = [k for k in tps_a[0] if all(k in t for t in tps_a + tps_b)]
    measured = len(calib) >= 2 or (len(before) + len(after) > 2 and not _blocked(before, after))
    if fail_if_slower is not None and not measured:
        raise PgsweepError(
            "the gate cannot decide between two sessions: their drift was not measured",
            expected="interleaved evidence, or sessions enough to measure the drift",
            fix="measure both in one run: pgsweep run AFTER_FILE --against BEFORE_DIR, then "
            "pgsweep report NEW_DIR --fail-if-slower X; or name an A/A calibration "
            "(--calibration AA1 AA2: two runs of one unchanged file) or more sessions "
            "(--more-before DIR, --more-after DIR)",
        )  # fmt: skip
    family = max(1, len(matched))
    blocked = _blocked(before, after)
    rows = [_row(json.loads(k), [t[k] for t in tps_a], [t[k] for t in tps_b],
                 [t[k] for t in tps_c if k in t], alpha, family, fail_if_slower, blocked)
            for k in matched]  # fmt: skip
    notes = []
    if measured:
        what = ", ".join(f"{n} {side} sessions" for n, side in
                         ((len(before), "before"), (len(after), "after"),
                          (len(calib), "calibration")) if n)  # fmt: skip
        notes.append(CALIBRATED.format(what=what, df=max((r.df for r in rows), default=0)))
    return {
        "alpha": alpha,
        "fail_if_slower": fail_if_slower,
        "sessions": {"before": len(before), "after": len(after), "calibration": len(calib)},
        "matched": [asdict(r) for r in rows],
        "regressions": [asdict(r) for r in rows if r.slower_beyond_threshold],
        "only_in_a": [json.loads(k) for k in tps_a[0] if k not in matched],
        "only_in_b": [json.loads(k) for k in tps_b[0] if k not in tps_a[0]],
        "notes": notes,
        "warnings": ([] if measured else [SESSION_WARNING])
        + environment_differences(before[0], after[0]),
    }


def _blocked(before: list[Results], after: list[Results]) -> bool:
    """Did every session of one side start before every session of the other?"""
    starts = [[r.experiment().created_at for r in side] for side in (before, after)]
    return max(starts[0]) < min(starts[1]) or max(starts[1]) < min(starts[0])


def _within(sessions: list[list[float]]) -> float:
    """Mean within-session variance of log TPS (sessions of two trials or more)."""
    found = [float(np.var(np.log(v), ddof=1)) for v in sessions if len(v) > 1]
    return float(np.mean(found)) if found else math.nan


def _row(levels: dict[str, Any], before: list[list[float]], after: list[list[float]],
         calibration: list[list[float]], alpha: float, family: int,
         threshold: float | None, blocked: bool = False) -> Row:  # fmt: skip
    means = [[float(np.mean(np.log(v))) for v in side if v] for side in (before, after)]
    calib = [[float(np.mean(np.log(v))) for v in calibration if v]]
    n_a, n_b = (sum(len(v) for v in side) for side in (before, after))
    if not means[0] or not means[1]:
        return Row(levels, n_a, n_b, math.nan, None, None, None, "too few trials", False,
                   "no trials on one side")  # fmt: skip
    noisier = _within(before + after) / _within(calibration) if calibration else 1.0
    v = ss.judge(means[0], means[1], calib, family, alpha, threshold,
                 noisier if math.isfinite(noisier) else 1.0, blocked)  # fmt: skip
    text = _pct(v.ratio)
    if v.low is None or v.high is None:
        why = ("the sides ran as blocks in time" if blocked and len(means[0]) + len(means[1]) > 2
               else "drift between the sessions not measured")  # fmt: skip
        return Row(levels, n_a, n_b, v.ratio, None, None, None, v.decision, False,
                   f"{text}, {why}: no verdict")  # fmt: skip
    text += f" [{_pct(v.low)}, {_pct(v.high)}]"
    verdict = f"{v.decision}: {text}" if v.decision != "no significant difference" else (
        f"no significant difference ({text})")  # fmt: skip
    beyond = threshold is not None and v.bound is not None and v.bound < 1 - threshold
    if beyond and threshold is not None:
        verdict += f"; slower than the {threshold * 100:g}% allowed"
    return Row(levels, n_a, n_b, v.ratio, v.low, v.high, v.p_adjusted, v.decision, beyond,
               verdict, v.bound, v.catches, v.df)  # fmt: skip


def within_run_gate(a: Analysis, threshold: float) -> dict[str, Any]:
    """The gate inside one run (`report --fail-if-slower`): each configuration's TPS against
    the baseline, measured side by side in every round, so no session drift is in it; for
    a `run --against` run, the change (after against before, averaged over the other
    factors). One-sided: a row fails when its upper bound (1 - alpha, Bonferroni over the
    rows) is below 1 - threshold; after adaptive rounds the bound is the repeated
    interval's, which holds over the looks. A comparison across levels built once is no
    verdict and is not gated. The same shape as `compare`'s result."""
    if "run.against" in a.factors:  # `run --against`: the change is that factor's effect
        found = [(e, {"run.against": "after"}) for e in a.main_effects()
                 if e["factor"] == "run.against"]  # fmt: skip
    else:
        levels = {c.id: c.levels for c in a.configurations}
        found = [(r, levels[r["config"]]) for r in a.comparisons
                 if r["metric"] == TPS and r["kind"] == "baseline"]  # fmt: skip
    gated = [(r, lv) for r, lv in found if r["decision"] != "unreplicated"]
    k, alpha = max(1, len(gated)), float(a.method["alpha"])
    rows = []
    for r, lv in gated:
        if "adaptive" in a.method or not r.get("se"):
            bound, catches = r["ci_high"], None
        else:
            bound = ss.one_sided_bound(r["ratio"], r["se"], r["df"], alpha, k)
            crit = float(sps.t.isf(alpha / k, r["df"]))
            catches = ss.gate_catches(r["se"], r["df"], crit, threshold)
        rows.append({"levels": lv, "verdict": r["verdict"], "ci_high": r["ci_high"],
                     "bound": bound, "catches": catches,
                     "slower_beyond_threshold": bound < 1 - threshold})  # fmt: skip
    return {"fail_if_slower": threshold, "matched": rows,
            "regressions": [r for r in rows if r["slower_beyond_threshold"]],
            "not_gated": len(found) - len(gated)}  # fmt: skip


def _pct(ratio: float) -> str:
    value = (ratio - 1) * 100
    return f"{0.0 if round(value, 1) == 0 else value:+.1f}%"  # never "-0.0%"


def _tps_by_levels(results: Results) -> dict[str, list[float]]:
    """Levels (as sorted JSON) -> TPS of each ok trial, in run order."""
    levels = {c.id: json.dumps(c.levels, sort_keys=True) for c in results.configurations()}
    out: dict[str, list[float]] = {}
    for t in results.trials(ok_only=True):
        if t.tps is not None:
            out.setdefault(levels[t.config_id], []).append(t.tps)
    return out


def environment_differences(a: Results, b: Results) -> list[str]:
    """Kernel, PostgreSQL version, CPU, memory and the devices under the clusters."""

    def facts(s: Results) -> dict[str, str]:
        env = s.environment()
        hosts: dict[str, list[str]] = {}  # a merged fleet's hosts are "host@GROUP"
        for f in env:
            if f.scope.split("@")[0] == "host" and f.name in ENV_KEYS:
                hosts.setdefault(f.name, []).append(f.value)
        out = {k: " / ".join(dict.fromkeys(v)) for k, v in hosts.items()}
        out["postgres_version"] = s.experiment().postgres_version
        models = sorted({f.value for f in env if f.scope.startswith("cluster-")
                         and f.name.endswith((".model", "pgdata.fstype"))})  # fmt: skip
        out["devices"] = ", ".join(models)
        # the PostgreSQL each configuration ran: a build key and version, or "installed"
        ran = {(t.effective.get("build.id", "installed"), t.effective.get("build.version", ""))
               for t in s.trials(ok_only=True)}  # fmt: skip
        out["builds"] = ", ".join(f"{k} ({v})" if k != "installed" else k for k, v in sorted(ran))
        return out

    fa, fb = facts(a), facts(b)
    return [
        f"the environments differ in {k}: {fa.get(k, '?')!r} vs {fb.get(k, '?')!r}"
        for k in sorted(set(fa) | set(fb))
        if fa.get(k) != fb.get(k)
    ]
