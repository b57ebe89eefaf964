"""The measured window of a replay (workload.tool = "pgreplay"): the frozen csvlog replayed
by pgreplay at the configuration's speed, as the server user on the private socket, framed
by the same counter snapshots and watchers as pgbench's window (measure.py). No warm-up: a
replay changes the data, and each one starts from the loaded snapshot. The rate judged is
replayed statements per second (stored as the trial's TPS, the column every report reads);
pgreplay's own figures (lag behind the captured schedule, errors, its slowest statement)
and the server's commits beside it."""

from __future__ import annotations

import json
from pathlib import Path

from ..collect import environment, metrics
from ..host import bounded
from ..layers.context import TrialContext, TrialFailure
from ..layers.workload_tools import program
from ..postgres import pgreplay
from ..store import TrialRecord
from . import measure as common
from . import sides


def measure(trial: TrialContext, trial_dir: Path, record: TrialRecord,
            record_settings: bool) -> None:  # fmt: skip
    with sides.opened(trial, trial_dir) as where:  # beside the server, or on the client's host
        _measure(trial, where, record, record_settings)


def _measure(trial: TrialContext, where: sides.Side, record: TrialRecord,
             record_settings: bool) -> None:  # fmt: skip
    server, cluster, replay = trial.server, trial.cluster, trial.demand.tool_workload
    assert isinstance(replay, pgreplay.Replay), "the workload layer prepares every replay"
    found = program("pgreplay")
    if found is None:
        raise TrialFailure(f"pgreplay is not installed (apt-get install {pgreplay.PACKAGE})")
    replay = where.replayed(replay)
    argv = replay.argv(str(found), *where.address(trial))
    record.pgbench_argv = json.dumps(argv)  # the workload tool's command line, whichever
    record.warmup_s, record.duration_s = 0, replay.seconds
    common.ready_server(trial, record)
    server.dirty = True  # from here on, even if the trial fails
    before = common.snapshot(trial)
    # a replay behind its schedule is a finding (lag_max_s), not a hang: room for 3x its
    # span and half a minute more (a 1-2 s capture on a loaded machine once took over 3x)
    res = common._watched(argv, where.folder / "pgreplay", trial, record,
                          replay.seconds * 3 + 30, where)  # fmt: skip
    common.close_window(trial, before, record)
    mem = metrics.host_memory(trial.run.host)
    mem.update(sides.client_figures(trial, where))
    budget = bounded.Budget(common.OUTPUT_BUDGET, "a trial's pgreplay output")
    out, err = common._outputs(res, "pgreplay", budget, record, where)
    if not res.ok:
        raise TrialFailure(f"pgreplay failed: {res.describe_failure()}", cluster.log_tail())
    if record_settings:
        with cluster.connect() as db:
            record.environment[record.config_id] = environment.settings(
                db, trial.settings["server"])
    try:
        stats = pgreplay.parse(out + err)
    except pgreplay.ReplayParseError as exc:
        raise TrialFailure(f"pgreplay's output was not understood: {exc}") from None
    trial.effective["workload.tool"] = "pgreplay"
    trial.effective["workload.tool_version"] = _version(trial, where, found)
    _derive(record, trial, stats)
    record.metrics.update(mem)


def _version(trial: TrialContext, where: sides.Side, found: Path) -> str:
    res = where.host.run([str(found), "-v"], out=where.folder / "pgreplay-version.out",
                         timeout=30, user=trial.run.user)  # fmt: skip
    return pgreplay.version(res.stdout + res.stderr)


def _derive(record: TrialRecord, trial: TrialContext, stats: dict[str, float]) -> None:
    seconds = stats["seconds"] or 1.0
    record.tps = stats["statements"] / seconds  # replayed statements/s
    record.transactions, record.failed_transactions = int(stats["statements"]), 0
    m = record.metrics
    m.update({f"pgreplay.{k}": v for k, v in stats.items()})
    m["pgreplay.statements_per_s"] = record.tps
    m["tx.ok"] = stats["statements"]
    m.update(metrics.stability([], record.counters))
    m.update(metrics.io(record.counters, trial.server.primary_devices, m["tx.ok"]))
    m.update(metrics.host_shares(record.counters))
    server = trial.server
    if server.load:
        record.load, server.load = {server.cluster.root.name: server.load}, {}
