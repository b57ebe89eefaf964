"""`pgsweep compare A B`: the same configurations measured in two result folders (before and
after an upgrade, two machines). Configurations are matched by their factor levels; the
folders share no rounds, so each comparison is Welch's t on log TPS (B against A)."""

from __future__ import annotations

import json
from typing import Any

from . import stats
from .store import Store

ENV_KEYS = ("kernel", "cpu_model", "cpu_count", "memory_total")


def compare(a: Store, b: Store) -> dict[str, Any]:
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


def _tps_by_levels(store: Store) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for r in store.rows(
        "SELECT c.levels_json, t.tps FROM trial t JOIN configuration c ON c.id = t.config_id "
        "WHERE t.status = 'ok'"
    ):
        key = json.dumps(json.loads(r["levels_json"]), sort_keys=True)
        out.setdefault(key, []).append(r["tps"])
    return out


def environment_differences(a: Store, b: Store) -> list[str]:
    """Kernel, PostgreSQL version, CPU, memory and the devices under the clusters."""

    def facts(s: Store) -> dict[str, str]:
        rows = s.rows("SELECT scope, name, value FROM environment")
        out = {
            r["name"]: r["value"] for r in rows if r["scope"] == "host" and r["name"] in ENV_KEYS
        }
        exp = s.experiment() or {}
        out["postgres_version"] = str(exp.get("postgres_version", ""))
        models = sorted({r["value"] for r in rows if r["scope"].startswith("cluster-")
                         and r["name"].endswith((".model", "pgdata.fstype"))})  # fmt: skip
        out["devices"] = ", ".join(models)
        return out

    fa, fb = facts(a), facts(b)
    return [
        f"the environments differ in {k}: {fa.get(k, '?')!r} vs {fb.get(k, '?')!r}"
        for k in sorted(set(fa) | set(fb))
        if fa.get(k) != fb.get(k)
    ]
