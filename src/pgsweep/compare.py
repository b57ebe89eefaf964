"""`pgsweep compare BEFORE AFTER`: the same configurations measured in two result folders
(before and after an upgrade, a patch, two machines), and the regression gate for CI.

Configurations are matched by their factor levels. The folders share no rounds, so each
comparison is Welch's t on log TPS (after against before), with Bonferroni-adjusted
intervals over the matched configurations: the intervals hold simultaneously, and a
verdict and its interval never disagree. Two sessions also differ in whatever the machine
did between them (measured here: A/A folders run back to back are called "different" 16%
of the time at 5 rounds, 66% at 10, at a nominal 5%), so every cross-session comparison
says so; `--fail-if-slower X` fails only when the whole interval lies below -X, which a
drift smaller than X cannot produce."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from typing import Any
from xml.etree import ElementTree as ET

import numpy as np
from scipy import stats as sps

from .analysis import Analysis
from .safetext import xml
from .store import TPS, Results

ALPHA = 0.05
ENV_KEYS = ("kernel", "cpu_model", "cpu_count", "memory_total")
SESSION_WARNING = (
    "the folders ran in different sessions: each difference includes whatever the machine "
    "did between them (drift), not only the change; for a verdict on the change alone, "
    "measure both in one run: pgsweep run AFTER_FILE --against BEFORE_DIR (interleaved in "
    "every round)"
)


@dataclass(frozen=True)
class Row:
    levels: dict[str, Any]
    n_a: int
    n_b: int
    ratio: float  # geometric mean of after / before
    ci_low: float | None  # simultaneous (Bonferroni over the matched configurations)
    ci_high: float | None
    p_adjusted: float | None
    decision: str  # "faster", "slower", "no significant difference", "too few trials"
    slower_beyond_threshold: bool
    verdict: str


def compare(
    a: Results, b: Results, alpha: float = ALPHA, fail_if_slower: float | None = None
) -> dict[str, Any]:
    tps_a, tps_b = _tps_by_levels(a), _tps_by_levels(b)
    matched = [k for k in tps_a if k in tps_b]
    family = max(1, len(matched))
    rows = [_row(json.loads(k), tps_a[k], tps_b[k], alpha, family, fail_if_slower)
            for k in matched]  # fmt: skip
    return {
        "alpha": alpha,
        "fail_if_slower": fail_if_slower,
        "matched": [asdict(r) for r in rows],
        "regressions": [asdict(r) for r in rows if r.slower_beyond_threshold],
        "only_in_a": [json.loads(k) for k in tps_a if k not in tps_b],
        "only_in_b": [json.loads(k) for k in tps_b if k not in tps_a],
        "warnings": [SESSION_WARNING, *environment_differences(a, b)],
    }


def _row(levels: dict[str, Any], before: list[float], after: list[float], alpha: float,
         family: int, threshold: float | None) -> Row:  # fmt: skip
    a, b = np.log([v for v in before if v > 0]), np.log([v for v in after if v > 0])
    ratio = math.exp(float(b.mean() - a.mean())) if len(a) and len(b) else float("nan")
    if len(a) < 2 or len(b) < 2:
        return Row(levels, len(a), len(b), ratio, None, None, None, "too few trials", False,
                   "too few trials for an interval (2 per folder at least)")  # fmt: skip
    test = sps.ttest_ind(b, a, equal_var=False)
    low, high = test.confidence_interval(1 - alpha / family)
    lo, hi = math.exp(float(low)), math.exp(float(high))
    if not (math.isfinite(lo) and math.isfinite(hi)):  # identical values: no spread at all
        lo = hi = ratio
    p = min(1.0, float(test.pvalue) * family)
    decision = "faster" if lo > 1 else "slower" if hi < 1 else "no significant difference"
    beyond = threshold is not None and hi < 1 - threshold
    text = f"{_pct(ratio)} [{_pct(lo)}, {_pct(hi)}]"
    verdict = f"{decision}: {text}" if decision != "no significant difference" else (
        f"no significant difference ({text})")  # fmt: skip
    if beyond and threshold is not None:
        verdict += f"; slower than the {threshold * 100:g}% allowed"
    return Row(levels, len(a), len(b), ratio, lo, hi, p, decision, beyond, verdict)


def within_run_gate(a: Analysis, threshold: float) -> dict[str, Any]:
    """The gate inside one run (`report --fail-if-slower`): each configuration's TPS against
    the baseline, measured side by side in every round, so no session drift is in it; for
    a `run --against` run, the change (after against before, averaged over the other
    factors). The same shape as `compare`'s result, for gate_line and junit_xml."""
    if "run.against" in a.factors:  # `run --against`: the change is that factor's effect
        rows = [
            {"levels": {"run.against": "after"}, "verdict": e["verdict"],
             "ci_high": e["ci_high"], "slower_beyond_threshold": e["ci_high"] < 1 - threshold}
            for e in a.main_effects() if e["factor"] == "run.against"
        ]  # fmt: skip
        return {"fail_if_slower": threshold, "matched": rows,
                "regressions": [r for r in rows if r["slower_beyond_threshold"]]}  # fmt: skip
    levels = {c.id: c.levels for c in a.configurations}
    rows = [
        {"levels": levels[r["config"]], "verdict": r["verdict"], "ci_high": r["ci_high"],
         "slower_beyond_threshold": r["ci_high"] < 1 - threshold}
        for r in a.comparisons if r["metric"] == TPS and r["kind"] == "baseline"
    ]  # fmt: skip
    return {"fail_if_slower": threshold, "matched": rows,
            "regressions": [r for r in rows if r["slower_beyond_threshold"]]}  # fmt: skip


def _pct(ratio: float) -> str:
    value = (ratio - 1) * 100
    return f"{0.0 if round(value, 1) == 0 else value:+.1f}%"  # never "-0.0%"


def junit_xml(result: dict[str, Any], before: str, after: str) -> str:
    """One test case per matched configuration; a failure where it is slower than allowed."""
    cases = result["matched"]
    suite = ET.Element("testsuite", name="pgsweep compare", tests=str(len(cases)),
                       failures=str(len(result["regressions"])))  # fmt: skip
    ET.SubElement(ET.SubElement(suite, "properties"), "property", name="before",
                  value=xml(before))  # fmt: skip
    for r in cases:
        name = ", ".join(f"{k}={v}" for k, v in r["levels"].items()) or "(no factors)"
        case = ET.SubElement(suite, "testcase", classname="pgsweep.tps", name=xml(name))
        if r["slower_beyond_threshold"]:
            ET.SubElement(case, "failure", message=xml(r["verdict"])).text = xml(
                f"TPS in {after} against {before}: {r['verdict']}")  # fmt: skip
        ET.SubElement(case, "system-out").text = xml(r["verdict"])
    return ET.tostring(suite, encoding="unicode", xml_declaration=True)


def gate_line(result: dict[str, Any]) -> str:
    """The one line a CI log shows."""
    threshold = result["fail_if_slower"]
    bad = result["regressions"]
    if not bad:
        return (f"pgsweep gate: PASS: no configuration is significantly more than "
                f"{threshold * 100:g}% slower ({len(result['matched'])} compared)")  # fmt: skip
    worst = min(bad, key=lambda r: r["ci_high"])
    name = ", ".join(f"{k}={v}" for k, v in worst["levels"].items()) or "(no factors)"
    return (f"pgsweep gate: FAIL: {len(bad)} of {len(result['matched'])} configuration(s) "
            f"slower than {threshold * 100:g}%; worst {name}: {worst['verdict']}")  # fmt: skip


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
        out = {f.name: f.value for f in env if f.scope == "host" and f.name in ENV_KEYS}
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
