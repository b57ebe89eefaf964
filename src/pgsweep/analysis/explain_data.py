"""The explain metrics of each trial (issue 26), from what the store keeps of its window:
where each process type's sessions were (shares of its sampled time, from the `wait`
table; an auxiliary process idle in its main loop, class Activity, is no state of its
own), and per transaction: WAL records, full-page images and bytes, WAL writes and syncs,
checkpoints, buffers written by whom, blocks read, pg_stat_io's operations by process
type (PostgreSQL 16+), and CPU time, context switches and page faults by process type
(the `process_cpu` table); and levels over the window: the data device's mean await,
queue depth and utilisation, and the most dirty and writeback memory. A folder from
before explain collection yields only the counter-based metrics."""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace

from ..collect import blockio
from ..collect import statements as stmts
from ..collect.processes import TICKS_PER_S
from ..store import Results

MIN_SHARE = 0.01  # a wait state below 1% of a process type's time in both sides is left out
# a share of session time; an amount per transaction; a level over the window (an amount)
SHARE, PER_TX, LEVEL = "share", "per_tx", "level"


@dataclass(frozen=True)
class Metric:
    key: str
    label: str  # in words: "waits on IO:WALSync", "WAL bytes / tx"
    unit: str
    kind: str  # SHARE | PER_TX
    step: float = 0.0  # what one trial can resolve, in its unit (median over the trials)


# counter (a delta over the window) -> words, unit; each divided by the transactions
COUNTERS: dict[str, tuple[str, str]] = {
    "pg.wal_records": ("WAL records / tx", "records"),
    "pg.wal_fpi": ("WAL full-page images / tx", "images"),
    "pg.wal_bytes": ("WAL bytes / tx", "B"),
    "pg.wal_write": ("WAL writes / tx", "writes"),
    "pg.wal_sync": ("WAL syncs / tx", "syncs"),
    "pg.checkpoints_timed": ("timed checkpoints / tx", "checkpoints"),
    "pg.checkpoints_req": ("requested checkpoints / tx", "checkpoints"),
    "pg.buffers_checkpoint": ("buffers written by the checkpointer / tx", "buffers"),
    "pg.buffers_clean": ("buffers written by the background writer / tx", "buffers"),
    "pg.buffers_backend": ("buffers written by backends / tx", "buffers"),
    "pg.blks_read": ("blocks read / tx", "blocks"),
    "pg.blks_hit": ("blocks found in shared buffers / tx", "blocks"),
}
_IO_WORDS = {"reads": "reads", "writes": "writes", "writebacks": "writebacks",
             "extends": "extends", "fsyncs": "fsyncs", "evictions": "evictions"}  # fmt: skip
# figures of the window's devices per second (collect.device_series) -> words, unit, step
LEVELS: dict[str, tuple[str, str, float]] = {
    "device.await_ms_mean": ("data device: mean await", "ms", 0.01),
    "device.queue_depth_mean": ("data device: mean queue depth", "requests", 0.01),
    "device.util_pct_mean": ("data device: utilisation", "%", 0.1),
    "memory.dirty_kb_max": ("dirty memory, at most", "kB", 4.0),
    "memory.writeback_kb_max": ("memory under writeback, at most", "kB", 4.0),
}
# process_cpu figures -> words, unit, scale (per transaction)
CPU = (("cpu_us", "CPU / tx", "µs"), ("voluntary_switches", "voluntary context switches / tx",
       "switches"), ("involuntary_switches", "involuntary context switches / tx", "switches"),
       ("faults", "page faults / tx", "faults"))  # fmt: skip


def wait_label(backend: str, cls: str, event: str) -> str:
    if cls == "CPU":
        where = "on CPU"
    elif cls == "Idle" or (cls, event) == ("Client", "ClientRead"):
        where = f"waiting for the client ({event})"
    else:
        where = f"waits on {cls}:{event}"
    return where if backend == "client backend" else f"{backend}: {where}"


def per_trial(results: Results) -> tuple[dict[str, dict[str, float]], dict[str, Metric]]:
    """Trial id -> explain metric key -> value, for every ok trial; and what each key is."""
    trials = {t.id: t for t in results.trials(ok_only=True)}
    metrics, counters = results.metrics(), results.counters()
    tx = {tid: metrics.get(tid, {}).get("tx.ok") or float(t.transactions or 0)
          for tid, t in trials.items()}  # fmt: skip
    values: dict[str, dict[str, float]] = {tid: {} for tid in trials}
    known: dict[str, Metric] = {}
    steps: dict[str, list[float]] = {}
    samples = {tid: m.get("explain.wait_samples", 0.0) for tid, m in metrics.items()}
    _waits(results, values, known, samples, steps)
    for tid, per in counters.items():
        if tid in trials and tx[tid] > 0:
            _counters(per, tx[tid], values[tid], known)
            for key in values[tid]:
                if not key.startswith("wait."):
                    steps.setdefault(key, []).append(1 / tx[tid])  # one count
    _statements(results, counters, trials, values, known, steps)
    for tid, per in metrics.items():
        for key, (label, unit, step) in LEVELS.items():
            if tid in trials and key in per:
                known[key] = Metric(key, label, unit, LEVEL)
                values[tid][key] = per[key]
                steps.setdefault(key, []).append(step)
    for tid, per in counters.items():  # pg_stat_io keeps only non-zero cells: 0 where unseen
        if tid in trials and any(k.startswith("pg.io.") for k in per):
            for key in (k for k in known if k.startswith("pg.io.")):
                values[tid].setdefault(key, 0.0)
    for tid, rows in results.process_cpu().items():
        if tid not in trials or tx[tid] <= 0:
            continue
        for r in rows:
            figures = {"cpu_us": _sum(r.user_s, r.system_s) * 1e6,
                       "voluntary_switches": r.voluntary_switches,
                       "involuntary_switches": r.involuntary_switches,
                       "faults": _sum(r.minor_faults, r.major_faults)}  # fmt: skip
            for name, label, unit in CPU:
                v = figures[name]
                if v is None:
                    continue
                key = f"cpu.{r.process_type}.{name}"
                known[key] = Metric(key, f"{r.process_type}: {label}", unit, PER_TX)
                values[tid][key] = float(v) / tx[tid]
                tick = 1e6 / TICKS_PER_S if name == "cpu_us" else 1.0  # a clock tick, or 1
                steps.setdefault(key, []).append(tick / tx[tid])
    for key, got in steps.items():
        if key in known:
            known[key] = replace(known[key], step=statistics.median(got))
    return values, known


def _sum(a: float | None, b: float | None) -> float:
    return (a or 0.0) + (b or 0.0)


def _waits(results: Results, values: dict[str, dict[str, float]], known: dict[str, Metric],
           samples: dict[str, float], steps: dict[str, list[float]]) -> None:  # fmt: skip
    """Each wait state as a share of its process type's sampled time; a trial with a wait
    profile that never saw a state has 0 of it (a process type it never saw: nothing).
    One sample of one session is what a trial resolves."""
    profiled: dict[str, set[str]] = {}
    for tid, rows in results.waits().items():
        if tid not in values:
            continue
        totals: dict[str, float] = {}
        for w in rows:
            totals[w.backend_type] = totals.get(w.backend_type, 0.0) + w.sessions
        profiled[tid] = set(totals)
        for w in rows:
            if w.wait_class == "Activity" and w.backend_type != "client backend":
                continue  # an auxiliary process idle in its main loop: the rest is its work
            key = f"wait.{w.backend_type}.{w.wait_class}:{w.wait_event}"
            known[key] = Metric(key, wait_label(w.backend_type, w.wait_class, w.wait_event),
                                "% of session time", SHARE)  # fmt: skip
            values[tid][key] = w.sessions / totals[w.backend_type]
            n = samples.get(tid, 0.0) * totals[w.backend_type]
            steps.setdefault(key, []).append(1 / n if n > 0 else 0.0)
    for tid, types in profiled.items():  # zeros where a state was not seen
        for key in known:
            backend = key.split(".", 2)[1]
            if key.startswith("wait.") and backend in types:
                values[tid].setdefault(key, 0.0)


# a statement's figures per call -> words, unit (collect.statements); rows and blocks hit
# are left to the export: each of these is one more member of the panel's family
STATEMENT = (("exec_ms", "ms / call", "ms"), ("blks_read", "blocks read / call", "blocks"),
             ("blks_dirtied", "blocks dirtied / call", "blocks"))  # fmt: skip
STATEMENT_SHARE = 0.05  # a statement under 5% of the statements' time in every trial: left out


def _statements(results: Results, counters: Mapping[str, Mapping[str, float]],
                trials: Mapping[str, object], values: dict[str, dict[str, float]],
                known: dict[str, Metric], steps: dict[str, list[float]]) -> None:  # fmt: skip
    """Each top statement's figures per call (pg_stat_statements, where the server
    preloads it), labelled by its text as the trial's artifact holds it."""
    start = "pg." + stmts.PREFIX
    chosen: set[str] = set()
    for tid, per in counters.items():
        spent = stmts.times(dict(per))
        total = sum(spent.values())
        if tid in trials and total > 0:
            chosen |= {h for h, v in spent.items() if v >= STATEMENT_SHARE * total}
    if not chosen:
        return
    text: dict[str, str] = {}
    for tid, per in counters.items():
        if tid in trials and {h for h in chosen if f"{start}{h}.calls" in per} - set(text):
            text |= stmts.parse(results.artifact(tid, stmts.ARTIFACT) or b"")
    for tid, per in counters.items():
        for h in chosen:
            calls = per.get(f"{start}{h}.calls", 0.0)
            if tid not in trials or calls <= 0:
                continue
            for name, words, unit in STATEMENT:
                key = f"stmt.{h}.{name}"
                known[key] = Metric(key, f"`{_short(text.get(h, h))}`: {words}", unit, PER_TX)
                values[tid][key] = per.get(f"{start}{h}.{name}", 0.0) / calls
                steps.setdefault(key, []).append((0.001 if name == "exec_ms" else 1) / calls)


def _short(query: str, width: int = 48) -> str:
    return query if len(query) <= width else query[: width - 1] + "…"


def _counters(per: Mapping[str, float], tx: float, out: dict[str, float],
              known: dict[str, Metric]) -> None:  # fmt: skip
    for name, (label, unit) in COUNTERS.items():
        if name in per:
            known[name] = Metric(name, label, unit, PER_TX)
            out[name] = per[name] / tx
    for name, value in per.items():  # pg.io.TYPE.OBJECT.CONTEXT.OP (PostgreSQL 16+)
        parts = name.split(".")
        if len(parts) == 6 and parts[:2] == ["pg", "io"] and parts[5] in _IO_WORDS:
            backend, obj, context, op = parts[2:]
            where = f"{obj}, {context}" if context != "normal" else obj
            known[name] = Metric(name, f"{backend}: {op} ({where}) / tx", op, PER_TX)
            out[name] = value / tx


# Settings pgsweep itself sets per cluster or socket (paths, ports): they differ between any
# two clusters and say nothing about the change.
PER_CLUSTER = frozenset({"data_directory", "config_file", "hba_file", "ident_file",
                         "external_pid_file", "unix_socket_directories", "port",
                         "cluster_name"})  # fmt: skip


def settings_differ(results: Results, config: str, against: str) -> list[dict[str, str]]:
    """The server settings in force that differ between two configurations, as each
    configuration's server reported them (environment: every setting whose source is not
    the default), by name: {"name", "before", "after"}; "default" where one side left the
    setting at its default. Standbys' settings (scope `c01.s1`) are not compared."""
    mine: dict[str, dict[str, str]] = {config: {}, against: {}}
    for fact in results.environment():
        if fact.scope in mine and fact.name not in PER_CLUSTER:
            mine[fact.scope][fact.name] = fact.value
    a, b = mine[against], mine[config]
    return [{"name": n, "before": a.get(n, "default"), "after": b.get(n, "default")}
            for n in sorted(a.keys() | b.keys()) if a.get(n) != b.get(n)]  # fmt: skip


def io_latency(results: Results, config: str, against: str) -> list[dict[str, object]]:
    """Each device's and kind's block-request latency in both configurations' profile
    windows ([experiment] io_latency; the first trial of each that has one): requests and
    quantiles (collect.blockio), "before" the configuration it is explained against. One
    window each: no interval, so none of it is judged."""
    hist: dict[str, dict[tuple[str, str], blockio.Latency]] = {}
    for t in results.trials(ok_only=True):
        if t.config_id in (config, against) and t.config_id not in hist:
            raw = results.artifact(t.id, blockio.ARTIFACT)
            if raw:
                lat = blockio.summaries(blockio.parse(raw.decode(errors="replace")))
                hist[t.config_id] = {(x.device, x.kind): x for x in lat}
    if config not in hist or against not in hist:
        return []
    out: list[dict[str, object]] = []
    for key in sorted(hist[config].keys() | hist[against].keys()):
        before, after = hist[against].get(key), hist[config].get(key)
        out.append({"device": key[0], "kind": key[1],
                    "before": None if before is None else asdict(before),
                    "after": None if after is None else asdict(after)})  # fmt: skip
    return out
