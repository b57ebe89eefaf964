"""`pgsweep compare A B`: the same configurations measured in two result folders (before and
after an upgrade, two machines). Configurations are matched by their factor levels; the
folders share no rounds, so each comparison is Welch's t on log TPS (B against A)."""

from __future__ import annotations

import json
from typing import Any

from . import stats
from .store import Results

ENV_KEYS = ("kernel", "cpu_model", "cpu_count", "memory_total")


def compare(a: Results, b: Results) -> dict[str, Any]:
    rows = []
    tps_a, tps_b = _tps_by_levels(a), _tps_by_levels(b)
    matched = [k for k in tps_a if k in tps_b]
    results = [stats.compare_unpaired(tps_b[k], tps_a[k]) for k in matched]
    adjusted = stats.holm([r.p if r else None for r in results])
    for key, r, p_adj in zip(matched, results, adjusted, strict=True):
        if r is None:
            continue
        r = stats.Comparison(**{**r.__dict__, "p_adjusted": p_adj})
        rows.append({"levels": json.loads(key), "n_a": len(tps_a[key]), "n_b": len(tps_b[key]),
                     **r.__dict__, "verdict": stats.verdict(r, higher_is_better=True)})  # fmt: skip
    return {
        "matched": rows,
        "only_in_a": [json.loads(k) for k in tps_a if k not in tps_b],
        "only_in_b": [json.loads(k) for k in tps_b if k not in tps_a],
        "warnings": environment_differences(a, b),
    }


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
        return out

    fa, fb = facts(a), facts(b)
    return [
        f"the environments differ in {k}: {fa.get(k, '?')!r} vs {fb.get(k, '?')!r}"
        for k in sorted(set(fa) | set(fb))
        if fa.get(k) != fb.get(k)
    ]
