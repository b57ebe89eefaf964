"""The commands of the command line that plan and run (plan, run, run --inventory, merge):
they call the engine and print. Errors go up to cli.main."""

from __future__ import annotations

import argparse
from datetime import datetime
from pathlib import Path

from rich.console import Console

from . import spec
from .core import printable
from .errors import (
    EXIT_FAILED_TRIALS,
    EXIT_INTERRUPTED,
    EXIT_OK,
    PgsweepError,
)
from .host import safefs
from .host.blockdev import Grant
from .outputs import show
from .outputs.progress import ConsoleReporter, FleetProgress
from .plan import Shard, estimate_parts, fleet_estimate, round_spans
from .store import Results


def _grant(args: argparse.Namespace) -> Grant:
    if args.wipe and not args.allow_device:
        raise PgsweepError("--wipe needs --allow-device naming the device",
                           fix="pgsweep run FILE --allow-device /dev/DEVICE --wipe")  # fmt: skip
    return Grant(tuple(args.allow_device), args.wipe)


def cmd_plan(args: argparse.Namespace, console: Console) -> int:
    from .engine import buildprep, plans
    from .host.local import LOCAL
    from .spec import rounds

    if args.noise_from is not None:  # refused before the file's checks start servers
        Results(args.noise_from).close()
    exp = spec.load(args.file)
    spec.check_adaptive(exp)
    exp.grant = _grant(args)
    shard = _shard(args)
    if shard is not None:
        plans.apply_shard(exp, shard.n, shard.k if args.shard else None)
    where = plans.preflight(exp, args.results or Path("results") / exp.name)
    plan = plans.plan_for(exp, where)
    from .engine import clients

    remotes = clients.open_hosts(exp)  # every host reached and checked, read-only
    try:
        reached = clients.reached(exp, remotes)
    finally:
        clients.close_all(remotes)
    for name, host in remotes.items():
        roles = clients.roles_on(exp, name)
        programs = ", ".join(clients.programs_on(exp, name))
        exp.notes.append(f"{' and '.join(roles)}: host {name} ({host.hello.get('hostname')}) "
                         f"reached and checked: root, the same pgsweep, {programs}, the user")
    notes = (
        []
        if exp.seed_given or exp.shard is not None
        else [f"no seed in the file: this plan used {exp.seed}; `run` records the seed it uses"]
    )
    notes += exp.notes + show.build_notes(buildprep.planned(exp, LOCAL))
    costs = rounds.trial_costs(exp, plan)
    show.render_plan(plan, estimate_parts(plan, costs), console, notes)
    if shard is not None:
        show.render_fleet(plan, fleet_estimate(plan, costs), args.shard and shard.k, console)
    from .analysis import planning

    for line in planning.lines(exp, plan, args.noise_from):
        console.print(line, markup=False, highlight=False)
    if args.commands:
        from .engine import dryrun

        results = args.results or Path("results") / exp.name
        client = exp.topology.client if exp.topology.remote else None
        for line in dryrun.commands(exp, plan, results, client, reached):
            console.print(line, markup=False, highlight=False, soft_wrap=True)
    return EXIT_OK


def cmd_run(args: argparse.Namespace, console: Console) -> int:
    if args.resume and args.results is None:
        raise PgsweepError(
            "--resume needs --results naming the run to continue",
            fix="pgsweep run FILE --results DIR --resume",
        )
    grant = _grant(args)
    spec.hosts.check_host_options(args.host, args.inventory is not None)
    from .engine import against

    # a folder this run cannot use is refused before the file's checks start servers
    frozen = against.frozen_file(args.against) if args.against is not None else None
    if args.results is not None:  # checked again, and resolved once, where the run writes
        safefs.trusted_target(args.results, "the results folder")
    exp = spec.load(args.file)
    if frozen is not None:
        exp = against.combine(spec.load(frozen), exp, args.against)
    spec.check_adaptive(exp)
    exp.grant = grant
    if args.inventory is not None:
        return _run_fleet(args, exp, console)
    if args.host:
        exp.topology = spec.hosts.redirect(exp.topology, args.host)
    shard = _shard(args)
    if shard is not None or args.group:
        from .engine import plans

        plans.apply_shard(exp, shard.n if shard else 1, shard.k if shard else None, args.group)
    results = args.results or Path("results") / f"{exp.name}-{datetime.now():%Y%m%d-%H%M%S}"
    from .engine.run import run

    outcome = run(exp, results, args.resume, ConsoleReporter(console))
    if outcome.interrupted:
        console.print(
            f"interrupted: every finished trial is saved in {results}; the server "
            f"was stopped and its files removed.\nresume with: pgsweep run "
            f"{args.file} --results {results} --resume",
            markup=False,
        )
        return EXIT_INTERRUPTED
    if outcome.stopped:
        console.print(f"adaptive rounds: stopped {outcome.stopped}", markup=False)
    if outcome.lost:
        console.print(f"stopped: {outcome.lost}; every finished trial is saved in {results}."
                      f"\nresume with: pgsweep run {args.file} --results {results} --resume",
                      markup=False)  # fmt: skip
    store = show.open_store(results)
    show.render_summary(store, console)
    store.close()
    if outcome.failed or outcome.lost:
        console.print(f"{outcome.failed} of {outcome.total} trials failed (exit code 3)")
        return EXIT_FAILED_TRIALS
    return EXIT_OK


def _shard(args: argparse.Namespace) -> Shard | None:
    """--shard K/N (run, plan) or --shards N (plan): N groups, and K when given."""
    if getattr(args, "shards", None) is not None:
        if not 1 <= args.shards <= 9999:
            raise PgsweepError(f"--shards {args.shards} is not a number of groups",
                               fix="write e.g. --shards 3")  # fmt: skip
        return Shard(1, args.shards)
    return Shard.parse(args.shard) if args.shard else None


def _run_fleet(args: argparse.Namespace, exp: spec.Experiment, console: Console) -> int:
    from .engine import fleet, plans

    if exp.topology.remote_server:  # a shard runs on each group's server host itself
        raise exp.source.error(("roles", "server"), "--inventory runs each shard on its "
                               "group's database machine: roles.server is that machine",
                               fix="remove roles.server (a group's client and standby "
                               "hosts are its copies of [hosts])")  # fmt: skip
    if args.shard or args.group or args.results is None:
        raise PgsweepError("--inventory runs every shard itself, into its --results folder",
                           fix="pgsweep run FILE --inventory INV --results DIR [--resume] "
                           "(without --shard, --group)")  # fmt: skip
    wanted = [g.strip() for g in (args.groups or "").split(",") if g.strip()]
    plans.apply_shard(exp, max(2, len(wanted)), None)  # refuses what a fleet cannot run
    shown = FleetProgress(console)
    try:
        outcome = fleet.dispatch(exp, args.inventory, wanted, args.results, args.resume,
                                 shown.update)  # fmt: skip
    except fleet.FleetStopped as stopped:
        shown.finished()
        for group, why in stopped.status.items():
            console.print(f"{group}: {printable(why)}", markup=False)
        console.print(f"dispatch the rest with: pgsweep run {args.file} --inventory "
                      f"{args.inventory} --results {args.results} --resume", markup=False)
        raise
    finally:
        shown.finished()
    for line in fleet.describe(outcome):
        console.print(line, markup=False)
    bad = [g for g, why in outcome.groups.items() if why != "ok"]
    if bad:
        console.print(f"dispatch what is missing with: pgsweep run {args.file} --inventory "
                      f"{args.inventory} --results {outcome.folder} --resume", markup=False)
    if not (outcome.folder / "results.db").exists():
        console.print("no group's shard came back: nothing to merge", markup=False)
        return EXIT_FAILED_TRIALS
    store = show.open_store(outcome.folder)
    show.render_summary(store, console)
    store.close()
    return EXIT_FAILED_TRIALS if bad else EXIT_OK


def cmd_merge(args: argparse.Namespace, console: Console) -> int:
    from .store import merge

    done = merge.merge(args.shards, args.results)
    console.print(f"merged {done.shards} of {done.of} shards ({done.trials} trials) into "
                  f"{done.folder}", markup=False)  # fmt: skip
    if done.missing:
        console.print(f"rounds no shard here ran: {round_spans(done.missing)} (merge again "
                      "with their shards' folders once they are done)", markup=False)  # fmt: skip
    store = show.open_store(done.folder)
    show.render_summary(store, console)
    store.close()
    return EXIT_OK


def cmd_stop(args: argparse.Namespace, console: Console) -> int:
    from .engine import watch

    signalled, left = watch.stop(args.results, args.wait)
    console.print(f"stop: {len(signalled)} run(s) writing {args.results} sent Ctrl-C; "
                  f"{len(left)} still running", markup=False, highlight=False)  # fmt: skip
    return EXIT_FAILED_TRIALS if left else EXIT_OK
