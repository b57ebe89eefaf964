"""`pgsweep export`: the results as tidy tables, one row per trial, per trial-second, per
latency bin, per wait state, per process type, per device-second or per profiled stack
(the explain figures). Every row carries the experiment, configuration, the level of
every factor (one column each), host group (a sharded or merged fleet's; empty on one
machine), round and trial, so pandas or DuckDB can read a file without joins."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, fields
from datetime import datetime
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from ..collect import blockio, perf
from ..store import Results, Second, Trial
from .safetext import csv_cell

_SECOND_FIELDS = tuple(f.name for f in fields(Second))  # the columns of --what samples
TRIAL_COLUMNS = (
    "ord", "status", "reason", "started_at", "finished_at", "warmup_s", "duration_s", "tps",
    "transactions", "failed_transactions", "latency_avg_ms", "latency_stddev_ms",
)  # fmt: skip


def table(results: Results, what: str) -> pa.Table:
    keys = _trial_keys(results)
    if what == "trials":
        rows = _trial_rows(results, keys)
    elif what == "samples":
        rows = _sample_rows(results, keys)
    elif what == "standbys":
        seconds = results.standby_seconds()
        rows = [keys[tid] | asdict(s) for tid in keys for s in seconds.get(tid, [])]
    elif what in ("waits", "cpu", "devices", "tool"):  # explain figures; the tool's seconds
        per: dict[str, list[Any]] = (results.waits() if what == "waits" else
                                     results.process_cpu() if what == "cpu" else
                                     results.device_seconds() if what == "devices" else
                                     results.tool_seconds())  # fmt: skip
        rows = [keys[tid] | asdict(x) for tid in keys for x in per.get(tid, [])]
    elif what == "profiles":  # [experiment] cpu_profile: one row per trial and stack
        rows = [keys[tid] | {"stack": stack, "samples": n} for tid in keys
                if (raw := results.artifact(tid, perf.ARTIFACT))
                for stack, n in perf.parse(raw.decode(errors="replace")).most_common()]  # fmt: skip
    elif what == "io_latency":  # [experiment] io_latency: one row per trial, device, kind, bucket
        rows = [keys[tid] | _bucket_row(key, n) for tid in keys
                if (raw := results.artifact(tid, blockio.ARTIFACT))
                for key, n in sorted(blockio.parse(raw.decode(errors="replace")).items())]
    else:
        bins = results.latency_bins()
        rows = [keys[tid] | asdict(b) for tid in sorted(bins) for b in bins[tid]]  # by trial id
    return _to_arrow(rows)


def _bucket_row(key: tuple[str, str, int], requests: int) -> dict[str, Any]:
    low, high = blockio.bounds_us(key[2])
    return {"device": key[0], "kind": key[1], "low_us": low, "high_us": high,
            "requests": requests}  # fmt: skip


def encode(tbl: pa.Table, fmt: str) -> bytes:
    """The file's bytes (the CLI writes them without following links: host.folders)."""
    if fmt == "json":
        rows = [{k: _json_value(v) for k, v in r.items()} for r in tbl.to_pylist()]
        return (json.dumps(rows, indent=1, allow_nan=False) + "\n").encode()
    sink = pa.BufferOutputStream()
    if fmt == "parquet":
        pq.write_table(tbl, sink)
    else:
        pacsv.write_csv(_no_formulas(tbl), sink)
    return bytes(sink.getvalue().to_pybytes())


def _no_formulas(tbl: pa.Table) -> pa.Table:
    """Text cells (levels, failure reasons) and column names a spreadsheet would run as a
    formula get a leading apostrophe (safetext.csv_cell): the CSV is for spreadsheets too."""
    columns = []
    for column in tbl.columns:
        if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
            values = [None if v is None else csv_cell(v) for v in column.to_pylist()]
            column = pa.chunked_array([pa.array(values, type=column.type)])
        columns.append(column)
    return pa.table(columns, names=[csv_cell(n) for n in tbl.column_names])


def _trial_keys(results: Results) -> dict[str, dict[str, Any]]:
    """trial id -> the columns that identify it: experiment, configuration, factor levels,
    round, trial."""
    name = results.experiment().name
    levels = {c.id: c.levels for c in results.configurations()}
    return {
        t.id: {"experiment": name, "config_id": t.config_id}
        | levels[t.config_id]
        | {"group": t.host_group, "round": t.round, "trial_id": t.id}
        for t in results.trials()
    }


def _trial_rows(results: Results, keys: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    trials = {t.id: _trial_columns(t) for t in results.trials()}
    metric: dict[str, dict[str, float]] = {}
    names: list[str] = []  # derived metrics first, then the raw counters
    for per_trial, prefix in ((results.metrics(), ""), (results.counters(), "counter.")):
        seen = set()
        for tid, values in per_trial.items():
            for n, v in values.items():
                metric.setdefault(tid, {})[prefix + n] = v
                seen.add(prefix + n)
        names += sorted(seen)
    return [
        key | trials[tid] | {n: metric.get(tid, {}).get(n) for n in names}
        for tid, key in keys.items()
    ]


def _trial_columns(t: Trial) -> dict[str, Any]:
    values = {c: getattr(t, c) for c in TRIAL_COLUMNS}
    return values | {c: _timestamp(v) for c, v in values.items() if c.endswith("_at")}


def _sample_rows(results: Results, keys: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Per-second rows: from the transaction log where the trial kept one, from pgbench's
    progress lines otherwise (column `source` says which)."""
    from_log, progress = results.all_seconds(), results.all_samples()
    rows = []
    for tid, key in keys.items():
        for s in from_log.get(tid, []):
            rows.append(key | {"source": "log"} | asdict(s))
        if tid in from_log:
            continue
        for p in progress.get(tid, []):
            row: dict[str, Any] = dict.fromkeys(_SECOND_FIELDS)
            row |= {"second": int(p.at_s) - 1, "tps": p.tps, "failed": p.failed}
            row |= {"skipped": p.skipped, "latency_mean_ms": p.latency_ms}
            row["lag_mean_ms"] = p.lag_ms
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
