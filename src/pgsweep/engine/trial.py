"""One trial: the engine acquires its resources (building what is missing, stopping every
other server), each layer prepares it in order (each seeing what earlier layers demand),
each layer verifies what is in force, the window is measured, and everything goes into a
TrialRecord. A trial that cannot be measured (a resource that would not build, a server
that would not start or crashed, a kernel that refused a value, pgbench failing) is
stored as failed with its reason; the run goes on."""

from __future__ import annotations

import contextlib
import traceback
from pathlib import Path
from typing import Any

import psycopg

from ..errors import PgsweepError
from ..host.api import HostLost
from ..layers.base import Layer
from ..layers.context import Demand, RunContext, Server, TrialContext, TrialFailure
from ..plan import Configuration, Trial
from ..postgres import pgbench, sysbench
from ..postgres.access import ServerError
from ..store import TrialRecord
from . import measure, measure_pgreplay, measure_sysbench
from .folder import now
from .resources import Resources

# What a trial's failure usually looks like; anything else is stored with its traceback.
TRIAL_ERRORS = (ServerError, pgbench.ParseError, OSError, psycopg.Error, PgsweepError, HostLost)


def run_trial(
    layers: list[Layer],
    resources: Resources,
    run: RunContext,
    trial: Trial,
    config: Configuration,
    settings: dict[str, Any],
    first_of_config: bool,
) -> TrialRecord:
    started = now()
    calls = getattr(run.host, "calls", None)  # a server on another host: its agent's messages
    run.host.private_dir_once(run.workdir / "trials", 0o711)
    trial_dir = run.host.private_dir(run.workdir / "trials" / trial.id, 0o711)
    record = TrialRecord(trial.id, trial.order, trial.round, config.id, "ok", started, started)
    events: list[str] = []
    ctx: TrialContext | None = None
    log_offset = 0
    try:
        got = resources.acquire(settings, events)
        server = next(r for r in reversed(got.values()) if isinstance(r, Server))
        ctx = TrialContext(trial.id, settings, got, run, server, events=events)
        log_offset = server.cluster.log_size()
        prepare_layers(layers, settings, ctx)
        for layer in layers:
            layer.attach(settings[layer.name], ctx)
        for layer in layers:
            layer.verify(settings[layer.name], ctx)
        tool = ctx.demand.tool_workload  # sysbench or pgreplay instead of pgbench (issue 27)
        window = (measure_sysbench if isinstance(tool, sysbench.Workload) else
                  measure_pgreplay if tool is not None else measure)  # fmt: skip
        window.measure(ctx, trial_dir, record, first_of_config)
    except TrialFailure as exc:
        record.status, record.reason, record.log_tail = "failed", exc.reason, exc.log_tail
    except Exception as exc:
        reason = exc.render() if isinstance(exc, PgsweepError) else str(exc)
        record.status, record.reason = "failed", f"{type(exc).__name__}: {reason}".strip()
        record.log_tail = ctx.cluster.log_tail() if ctx else ""
        if not isinstance(exc, TRIAL_ERRORS):  # unexpected: keep where it came from
            record.log_tail = traceback.format_exc()[-4000:] + "\n" + (record.log_tail or "")
        if ctx is not None:
            ctx.server.settings = None  # whatever runs now is unknown: start it afresh
    _finish(record, ctx, events, log_offset, trial_dir)
    with contextlib.suppress(HostLost):  # its agent removes its work area as it ends; the
        run.host.remove_tree(trial_dir)  # engine stops the run before the next trial
    if calls is not None:  # the agent's cost of a whole trial (bench/remote_client.py)
        record.metrics["server.agent_calls"] = float(getattr(run.host, "calls", 0) - calls)
    return record


def prepare_layers(layers: list[Layer], settings: dict[str, Any], ctx: TrialContext) -> None:
    """Every layer in order; each sees what the earlier ones demanded."""
    demand = Demand()
    for layer in layers:
        ctx.demand = demand
        demand = demand.merged(layer.prepare(settings[layer.name], ctx))
    ctx.demand = demand


def _finish(record: TrialRecord, ctx: TrialContext | None, events: list[str],
            log_offset: int, trial_dir: Path) -> None:  # fmt: skip
    record.events = list(events)
    if ctx is not None:
        record.effective = dict(ctx.effective)
        started = ctx.server.started_at
        record.server_started_at = started.isoformat() if started else None
        record.artifacts["server.log"] = ctx.cluster.log_since(log_offset)
        if ctx.server.load and not record.load:  # a new cluster's load phase, saved once
            record.load, ctx.server.load = {ctx.cluster.root.name: ctx.server.load}, {}
    record.finished_at = now()
