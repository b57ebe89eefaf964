"""Runs a plan: prepares every trial through the layers, measures it with pgbench, saves it
atomically, and always removes what it created, on success, error, SIGINT or SIGTERM."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Protocol

import psycopg

from . import __version__, measure
from .collect import environment
from .core import Cost, Value
from .errors import PgsweepError
from .host import journal, proc, safefs, workarea
from .layers import cluster as cluster_layer
from .plan import Configuration, Plan, PlanFactor, Trial, TrialCost, make_plan
from .postgres import pgbench
from .postgres.cluster import ServerError
from .spec import Experiment
from .store import Store, TrialRecord
from .trialenv import TrialEnv, TrialFailure
from .units import parse_duration


class Reporter(Protocol):
    def started(self, plan: Plan, todo: list[Trial], results: Path, notes: list[str]) -> None: ...
    def trial_started(self, trial: Trial, config: Configuration, done: int) -> None: ...
    def trial_finished(self, trial: Trial, record: TrialRecord, done: int) -> None: ...
    def finished(self) -> None: ...


def plan_for(exp: Experiment) -> Plan:
    factors = [
        PlanFactor(f.name, f.levels, max(exp.layer(f.layer).cost(f.key), Cost.NOTHING))
        for f in exp.factors
    ]
    return make_plan(factors, exp.rounds, exp.seed, exp.rebuild)


def config_values(exp: Experiment, config: Configuration) -> dict[str, dict[str, Value]]:
    values = {layer: dict(base) for layer, base in exp.base.items()}
    for name, level in config.levels.items():
        layer, key = name.split(".", 1)
        values[layer][key] = level
    return values


def trial_costs(exp: Experiment, plan: Plan) -> dict[str, TrialCost]:
    """Seconds per trial and per cluster build, from the workload and the data size."""
    costs = {}
    for c in plan.configurations:
        v = config_values(exp, c)
        w, scale = v["workload"], int(v["cluster"]["scale"])
        target = cluster_layer.target_bytes(v["cluster"], v.get("os", {}))
        if target is not None:  # about 16 MB per scale unit
            scale = max(1, target // (16 * 1024**2))
        restore = 1.0 + 0.03 * scale if pgbench.writes(str(w["script"]), None) else 0.0
        measure = parse_duration(w["warmup"]) + parse_duration(w["duration"]) + 1.5 + restore
        costs[c.id] = TrialCost(measure=measure, build=4.0 + 0.35 * scale)
    return costs


def fingerprint(exp: Experiment) -> str:
    """What must not change between a run and its --resume."""
    return json.dumps(
        {
            "base": exp.base,
            "factors": [[f.name, list(f.levels)] for f in exp.factors],
            "rounds": exp.rounds,
            "seed": exp.seed,
            "rebuild": exp.rebuild,
            "postgres": str(exp.binaries.bindir),
        },
        sort_keys=True,
        default=str,
    )


def open_results(exp: Experiment, results: Path, resume: bool) -> tuple[Plan, Store]:
    db_path = results / "results.db"
    if resume:
        if not db_path.exists():
            raise PgsweepError(
                f"nothing to resume: {db_path} does not exist",
                where=str(results),
                fix="start without --resume, or name the results folder of the run",
            )
        store = Store(db_path)
        stored = store.experiment()
        if stored is None:
            raise PgsweepError(f"{db_path} holds no experiment", fix="start a new run")
        if not exp.seed_given:
            exp.seed = int(stored["seed"])
        if stored["fingerprint"] != fingerprint(exp):
            store.close()
            old, new = json.loads(stored["fingerprint"]), json.loads(fingerprint(exp))
            changed = ", ".join(k for k in new if old.get(k) != new.get(k))
            raise PgsweepError(
                f"the experiment file changed since this run started ({changed} differ)",
                where=str(exp.source.path),
                fix=f"undo the change to resume, or start a new run without --resume "
                f"(the original is frozen in {results / 'experiment.toml'})",
            )
        return plan_for(exp), store
    if db_path.exists():
        raise PgsweepError(
            f"{results} already holds results",
            fix="add --resume to continue that run, or choose another --results folder",
        )
    results.mkdir(parents=True, exist_ok=True)
    plan = plan_for(exp)
    (results / "experiment.toml").write_text(exp.source.text)
    (results / "plan.json").write_text(plan.to_json())
    store = Store(db_path)
    store.write_experiment(
        {
            "name": exp.name,
            "file_text": exp.source.text,
            "fingerprint": fingerprint(exp),
            "seed": exp.seed,
            "plan_json": plan.to_json(),
            "created_at": _now(),
            "pgsweep_version": __version__,
            "postgres_version": exp.binaries.version,
        },
        [(c.id, c.label(), json.dumps(c.levels), c.group) for c in plan.configurations],
    )
    return plan, store


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextmanager
def _stopped_by_signals() -> Iterator[None]:
    """Ctrl-C, SIGTERM and SIGHUP end the run through its cleanup. The first one raises
    KeyboardInterrupt and from then on all three are ignored, so a second signal can cut
    neither the unwinding nor the cleanup short. The handlers come back only after a run
    that was not stopped: a stopped one is on its way out, and a signal arriving after its
    cleanup must not turn exit code 130 into a kill."""
    stopped = []

    def handler(signum: int, frame: FrameType | None) -> None:
        for s in STOP_SIGNALS:
            signal.signal(s, signal.SIG_IGN)
        stopped.append(signum)
        raise KeyboardInterrupt(signal.Signals(signum).name)

    old = {s: signal.signal(s, handler) for s in STOP_SIGNALS}
    try:
        yield
    finally:
        if not stopped:
            for s, h in old.items():
                signal.signal(s, h)


@dataclass
class Outcome:
    results: Path
    total: int
    failed: int
    interrupted: bool = False


def preflight(exp: Experiment, results: Path) -> Path:
    """Every read-only check of the machine before anything is made (`plan` runs it too):
    the results folder is safe for root to write in, real devices are allowed and free,
    schedulers are offered, loop images fit. Returns where the work area will live."""
    safefs.trusted_dir(_existing(results), "the results folder")
    base = workarea.work_base(results, exp.user)
    per_config = [config_values(exp, c) for c in plan_for(exp).configurations]
    exp.layer("storage").authorize(exp.grant)  # type: ignore[attr-defined]
    for layer in exp.layers:
        layer.check_host(_existing(base), [v[layer.name] for v in per_config])
    return base


def _existing(path: Path) -> Path:
    """`path`, or its nearest ancestor that exists."""
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _check_results_folder(results: Path, resume: bool) -> None:
    """Never adopt a folder pgsweep did not write: an existing one must be empty, or hold
    a run's results.db."""
    if results.exists() and not results.is_dir():
        raise PgsweepError(f"{results} exists and is not a folder", where=str(results),
                           fix="choose another --results folder")  # fmt: skip
    if results.is_dir() and not resume and any(results.iterdir()):
        held = "already holds results" if (results / "results.db").exists() else "is not empty"
        raise PgsweepError(
            f"the results folder {results} {held}",
            where=str(results),
            fix="add --resume to continue that run, or choose a new or empty --results folder"
            if held == "already holds results" else "choose a new or empty --results folder",
        )  # fmt: skip


@contextmanager
def _signals_ignored() -> Iterator[None]:
    """Cleanup runs to its end: a further Ctrl-C or SIGTERM is ignored meanwhile."""
    old = {s: signal.signal(s, signal.SIG_IGN) for s in STOP_SIGNALS}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def run(exp: Experiment, results: Path, resume: bool, reporter: Reporter) -> Outcome:
    proc.become_subreaper()  # a killed postmaster must not stay a zombie (see proc)
    stale, unrestored = journal.recover_stale()
    notes = [f"removed leftovers of an earlier run: {d}" for d in stale]
    notes += [f"could not put back what an earlier run left: {d}" for d in unrestored]
    _check_results_folder(results, resume)
    preflight(exp, results)
    fresh = not results.exists()
    plan, store = open_results(exp, results, resume)
    done = store.done_trials()
    todo = [t for t in plan.trials if t.id not in done]
    try:
        area = workarea.WorkArea.create(results, exp.user)
    except BaseException:
        store.close()
        if fresh:
            safefs.remove_tree(results)
        raise
    if not store.has_environment("host"):
        store.save_environment("host", environment.host(exp.binaries, area.private))
    if area.note:
        notes.append(area.note)
    exp.layer("workload").freeze_scripts(results / "scripts")  # type: ignore[attr-defined]
    env = TrialEnv(exp.binaries, exp.user, area.workdir, area.socket_root, exp.canonical)
    env.private = area.private
    reporter.started(plan, todo, results, notes)
    outcome = Outcome(results, len(plan.trials), 0)
    with _stopped_by_signals():
        try:
            for n, trial in enumerate(todo):
                config = plan.config(trial.config)
                reporter.trial_started(trial, config, n)
                record = run_trial(exp, env, trial, config)
                store.save_trial(record)
                reporter.trial_finished(trial, record, n + 1)
        except KeyboardInterrupt:
            outcome.interrupted = True
        finally:
            with _signals_ignored():
                try:
                    for layer in reversed(exp.layers):
                        layer.undo(env)
                finally:
                    area.remove()
                    reporter.finished()
    outcome.failed = len(store.rows("SELECT id FROM trial WHERE status = 'failed'"))
    store.close()
    return outcome


def run_trial(exp: Experiment, env: TrialEnv, trial: Trial, config: Configuration) -> TrialRecord:
    started = _now()
    env.events, env.effective = [], {}
    (env.workdir / "trials").mkdir(mode=0o711, exist_ok=True)
    trial_dir = safefs.private_dir(env.workdir / "trials" / trial.id, 0o711)
    record = TrialRecord(trial.id, trial.order, trial.round, config.id, "ok", started, started)
    log_offset = 0
    values = config_values(exp, config)
    env.values = values
    try:
        for layer in exp.layers:
            if layer.name == "workload" and env.cluster is not None:
                log_offset = env.cluster.log_size()
            layer.apply(values[layer.name], env)
        for layer in exp.layers:
            layer.verify(values[layer.name], env)
        measure.measure(env, trial_dir, record)
    except TrialFailure as exc:
        record.status, record.reason, record.log_tail = "failed", exc.reason, exc.log_tail
    except (ServerError, pgbench.ParseError, OSError, psycopg.Error, PgsweepError) as exc:
        # the server crashed or was killed, the kernel refused something: this trial failed
        reason = exc.render() if isinstance(exc, PgsweepError) else str(exc)
        record.status, record.reason = "failed", f"{type(exc).__name__}: {reason}".strip()
        record.log_tail = env.cluster.log_tail() if env.cluster else ""
        env.server_settings = None  # whatever runs now is unknown: start it afresh
    record.events = list(env.events)
    record.effective = dict(env.effective)
    record.server_started_at = env.server_started_at.isoformat() if env.server_started_at else None
    if env.cluster is not None:
        record.artifacts["server.log"] = env.cluster.log_since(log_offset)
    record.finished_at = _now()
    safefs.remove_tree(trial_dir)
    return record
