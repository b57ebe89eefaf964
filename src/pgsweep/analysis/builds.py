"""What the report says of builds and of the two phases seed 3 measured.

- Builds: which PostgreSQL each configuration ran (build id, version, source, configure
  line, from the trials' effective settings), and a warning for assertion builds.
- Phases: bytes written while loading (pgbench -i, its vacuum, a checkpoint: once per
  cluster) and while running (per transaction, with the configuration's interval), with
  device bytes per WAL byte: rows are phases, columns configurations."""

from __future__ import annotations

import math
import statistics
from typing import TYPE_CHECKING, Any

from scipy import stats as sps

from ..store import Results

if TYPE_CHECKING:
    from .types import Config

ROWS_PER_SCALE = 100_000  # pgbench_accounts rows per scale unit


def build_rows(results: Results) -> list[dict[str, Any]]:
    """One row per configuration that ran a build (none when every one ran the installed
    PostgreSQL)."""
    seen: dict[str, dict[str, Any]] = {}
    for t in results.trials(ok_only=True):
        e = t.effective
        if t.config_id in seen or "build.id" not in e:
            continue
        seen[t.config_id] = {
            "config": t.config_id,
            "build": e["build.id"],
            "version": e.get("build.version", ""),
            "source": e.get("build.source", "installed"),
            "configure": e.get("build.configure", ""),
            "wal_block_size": e.get("build.wal_block_size", ""),
            "block_size": e.get("build.block_size", ""),
            "assertions": e.get("build.debug_assertions") == "on",
        }
    rows = [seen[c.id] for c in results.configurations() if c.id in seen]
    return rows if any(r["build"] != "installed" for r in rows) else []


def assertion_warning(rows: list[dict[str, Any]]) -> list[str]:
    cassert = [r["config"] for r in rows if r["assertions"]]
    if not cassert:
        return []
    return [f"{', '.join(cassert)} ran an assertion build (--enable-cassert, debug_assertions "
            "= on): their numbers are not performance numbers"]  # fmt: skip


def _mean_ci(xs: list[float], alpha: float) -> dict[str, Any]:
    if not xs:
        return {}
    mean = statistics.fmean(xs)
    if len(xs) < 2:
        return {"mean": mean, "n": 1, "ci_low": None, "ci_high": None}
    half = sps.t.ppf(1 - alpha / 2, len(xs) - 1) * statistics.stdev(xs) / math.sqrt(len(xs))
    return {"mean": mean, "n": len(xs), "ci_low": mean - half, "ci_high": mean + half}


def phase_rows(results: Results, configs: list[Config], alpha: float) -> list[dict[str, Any]]:
    """Per configuration: the load phase's device bytes, WAL bytes and their ratio (over
    the clusters it loaded; per row loaded), and the running phase's per transaction."""
    loads = results.load_counters()
    ok = results.trials(ok_only=True)
    clusters: dict[str, set[str]] = {}
    for t in ok:
        name = t.effective.get("cluster.name")
        if name in loads:
            clusters.setdefault(t.config_id, set()).add(name)
    metrics = results.metrics()
    by_trial = {t.id: t.config_id for t in ok}
    out: list[dict[str, Any]] = []
    for c in configs:
        load = [loads[n] for n in sorted(clusters.get(c.id, ()))]
        rows = [ROWS_PER_SCALE * v.get("load.scale", 0.0) for v in load]
        written = [v["io.device_bytes_written"] for v in load if "io.device_bytes_written" in v]
        per_row = [w / r for w, r in zip(written, rows, strict=False) if r]
        ratio = "io.device_bytes_per_wal_byte"
        run_ratio = [m[ratio] for tid, m in metrics.items()
                     if by_trial.get(tid) == c.id and ratio in m]  # fmt: skip
        out.append({
            "config": c.id,
            "load": {
                "device_bytes_written": _mean_ci(written, alpha),
                "wal_bytes": _mean_ci([v["io.wal_bytes"] for v in load if "io.wal_bytes" in v],
                                      alpha),
                "device_bytes_per_row": _mean_ci(per_row, alpha),
                "device_bytes_per_wal_byte": _mean_ci(
                    [v["io.device_bytes_per_wal_byte"] for v in load
                     if "io.device_bytes_per_wal_byte" in v], alpha),
            },
            "run": {
                "device_bytes_written_per_tx": _summary(c, "io.device_bytes_written_per_tx"),
                "wal_bytes_per_tx": _summary(c, "io.wal_bytes_per_tx"),
                "device_bytes_per_wal_byte": _mean_ci(run_ratio, alpha),
            },
        })  # fmt: skip
    return (
        out if any(v for r in out for phase in ("load", "run") for v in r[phase].values()) else []
    )


def _summary(c: Config, metric: str) -> dict[str, Any]:
    s = c.summary.get(metric)
    if not s:
        return {}
    return {"mean": s["level"] if s["level"] is not None else s["mean"], "n": s["n"],
            "ci_low": s["ci_low"], "ci_high": s["ci_high"]}  # fmt: skip
