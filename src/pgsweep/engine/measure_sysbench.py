"""The measured window of a sysbench trial (workload.tool = "sysbench"): a warm-up run (not
counted), then the measured run with one report a second and its latency histogram,
framed by the same counter snapshots and watchers as pgbench's window (measure.py), and
reduced to the same names where they mean the same: TPS, transactions, latency
percentiles, per-second TPS and p99; sysbench's QPS, errors and reconnects beside them."""

from __future__ import annotations

import json
from pathlib import Path

from ..collect import environment, metrics
from ..host import bounded
from ..layers.context import TrialContext, TrialFailure
from ..layers.workload_tools import program
from ..postgres import sysbench
from ..store import TrialRecord
from . import measure as common
from . import sides


def measure(trial: TrialContext, trial_dir: Path, record: TrialRecord,
            record_settings: bool) -> None:  # fmt: skip
    with sides.opened(trial, trial_dir) as where:  # beside the server, or on the client's host
        _measure(trial, where, record, record_settings)


def _measure(trial: TrialContext, where: sides.Side, record: TrialRecord,
             record_settings: bool) -> None:  # fmt: skip
    server, cluster, w = trial.server, trial.cluster, trial.demand.tool_workload
    assert isinstance(w, sysbench.Workload), "the workload layer prepares every sysbench trial"
    settings = trial.settings["workload"]
    found = program()
    if found is None:
        raise TrialFailure(f"sysbench is not installed (apt-get install {sysbench.PACKAGE})")
    conn, folder = sysbench.conn_args(where.conn), where.folder
    budget = bounded.Budget(common.OUTPUT_BUDGET, "a trial's sysbench output")
    if settings.warmup_s > 0:
        argv = w.argv(str(found), conn, seconds=settings.warmup_s)
        res = where.run(trial, argv, folder / "warmup", settings.warmup_s)
        common._outputs(res, "warmup", budget, record, where)
        if not res.ok:
            raise TrialFailure(f"the sysbench warm-up run failed: {res.describe_failure()}",
                               cluster.log_tail())  # fmt: skip
    argv = w.argv(str(found), conn, seconds=w.seconds)
    record.pgbench_argv = json.dumps(argv)  # the workload tool's command line, whichever
    record.warmup_s, record.duration_s = settings.warmup_s, w.seconds
    common.ready_server(trial, record)
    if settings.writes:
        server.dirty = True  # from here on, even if the trial fails
    before = common.snapshot(trial)
    res = common._watched(argv, folder / "sysbench", trial, record, w.seconds, where)
    common.close_window(trial, before, record)
    mem = metrics.host_memory(trial.run.host)
    if trial.demand.cgroup is not None:
        mem.update(metrics.cgroup_memory(trial.run.host, trial.demand.cgroup))
    mem.update(sides.client_figures(trial, where))
    out, _ = common._outputs(res, "sysbench", budget, record, where)
    if not res.ok:
        raise TrialFailure(f"sysbench failed: {res.describe_failure()}", cluster.log_tail())
    if record_settings:
        with cluster.connect() as db:
            record.environment[record.config_id] = environment.settings(
                db, trial.settings["server"])
    try:
        run = sysbench.parse(out)
    except sysbench.SysbenchParseError as exc:
        raise TrialFailure(f"sysbench's output was not understood: {exc}") from None
    trial.effective["workload.tool"] = "sysbench"
    trial.effective["workload.tool_version"] = run.version
    _derive(record, trial, run)
    record.metrics.update(mem)


# sysbench's figures of a second kept beside the TPS and p99 (store: tool_second)
TOOL_SECOND = (("qps", "qps"), ("reads_s", "reads"), ("writes_s", "writes"),
               ("other_s", "other"), ("errors_s", "errors"), ("reconnects_s", "reconnects"))


def within_window(reports: list[sysbench.Second], seconds: int | None) -> list[sysbench.Second]:
    """The per-second reports of a `seconds`-long window (all of them when it is unknown)."""
    return [r for r in reports if not seconds or r.t <= seconds]


def _derive(record: TrialRecord, trial: TrialContext, run: sysbench.SysbenchRun) -> None:
    """The summary, its histogram and the per-second lines into the record."""
    record.tps, record.transactions, record.failed_transactions = run.tps, run.transactions, 0
    record.latency_avg_ms = run.latency.get("avg")
    # one report a second: `[ Ns ]` closes second N-1 of the window; its latency is the p99.
    # A report past the window (threads ending late on a loaded machine print `[ 3s ]` for
    # a 2 s run, with what trickled in after it) is not a second of the window.
    within = within_window(run.per_second, record.duration_s)
    record.samples = [(float(s.t), s.tps, None, None, None, None, None) for s in within]
    record.seconds = [{"second": s.t - 1, "tps": s.tps, "failed": 0, "skipped": 0,
                       "latency_p99": s.latency_pct_ms} for s in within]  # fmt: skip
    record.tool_seconds = [(s.t - 1, name, float(getattr(s, attr))) for s in within
                           for name, attr in TOOL_SECOND]  # fmt: skip
    bins = sorted(run.histogram)
    record.latency_bins = [(v, bins[i + 1][0] if i + 1 < len(bins) else v, n)
                           for i, (v, n) in enumerate(bins)]  # fmt: skip
    m = record.metrics
    m.update(run.metrics())
    m.update(metrics.stability([s.tps for s in within], record.counters))
    m.update(metrics.io(record.counters, trial.server.primary_devices, m["tx.ok"]))
    m.update(metrics.host_shares(record.counters))
    server = trial.server
    if server.load:
        record.load, server.load = {server.cluster.root.name: server.load}, {}
