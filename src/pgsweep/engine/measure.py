"""The measured window of one trial: a warm-up run (not counted), then the measured pgbench
run with its per-transaction log, framed by counter snapshots; everything reduced to the
figures a TrialRecord keeps."""

from __future__ import annotations

import contextlib
import json
import os
import re
from pathlib import Path
from typing import Any

from ..collect import counters, devices, environment, metrics, statements, txlog
from ..host import bounded, proc, safefs
from ..layers.context import Server, TrialContext, TrialFailure, Watcher
from ..postgres import pgbench
from ..store import TrialRecord
from . import profile, sides
from .explain import ExplainWatcher

# Above this many transactions per second the log is sampled down to it: logging every
# transaction costs pgbench client CPU (bench/fidelity measures how much).
AUTO_LOGGED_PER_S = 2_000
_PGBENCH_LOG = re.compile(r"tx\.\d+(\.\d+)?")  # the names pgbench gives its per-thread logs
OUTPUT_BUDGET = 4 * bounded.OUTPUT_LIMIT  # a trial's pgbench stdout and stderr, warm-up too
LOG_LINE_BYTES = 128  # a transaction-log line is about 31 bytes, at most about 90
MAX_LOG = txlog.MAX_LOG_BYTES  # however many transactions pgbench counts


def measure(trial: TrialContext, trial_dir: Path, record: TrialRecord,
            record_settings: bool) -> None:  # fmt: skip
    """The measured window of `trial`, into `record`; with `record_settings`, also every
    setting of the server that is not at its default (once per configuration)."""
    with sides.opened(trial, trial_dir) as where:  # beside the server, or on the client's host
        _measure(trial, where, record, record_settings)


def _measure(trial: TrialContext, where: sides.Side, record: TrialRecord,
             record_settings: bool) -> None:  # fmt: skip
    server, cluster, w = trial.server, trial.cluster, trial.demand.workload
    assert w is not None, "the workload layer prepares every trial"
    w = where.workload(w)  # its custom script where pgbench runs
    settings = trial.settings["workload"]
    pgb, conn, folder = trial.client.path("pgbench"), where.conn, where.folder
    warmup_tps = None
    budget = bounded.Budget(OUTPUT_BUDGET, "a trial's pgbench output")
    if settings.warmup_s > 0:
        argv = w.argv(pgb, conn, seconds=settings.warmup_s, vacuum=True)
        res = where.run(trial, argv, folder / "warmup", settings.warmup_s)
        out, _ = _outputs(res, "warmup", budget, record, where)
        if not res.ok:
            raise TrialFailure(
                f"the warm-up run failed: {res.describe_failure()}", cluster.log_tail()
            )
        warmup_tps = pgbench.parse_summary(out).tps
    rate = sampling_rate(settings.latency_log, w.rate, warmup_tps)
    log_dir = folder / "txlog"
    if rate is not None:
        where.host.leaf_dir(log_dir, trial.run.user)  # pgbench (the server user) writes it
    argv = w.argv(
        pgb,
        conn,
        seconds=w.seconds,
        vacuum=settings.warmup_s == 0,
        log_prefix=str(log_dir / "tx") if rate is not None else None,
        sampling_rate=rate or 1.0,
    )
    record.pgbench_argv = json.dumps(argv)
    record.warmup_s, record.duration_s = settings.warmup_s, w.seconds
    ready_server(trial, record)
    cgroup = trial.demand.cgroup
    if settings.writes:
        server.dirty = True  # from here on, even if the trial fails
    before = snapshot(trial)
    res = _watched(argv, folder / "pgbench", trial, record, w.seconds, where)
    close_window(trial, before, record)
    mem = metrics.host_memory(trial.run.host)
    mem.update(sides.client_figures(trial, where))
    if cgroup is not None:
        mem.update(metrics.cgroup_memory(trial.run.host, cgroup))
    out, err = _outputs(res, "pgbench", budget, record, where)
    if not res.ok:
        raise TrialFailure(f"pgbench failed: {res.describe_failure()}", cluster.log_tail())
    opted_in = trial.run.cpu_profile_s or trial.run.io_latency_s
    if opted_in and record.round == 1:  # after the window: nothing it measures
        profile.window(trial, where, w, pgb, record)
    if record_settings:
        with cluster.connect() as db:
            written = trial.settings["server"]  # the configuration's own settings
            record.environment[record.config_id] = environment.settings(db, written)
    summary = pgbench.parse_summary(out)
    trial.effective["workload.tool"] = "pgbench"  # with its version, per trial (issue 27)
    trial.effective["workload.tool_version"] = summary.version or "?"
    record.tps, record.transactions = summary.tps, summary.transactions
    record.failed_transactions = summary.failed
    record.latency_avg_ms, record.latency_stddev_ms = (
        summary.latency_avg_ms,
        summary.latency_stddev_ms,
    )
    progress = pgbench.parse_progress(err)
    record.samples = [
        (p.at, p.tps, p.latency_ms, p.stddev_ms, p.failed, p.lag_ms, p.skipped) for p in progress
    ]
    log = None
    if rate is not None:
        lines = (summary.transactions + summary.failed + summary.skipped) * rate * 2 + 10_000
        most = min(int(lines) * LOG_LINE_BYTES, MAX_LOG)
        if where.remote:
            log = _reduce(sides.remote_logs(where, log_dir, w.jobs, most), w.seconds)
        else:
            log = _reduce_log(log_dir, w.seconds, where.uid, w.jobs, most)
    _derive(record, server, summary, log, rate or 1.0, [p.tps for p in progress])
    record.metrics.update(mem)


def _watched(argv: list[str], stem: Path, trial: TrialContext, record: TrialRecord,
             seconds: int, where: sides.Side) -> proc.Result:  # fmt: skip
    """The measured pgbench with the trial's watchers beside it. Every watcher that began is
    ended, each even when another fails; while an exception (Ctrl-C included) is on its way
    they are only stopped, and nothing they raise replaces it."""
    started: list[Watcher] = []
    try:
        explain = [ExplainWatcher()] if trial.settings["workload"].explain else []  # issue 26
        for watcher in [*trial.demand.watchers, *explain]:
            watcher.begin(trial)
            started.append(watcher)
        res = where.run(trial, argv, stem, seconds)
    except BaseException:
        for watcher in started:
            with contextlib.suppress(Exception):
                watcher.end(trial, record, abort=True)
        raise
    first: Exception | None = None
    for i, watcher in enumerate(started):
        try:
            watcher.end(trial, record)
        except Exception as exc:  # the others still stop; the first refusal is the reason
            first = first or exc
        except BaseException:  # Ctrl-C while waiting: stop the rest at once, then go
            for rest in started[i + 1 :]:
                with contextlib.suppress(Exception):
                    rest.end(trial, record, abort=True)
            raise
    if first is not None:
        raise first
    return res


def ready_server(trial: TrialContext, record: TrialRecord) -> None:
    """Before any tool's window: the server's devices (once), its storage facts in the
    record (once), and the server inside the trial's memory cgroup when it has one."""
    server, cluster = trial.server, trial.cluster
    pool = trial.resources["storage"].pool_devices if "storage" in trial.resources else []
    if not server.devices:
        server.devices, server.primary_devices = devices.for_cluster(cluster, pool)
    if not server.recorded:
        record.environment[cluster.root.name] = environment.storage(cluster, server.devices)
        server.recorded = True
    if trial.demand.cgroup is not None:
        _check_in_cgroup(trial, trial.demand.cgroup)


def _check_in_cgroup(trial: TrialContext, cgroup: Path) -> None:
    pid = trial.cluster.postmaster_pid()
    text = trial.run.host.read_text(Path(f"/proc/{pid}/cgroup")) if pid else ""
    lines = text.splitlines()
    if not any(line.split(":")[1:] == ["memory", f"/{cgroup.name}"] for line in lines):
        raise TrialFailure(
            f"os.memory_limit: the postmaster ({pid}) is not in {cgroup}: "
            + "; ".join(line for line in lines if ":memory:" in line)
        )


def sampling_rate(
    setting: str | float, rate: float | None, warmup_tps: float | None
) -> float | None:
    """None: no log. Otherwise the --sampling-rate: the setting when it is a number; for
    "auto", 1 unless the expected rate (-R, else the warm-up's TPS) exceeds
    AUTO_LOGGED_PER_S, then the share that logs about that many lines a second."""
    if setting == "off":
        return None
    if not isinstance(setting, str):
        return float(setting)
    expected = rate if rate is not None else warmup_tps
    if expected is None or expected <= AUTO_LOGGED_PER_S:
        return 1.0
    return round(AUTO_LOGGED_PER_S / expected, 4)


def _outputs(res: proc.Result, name: str, budget: bounded.Budget, record: TrialRecord,
             where: sides.Side) -> tuple[str, str]:  # fmt: skip
    """pgbench's stdout and stderr (root's files, which pgbench and what a custom script
    runs through it write), kept as artifacts: bounded, together with the trial's other
    outputs; more fails the trial with the reason."""
    try:
        out, err = where.read(res.stdout_path, budget), where.read(res.stderr_path, budget)
    except bounded.TooLarge as exc:
        raise TrialFailure(f"pgbench's output was not read: {exc}") from None
    record.artifacts[f"{name}.out"], record.artifacts[f"{name}.err"] = out, err
    return out.decode(errors="replace"), err.decode(errors="replace")


def _reduce_log(log_dir: Path, seconds: int, uid: int, jobs: int,
                most: int) -> txlog.Reduction:  # fmt: skip
    """Read pgbench's log files from a directory the server user owns: listed and opened
    without following links, each a regular file owned by that user; no more files than
    pgbench has threads (`jobs`: one log each) and at most `most` bytes in all (what the
    transactions pgbench counted can fill, with room to spare), checked on the opened
    files before a byte is read."""
    try:
        names = [n for n in bounded.list_names(log_dir, jobs + 64) if _PGBENCH_LOG.fullmatch(n)]
    except bounded.TooLarge as exc:
        raise TrialFailure(f"the transaction log was not read: {exc}") from None
    if not names:
        raise TrialFailure(f"pgbench wrote no transaction log in {log_dir}")
    if len(names) > jobs:
        raise TrialFailure(f"the transaction log was not read: {log_dir} holds {len(names)} "
                           f"log files, and pgbench's {jobs} thread(s) write one each")  # fmt: skip
    files = []
    try:
        for name in names:
            files.append(os.fdopen(safefs.open_owned_in(log_dir, name, uid), "rb"))
        size, most = sum(os.fstat(f.fileno()).st_size for f in files), min(most, MAX_LOG)
        if size > most:
            raise TrialFailure(f"the transaction log was not read: its {len(files)} file(s) "
                               f"hold {size:,} bytes, more than the transactions pgbench "
                               f"counted can fill ({most:,})")  # fmt: skip
        return txlog.reduce(txlog.parse(files), seconds)
    except safefs.UnsafePath as exc:
        raise TrialFailure(f"the transaction log was not read: {exc}") from exc
    except txlog.LogError as exc:
        raise TrialFailure(str(exc)) from exc
    finally:
        for f in files:
            f.close()


def _reduce(files: list[Any], seconds: int) -> txlog.Reduction:
    try:
        return txlog.reduce(txlog.parse(files), seconds)
    except txlog.LogError as exc:
        raise TrialFailure(str(exc)) from exc


def _derive(
    record: TrialRecord,
    server: Server,
    summary: pgbench.Summary,
    log: txlog.Reduction | None,
    rate: float,
    progress_tps: list[float],
) -> None:
    m = record.metrics
    m.update(metrics.transactions(summary, log, rate))
    if log is not None:
        # a sampled log holds `rate` of the transactions: counts scale back up, latencies
        # (means and percentiles of the sample) stay as they are
        record.seconds = [_unsampled(s, rate) for s in log.seconds]
        record.latency_bins = log.histogram
        per_second = [s["tps"] for s in record.seconds]
    else:
        per_second = progress_tps
    m.update(metrics.stability(per_second, record.counters))
    m.update(metrics.io(record.counters, server.primary_devices, m["tx.ok"]))
    m.update(metrics.host_shares(record.counters))
    if server.load:
        record.load, server.load = {server.cluster.root.name: server.load}, {}


COUNTED_PER_SECOND = ("tps", "failed", "skipped")


def _unsampled(second: dict[str, float], rate: float) -> dict[str, float]:
    return {k: v / rate if k in COUNTED_PER_SECOND else v for k, v in second.items()}


def close_window(trial: TrialContext, before: dict[str, float], record: TrialRecord) -> None:
    """The window's counter deltas, its top statements' with their text, and every
    statement's server-side count and mean time (collect.statements)."""
    deltas = counters.delta(before, snapshot(trial))
    record.metrics.update(statements.server_side(deltas))
    record.counters = statements.top(deltas)
    wanted = statements.hashes(record.counters)
    if wanted:
        with trial.cluster.connect() as conn:
            record.artifacts[statements.ARTIFACT] = statements.texts(
                conn, trial.server.binaries.major, wanted)


def snapshot(trial: TrialContext) -> dict[str, float]:
    """Disk, host, ZFS ARC and PostgreSQL counters, prefixed by their source."""
    host = trial.run.host
    snap = {f"disk.{k}": v for k, v in counters.diskstats(host, trial.server.devices).items()}
    snap.update({f"host.{k}": v for k, v in counters.system(host).items()})
    snap.update({f"zfs.{k}": v for k, v in counters.zfs_arc(host).items()})
    with trial.cluster.connect() as conn:
        major = trial.server.binaries.major
        snap.update({f"pg.{k}": v for k, v in counters.postgres(conn, major).items()})
    snap.update(sides.client_counters(trial))
    return snap
