"""`pgsweep export`: the results as tidy tables, one row per trial, per trial-second or per
latency bin. Every row carries the experiment, configuration, the level of every factor (one
column each), round and trial, so pandas or DuckDB can read a file without joins."""

from __future__ import annotations

import json
import math
from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from .errors import PgsweepError
from .store import SECOND_COLUMNS, Store

FORMATS = ("csv", "json", "parquet")
WHAT = ("trials", "samples", "latency")
TRIAL_COLUMNS = (
    "ord", "status", "reason", "started_at", "finished_at", "warmup_s", "duration_s", "tps",
    "transactions", "failed_transactions", "latency_avg_ms", "latency_stddev_ms",
)  # fmt: skip


def table(store: Store, what: str) -> pa.Table:
    keys = _trial_keys(store)
    if what == "trials":
        rows = _trial_rows(store, keys)
    elif what == "samples":
        rows = _sample_rows(store, keys)
    else:
        rows = [
            keys[b["trial_id"]] | {k: b[k] for k in ("low_ms", "high_ms", "n")}
            for b in store.rows("SELECT * FROM latency_bin ORDER BY trial_id, low_ms")
        ]
    return _to_arrow(rows)


def write(tbl: pa.Table, fmt: str, out: Path) -> None:
    if fmt == "parquet":
        pq.write_table(tbl, out)
    elif fmt == "csv":
        pacsv.write_csv(tbl, out)
    else:
        rows = [{k: _json_value(v) for k, v in r.items()} for r in tbl.to_pylist()]
        out.write_text(json.dumps(rows, indent=1, allow_nan=False) + "\n")


def _trial_keys(store: Store) -> dict[str, dict[str, Any]]:
    """trial id -> the columns that identify it: experiment, configuration, factor levels,
    round, trial."""
    exp = store.experiment()
    if exp is None:
        raise PgsweepError(f"{store.path} holds no experiment", fix="export a finished run")
    levels = {
        c["id"]: json.loads(c["levels_json"])
        for c in store.rows("SELECT id, levels_json FROM configuration")
    }
    return {
        t["id"]: {"experiment": exp["name"], "config_id": t["config_id"]}
        | levels[t["config_id"]]
        | {"round": t["round"], "trial_id": t["id"]}
        for t in store.rows("SELECT id, config_id, round FROM trial ORDER BY ord")
    }


def _trial_rows(store: Store, keys: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    trials = {t["id"]: t for t in store.rows("SELECT * FROM trial")}
    metric: dict[str, dict[str, float]] = {}
    names: list[str] = []  # derived metrics first, then the raw counters
    for table_name, prefix in (("metric", ""), ("counter", "counter.")):
        seen = set()
        for r in store.rows(f"SELECT trial_id, name, value FROM {table_name}"):
            metric.setdefault(r["trial_id"], {})[prefix + r["name"]] = r["value"]
            seen.add(prefix + r["name"])
        names += sorted(seen)
    return [
        key
        | {
            c: _timestamp(trials[tid][c]) if c.endswith("_at") else trials[tid][c]
            for c in TRIAL_COLUMNS
        }
        | {n: metric.get(tid, {}).get(n) for n in names}
        for tid, key in keys.items()
    ]


def _sample_rows(store: Store, keys: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Per-second rows: from the transaction log where the trial kept one, from pgbench's
    progress lines otherwise (column `source` says which)."""
    from_log: dict[str, list[dict[str, Any]]] = {}
    for r in store.rows("SELECT * FROM second ORDER BY trial_id, second"):
        from_log.setdefault(r["trial_id"], []).append(r)
    progress: dict[str, list[dict[str, Any]]] = {}
    for r in store.rows("SELECT * FROM sample ORDER BY trial_id, at_s"):
        progress.setdefault(r["trial_id"], []).append(r)
    columns = [
        c if c in ("second", "tps", "failed", "skipped") else f"{c}_ms" for c in SECOND_COLUMNS
    ]
    rows = []
    for tid, key in keys.items():
        for r in from_log.get(tid, []):
            rows.append(key | {"source": "log"} | {c: r[c] for c in columns})
        if tid in from_log:
            continue
        for p in progress.get(tid, []):
            row = dict.fromkeys(columns)
            row |= {"second": int(p["at_s"]) - 1, "tps": p["tps"], "failed": p["failed"]}
            row |= {"skipped": p["skipped"], "latency_mean_ms": p["latency_ms"]}
            row["lag_mean_ms"] = p["lag_ms"]
            rows.append(key | {"source": "progress"} | row)
    return rows


def _to_arrow(rows: list[dict[str, Any]]) -> pa.Table:
    """Columns in first-seen order; a column whose values mix types (a factor with levels
    0.5 and "auto") becomes text rather than failing."""
    names: dict[str, None] = {}
    for r in rows:
        names.update(dict.fromkeys(r))
    arrays = {}
    for n in names:
        values = [r.get(n) for r in rows]
        try:
            arrays[n] = pa.array(values)
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            arrays[n] = pa.array([None if v is None else str(v) for v in values])
    return pa.table(arrays)


def _timestamp(iso: str | None) -> datetime | None:
    return datetime.fromisoformat(iso) if iso else None


def _json_value(v: Any) -> Any:
    if isinstance(v, datetime):
        return v.isoformat()
    return None if isinstance(v, float) and not math.isfinite(v) else v
