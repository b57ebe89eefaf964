"""Runs a plan: every trial prepared through the layers on resources the engine keeps,
measured with pgbench and saved atomically; everything it made is taken down on success,
error, Ctrl-C, SIGTERM or SIGHUP, and a second signal cannot cut that short."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Protocol

from ..collect import environment
from ..errors import PgsweepError
from ..host import areaprocs, journal, proc, safefs, workarea
from ..host.api import Host, HostLost
from ..host.local import LOCAL
from ..host.remote import RemoteHost
from ..layers.base import ResourceLayer
from ..layers.context import HostSide, RunContext
from ..plan import Configuration, Plan, Trial
from ..postgres import startcheck
from ..spec import Experiment
from ..store import Results, Store, TrialRecord
from . import buildprep, clients
from .folder import check_results_folder, new_store, resume_store
from .plans import claim_host, plan_for, preflight, resumed_plan, shard_facts
from .resources import Resources, in_order
from .signals import signals_ignored, stopped_by_signals
from .trial import run_trial


class Reporter(Protocol):
    def building(self, line: str) -> None: ...
    def started(self, plan: Plan, todo: list[Trial], results: Path, notes: list[str]) -> None: ...
    def trial_started(self, trial: Trial, config: Configuration, done: int) -> None: ...
    def trial_finished(self, trial: Trial, record: TrialRecord, done: int) -> None: ...
    def stopped_early(self, rounds: int, reason: str) -> None: ...
    def finished(self) -> None: ...


@dataclass
class Outcome:
    results: Path
    total: int
    failed: int
    interrupted: bool = False
    stopped: str | None = None  # an adaptive run's reason to stop before its maximum
    lost: str | None = None  # a host the run could not go on without, and why


def _open(exp: Experiment, results: Path, resume: bool, where: Path) -> tuple[Plan, Store]:
    if not resume:
        plan = plan_for(exp, where)
        return plan, new_store(exp, results, plan)
    store = resume_store(exp, results)
    stored = json.loads(store.experiment()["plan_json"])  # type: ignore[index]
    return resumed_plan(exp, stored), store


def run(exp: Experiment, results: Path, resume: bool, reporter: Reporter) -> Outcome:
    proc.become_subreaper()  # a killed postmaster must not stay a zombie (see proc)
    results = safefs.trusted_target(results, "the results folder")  # resolved, once
    with stopped_by_signals():
        stale, unrestored = journal.recover_stale(LOCAL)
        check_results_folder(results, resume)
        where = preflight(exp, results)
        if not exp.topology.remote_server:  # e.g. one run at a time changes kernel settings
            claim_host(exp, results, LOCAL)
        # builds before anything else is made (exit 2 for a setting one lacks leaves no
        # results folder), after every read-only check (no compile for a bad file)
        exp.builds = buildprep.prepare(exp, reporter.building, LOCAL)
        remotes = clients.open_hosts(exp)  # reached and checked before anything is made
        fresh = not results.exists()
        builds = exp.builds  # as the server's host runs them
        try:
            if exp.topology.remote_server:  # held by its agent until it exits
                claim_host(exp, results, remotes[exp.topology.server])
                builds = buildprep.copied(exp.builds, remotes[exp.topology.server], exp.user,
                                          reporter.building)  # fmt: skip
            plan, store = _open(exp, results, resume, where)
        except BaseException:
            clients.close_all(remotes)
            raise
        placed = roles(exp, remotes)
        try:
            stored = {k: store.environment_value("roles", k) for k in placed}
            same_places(stored, placed, results)
        except BaseException:
            store.close()
            clients.close_all(remotes)
            raise
        try:
            area = workarea.WorkArea.create(results, exp.user)
        except BaseException:
            store.close()
            clients.close_all(remotes)
            if fresh:
                safefs.remove_tree(results)
            raise
        try:
            ctx = _context(exp, remotes, area, builds)  # a server's host: its work area, port
        except BaseException:
            clients.close_all(remotes)  # each agent removes what it made
            journal.UndoJournal.for_this_run(LOCAL, "hosts").discard()
            area.remove()
            store.close()
            if fresh:
                safefs.remove_tree(results)
            raise
        notes = [f"removed leftovers of an earlier run: {d}" for d in stale]
        notes += [f"could not put back what an earlier run left: {d}" for d in unrestored]
        outcome = _run(exp, plan, store, area, reporter, notes, ctx, placed)
    outcome.failed = store.failed_count()
    store.close()
    if not list(workarea.registry_dir().glob(f"{area.run}.*undo")):
        workarea.forget_lock(area.run)  # nothing of this run is left to put back
    return outcome


def _run(exp: Experiment, plan: Plan, store: Store, area: workarea.WorkArea,
         reporter: Reporter, notes: list[str], ctx: RunContext,
         placed: dict[str, str]) -> Outcome:  # fmt: skip
    """Trials, then cleanup, which a further signal cannot cut short."""
    resources = Resources([la for la in exp.layers if isinstance(la, ResourceLayer)], ctx,
                          not plan.keep_alive)  # fmt: skip
    # every trial, or the rounds of this run's shard
    mine = plan.shard_trials(exp.shard.k) if exp.shard is not None else list(plan.trials)
    outcome = Outcome(area.results, len(mine), 0)
    try:
        keep_start_templates(exp, ctx.host)
        if not store.has_environment("host"):
            host = environment.host(ctx.host, exp.binaries, ctx.private, exp.user)
            store.save_environment("host", host)
            store.save_environment("roles", placed)
        if exp.shard is not None and not store.has_environment("fleet"):
            store.save_environment("fleet", shard_facts(exp))
        if exp.notes and not store.has_environment("notes"):  # what runs otherwise than written
            store.save_environment("notes", {f"{i:02d}": n for i, n in enumerate(exp.notes, 1)})
        notes += exp.notes + ([area.note] if area.note else [])
        if exp.shard is not None:
            notes.append(f"shard {exp.shard} (group {exp.group}): rounds "
                         f"{shard_facts(exp)['rounds']} of {plan.rounds}")  # fmt: skip
        if not plan.keep_alive:
            notes.append(f"whole-plot groups run as batches, rebuilt each round: "
                         f"{plan.why_not_alive}")  # fmt: skip
        for layer in exp.layers:
            layer.record_inputs(area.results)
        done = store.done_trials()
        todo = [t for t in mine if t.id not in done]
        if plan.adaptive and todo:  # a resumed run that had stopped has nothing left to do
            complete, why = _look(area.results)
            if why and complete < plan.adaptive.max_rounds:
                outcome.stopped, todo = f"after round {complete}: {why}", []
        reporter.started(plan, todo, area.results, notes)
        outcome.stopped = (
            _trials(exp, plan, todo, resources, ctx, store, reporter, area.results)
            or outcome.stopped
        )
    except KeyboardInterrupt:
        outcome.interrupted = True
    except HostLost as exc:  # a host the remaining trials need, gone for good
        outcome.lost = str(exc)
    finally:
        with signals_ignored():
            lost = _clean_up(exp, resources, ctx, area, reporter)
    outcome.lost = outcome.lost or lost
    return outcome


def keep_start_templates(exp: Experiment, host: Host) -> None:
    """The checks passed: keep the installed binaries' initdb for the next start checks and
    for this run's clusters, which copy it (postgres/startcheck.keep_templates,
    layers/cluster; `plan` never makes one)."""
    options = {tuple(c["cluster"].initdb_options()) for c in exp.configurations.values()
               if "build" not in c or c["build"].spec is None}  # fmt: skip
    if options:
        startcheck.keep_templates(exp.binaries, exp.user, options, host)


def _trials(
    exp: Experiment, plan: Plan, todo: list[Trial], resources: Resources, ctx: RunContext,
    store: Store, reporter: Reporter, results: Path,
) -> str | None:  # fmt: skip
    """Run the trials; an adaptive run looks after each complete round from its minimum
    and returns why it stopped early (None when it ran them all)."""
    last_of_round = {t.round: t.id for t in plan.trials}
    for layer in exp.layers:
        layer.start_run(ctx)
    recorded = store.environment_scopes()  # configurations whose settings are recorded
    for n, trial in enumerate(in_order(plan, todo, resources)):
        config = plan.config(trial.config)
        reporter.trial_started(trial, config, n)
        record = run_trial(exp.layers, resources, ctx, trial, config, exp.settings(config.levels),
                           config.id not in recorded)  # fmt: skip
        if record.status == "ok":
            recorded.add(config.id)
        if exp.shard is not None:  # each trial names the group that ran it
            record.host_group, record.shard = exp.group, exp.shard.k
        store.save_trial(record)
        reporter.trial_finished(trial, record, n + 1)
        if n + 1 < len(todo):
            _keep(exp, ctx, results.name)  # HostLost: the run stops
        ad = plan.adaptive
        if (
            ad
            and last_of_round[trial.round] == trial.id
            and ad.min_rounds <= trial.round < ad.max_rounds
        ):
            _, why = _look(results, trial.round)
            if why:
                reporter.stopped_early(trial.round, why)
                return f"after round {trial.round}: {why}"
    return None


def _look(results: Path, rounds: int | None = None) -> tuple[int, str | None]:
    """The sequential look after `rounds` complete rounds (default: all the store holds):
    the rounds looked at, and why the run may stop there, or None."""
    from ..analysis import complete_rounds, stop_reason

    with Results(results) as stored:
        if rounds is None:
            rounds = complete_rounds(stored, len(stored.configurations()))
        return rounds, stop_reason(stored, rounds)


def _context(exp: Experiment, remotes: dict[str, RemoteHost], area: workarea.WorkArea,
             builds: Mapping[Any, Any]) -> RunContext:  # fmt: skip
    """Where the run acts: the server's host (this machine, or the one [roles] server names,
    with the run's work area there and this machine as its client) and each other role's
    side, every other host journaled first: should this run be killed and an agent not
    have put its host back, `pgsweep restore` here asks it to."""
    undo = journal.UndoJournal.for_this_run(LOCAL, "hosts")
    for opened in remotes.values():
        undo.record({"remote_host": opened.name, **opened.target.entry()})
    topo = exp.topology
    host: Host = LOCAL
    workdir, private, sockets, run_id = area.workdir, area.private, area.socket_root, area.run
    registry = workarea.registry()
    if topo.remote_server:
        host = remotes[topo.server]
        there, sides = clients.server_elsewhere(remotes, topo, area.results.name, exp.user,
                                                area.workdir)  # fmt: skip
        workdir, private, sockets, run_id = (there.workdir, there.private, there.socket_root,
                                             there.run_id)  # fmt: skip
        registry = there.registry
    else:
        sides = clients.host_sides(remotes, area.results.name, exp.user)
    # a role beside the server has no side: the server's own host (or this machine's)
    client, standbys = sides.get(topo.client), tuple(sides.get(n) for n in topo.standbys)
    return RunContext(exp.binaries, exp.user, workdir, private, sockets, exp.canonical,
                      builds, host=host, client_side=client, standby_sides=standbys,
                      run_id=run_id, registry=registry, grant=exp.grant,
                      cpu_profile_s=exp.cpu_profile_s, io_latency_s=exp.io_latency_s)


def _sides(ctx: RunContext) -> list[HostSide]:
    """The run's sides on other hosts, once each (a host may hold the client and standbys;
    a server on another host has this machine as its client: not a side to keep or close)."""
    out: list[HostSide] = []
    for side in (ctx.client_side, *ctx.standby_sides):
        if side is not None and side.host is not LOCAL and all(side is not s for s in out):
            out.append(side)
    return out


def _keep(exp: Experiment, ctx: RunContext, run_name: str) -> None:
    """Between trials: every other host still there (or reached again: see clients.keep);
    a server's host that is lost is not: what it ran is gone, and the run stops there."""
    for side in _sides(ctx):
        clients.keep(side, exp, run_name)
    if isinstance(ctx.host, RemoteHost) and not ctx.host.alive():
        raise HostLost(f"host {ctx.host.name} ({ctx.host.target.ssh}), the server's, was "
                       "lost: its clusters went with its agent")  # fmt: skip


def _close_hosts(ctx: RunContext) -> None:
    for side in _sides(ctx):  # each agent stops what ran there and removes its work area
        assert isinstance(side.host, RemoteHost)
        _close(side.host)


def _close_server(ctx: RunContext) -> None:
    if isinstance(ctx.host, RemoteHost):  # after its layers put it back
        _close(ctx.host)


def _close(host: RemoteHost) -> None:
    host.close()
    if not host.closed_cleanly:  # this run's journal keeps the host for `pgsweep restore`
        raise HostLost(f"host {host.name} ({host.target.ssh}): its agent did not end by "
                       "itself; `pgsweep restore` here asks that host to put itself back")


def roles(exp: Experiment, remotes: dict[str, RemoteHost]) -> dict[str, str]:
    """Where each role ran, with what its host said of itself (show --env, the report)."""
    here = f"local ({socket.gethostname()})"

    def named(name: str) -> str:
        if name not in remotes:
            return here
        host = remotes[name]
        hello = host.hello
        return (f"{name} ({hello.get('hostname', '?')}, {host.target.ssh}; "
                f"pgsweep {hello.get('version', '?')})")  # fmt: skip

    topo = exp.topology
    out = {"server": named(topo.server), "client": named(topo.client)}
    for role, name in (("server", topo.server), ("client", topo.client)):
        out |= _place(role, name, remotes)
    if topo.server in remotes:
        out["server.address"] = remotes[topo.server].hello["ssh_connection"].split()[2]
    if topo.client in remotes:
        out["client.address"] = remotes[topo.client].hello.get("ssh_connection", "").split()[2]
    beside = here if not topo.remote_server else f"beside the server: {named(topo.server)}"
    out["standbys"] = beside if not topo.standbys else ", ".join(
        f"s{i}: {named(n)}" for i, n in enumerate(topo.standbys, 1))  # fmt: skip
    for i, name in enumerate(topo.standbys, 1):
        out |= _place(f"s{i}", name, remotes)
    return out


def _place(role: str, name: str, remotes: dict[str, RemoteHost]) -> dict[str, str]:
    """What a resumed run compares (same_places): the role's host and its hostname."""
    hostname = (str(remotes[name].hello.get("hostname", "?")) if name in remotes
                else socket.gethostname())  # fmt: skip
    return {f"{role}.host": name, f"{role}.hostname": hostname}


def same_places(stored: dict[str, str | None], now: dict[str, str], results: Path) -> None:
    """A resumed run puts every role where its first trials had it: the same [roles] host
    and the same machine (the hostname it reported) for the server, the client and each
    standby; exit 2 otherwise (its rounds would compare trials of another setup). A role
    a folder did not record (an older folder, or a standby it did not have) is not
    compared, nor one it recorded that this run lacks (the plan's own check says so)."""
    for key in sorted(k for k in now if k.endswith(".host")):
        role = key.removesuffix(".host")
        was = (stored.get(key), stored.get(f"{role}.hostname"))
        then = (now[key], now[f"{role}.hostname"])
        if None in was or was == then:
            continue
        what = {"server": "the server", "client": "the client"}.get(role, f"standby {role}")
        raise PgsweepError(f"{results} ran {what} on {was[0]} (hostname {was[1]}); "
                           f"this run would run it on {then[0]} (hostname {then[1]})",
                           fix="resume with the same [roles] and the hosts they name (their "
                           "ssh or --host), or start a new results folder")  # fmt: skip


def _clean_up(exp: Experiment, resources: Resources, ctx: RunContext,
              area: workarea.WorkArea, reporter: Reporter) -> str | None:  # fmt: skip
    """Servers and clusters, then filesystems, then every layer's kernel values, then the
    work area; each step even when an earlier one failed. Returns why a host was lost
    (its agent puts it back as its connection ends; the run's journal keeps it for
    `pgsweep restore`), and raises the first other failure."""
    first: BaseException | None = None
    lost: str | None = None

    def step(action: Callable[[], object]) -> None:
        nonlocal first, lost
        try:
            action()
        except HostLost as exc:  # the steps through that host fail alike: the first says why
            lost = lost or str(exc)
        except Exception as exc:  # the remaining steps still run; the first failure is raised
            first = first or exc

    step(resources.release_all)
    if _sides(ctx):  # each agent puts its host back as it exits
        step(partial(_close_hosts, ctx))
    # anything of the server user's still using the work area (its own processes, or an
    # intruder's) would keep filesystems and cgroups busy: they go before the layers undo
    step(partial(areaprocs.kill, areaprocs.users_of(area.workdir, area.server_uid),
                 "the server user's, in the work area"))  # fmt: skip
    for layer in reversed(exp.layers):
        step(partial(layer.finish_run, ctx))
    step(partial(_close_server, ctx))
    if first is None and lost is None:  # every agent put its host back: nothing to restore
        step(journal.UndoJournal.for_this_run(LOCAL, "hosts").discard)
    step(area.remove)
    step(reporter.finished)
    if first is not None:
        raise first
    return lost
