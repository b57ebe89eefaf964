"""The command line: parses arguments, calls the modules, prints. Errors are caught once,
here: a PgsweepError prints its message and exits with its code."""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from . import __version__, spec
from .core import printable
from .errors import (
    EXIT_FAILED_TRIALS,
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_REGRESSION,
    PgsweepError,
)
from .host import folders, journal, safefs
from .host.blockdev import Grant
from .outputs import show
from .outputs.progress import ConsoleReporter
from .plan import Shard, estimate_parts, fleet_estimate, round_spans
from .store import Results

if TYPE_CHECKING:
    from .analysis import Analysis

# The analysis modules load scipy and pyarrow (a second each): commands import them when used.
REPORT_FORMATS = ("terminal", "markdown", "html", "json")
EXPORT_FORMATS = ("csv", "json", "parquet")
EXPORT_WHAT = ("trials", "samples", "latency", "standbys", "waits", "cpu")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="pgsweep",
        description="Does this change make PostgreSQL "
        "faster, slower, or no different, and by how much?",
    )
    p.add_argument("--version", action="version", version=f"pgsweep {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    sp = sub.add_parser("plan", help="validate an experiment file and print its plan")
    sp.add_argument("file", type=Path)
    sp.add_argument("--results", type=Path, help="the results folder `run` would use")
    sp.add_argument(
        "--noise-from", type=Path, metavar="DIR",
        help="a pilot or earlier results folder: print the rounds needed to detect a difference",
    )  # fmt: skip
    fleet = sp.add_mutually_exclusive_group()
    fleet.add_argument("--shard", metavar="K/N", help="the plan of shard K of N (run --shard)")
    fleet.add_argument("--shards", type=int, metavar="N",
                       help="the rounds each of N shards runs, and the fleet's ETA")  # fmt: skip
    sp.add_argument("--commands", action="store_true",
                    help="also print every command, file and kernel change the run would make "
                    "(first trial of each kind), changing nothing")  # fmt: skip
    _device_options(sp)
    sr = sub.add_parser("run", help="run an experiment")
    sr.add_argument("file", type=Path)
    sr.add_argument("--results", type=Path, help="results folder (default results/NAME-TIME)")
    sr.add_argument("--resume", action="store_true", help="run only the missing trials")
    sr.add_argument(
        "--against", type=Path, metavar="DIR",
        help="measure DIR's configurations again, interleaved with FILE's in every round; "
        "the change is the factor run.against (before = DIR, after = FILE)",
    )  # fmt: skip
    sr.add_argument("--shard", metavar="K/N",
                    help="run only the rounds the plan gives shard K of N (one host group of a "
                    "fleet; `merge` joins the shards' folders)")  # fmt: skip
    sr.add_argument("--group", metavar="NAME", help="with --shard: the host group's name "
                    "(default shardK)")  # fmt: skip
    sr.add_argument("--inventory", type=Path, metavar="INV",
                    help="an Ansible inventory: each group's host runs a shard, all at once; "
                    "the shards come back merged into --results (the [fleet] extra)")  # fmt: skip
    sr.add_argument("--groups", metavar="A,B", help="with --inventory: the groups to use "
                    "(default: every group with hosts)")  # fmt: skip
    _device_options(sr)
    sm = sub.add_parser("merge", help="join the shard folders of one experiment into one folder")
    sm.add_argument("shards", type=Path, nargs="+", metavar="DIR")
    sm.add_argument("--results", type=Path, required=True, help="the new merged folder")
    ss = sub.add_parser("show", help="summarise a results folder")
    ss.add_argument("results", type=Path)
    ss.add_argument("--env", action="store_true", help="show the recorded environment")
    ss.add_argument("--commands", action="store_true",
                    help="each trial's workload tool, its version and its command line")
    sub.add_parser("cleanup", help="remove clusters and sockets left by runs that were killed")
    sd = sub.add_parser("doctor", help="what this machine offers the layers (changes nothing)")
    sd.add_argument("--host", metavar="NAME", help="ask the host [hosts.NAME] of FILE instead")
    sd.add_argument("file", type=Path, nargs="?", help="the experiment file that names it")
    sf = sub.add_parser("facts", help="this machine's facts a fleet compares between its "
                        "groups, as JSON (changes nothing)")  # fmt: skip
    sf.add_argument("file", type=Path, help="the experiment file (its PostgreSQL server)")
    sub.add_parser("agent", help="(started over SSH by a run whose roles place work here: "
                   "frames on stdin/stdout)")  # fmt: skip
    sub.add_parser(
        "restore", help="stop servers of killed runs, then put back every kernel value they changed"
    )
    sp_r = sub.add_parser("report", help="verdicts with confidence intervals, tables and plots")
    sp_r.add_argument("results", type=Path)
    sp_r.add_argument("--format", choices=REPORT_FORMATS, default="terminal")
    sp_r.add_argument("-o", "--output", type=Path, help="file to write (default: stdout)")
    sp_r.add_argument(
        "--baseline",
        action="append",
        default=[],
        metavar="FACTOR=LEVEL",
        help="the configuration to compare with (default: [report] baseline, else c01)",
    )
    sp_r.add_argument("--margin", help='equivalence margin, e.g. "2%%" (default: [report])')
    sp_r.add_argument(
        "--alpha", type=float, help="family-wise false 'different' rate (default: [report], 0.05)"
    )
    _gate_options(sp_r, "configuration is significantly more than PCT slower than the "
                  "baseline")  # fmt: skip
    sc = sub.add_parser("compare", help="the same configurations in two result folders")
    sc.add_argument("before", type=Path)
    sc.add_argument("after", type=Path)
    sc.add_argument("--json", action="store_true", help="print the comparison as JSON")
    _gate_options(sc, "configuration is significantly more than PCT slower in AFTER")
    sc.add_argument("--alpha", type=float, help="family-wise false 'different' rate (0.05)")
    for flag, what in (("--more-before", "another session of the BEFORE side"),
                       ("--more-after", "another session of the AFTER side"),
                       ("--calibration", "an A/A session: a run of one unchanged file (give "
                        "two or more)")):  # fmt: skip
        sc.add_argument(flag, action="append", type=Path, default=[], metavar="DIR", help=what)
    sj = sub.add_parser("schema", help="the experiment file's JSON Schema (for TOML editors)")
    sj.add_argument("--markdown", action="store_true",
                    help="the key reference instead (docs/reference.md)")  # fmt: skip
    sb = sub.add_parser("builds", help="list the PostgreSQL build cache, or prune it")
    sb.add_argument("--remove", nargs="+", default=[], metavar="KEY", help="remove builds")
    sb.add_argument("--prune", action="store_true",
                    help="remove unfinished builds and failed builds' logs")  # fmt: skip
    sb.add_argument("--unused-days", type=float, metavar="N",
                    help="with --prune: also builds no run used for N days")  # fmt: skip
    sx = sub.add_parser("explain", help="why a configuration differs: waits, WAL, I/O and CPU "
                        "per transaction against the baseline, with intervals")  # fmt: skip
    sx.add_argument("results", type=Path)
    sx.add_argument("--config", required=True, help="the configuration to explain, e.g. c03")
    sx.add_argument("--against", help="the configuration to compare with (default: baseline)")
    sx.add_argument("--alpha", type=float, help="the panel's false 'different' rate (0.05)")
    sx.add_argument("--json", action="store_true", help="print the panel as JSON")
    sx.add_argument("--all", action="store_true", help="every row, not only the largest")
    se = sub.add_parser("export", help="write results as a tidy table (CSV, JSON or Parquet)")
    se.add_argument("results", type=Path)
    se.add_argument("--format", choices=EXPORT_FORMATS, default="csv")
    se.add_argument(
        "--what",
        choices=EXPORT_WHAT,
        default="trials",
        help="trials: one row per trial; samples: per trial-second; latency: per latency bin; "
        "standbys: per trial, standby and second (replication); waits: per trial and wait state "
        "of each process type; cpu: per trial and process type",
    )
    se.add_argument("-o", "--output", type=Path, help="file to write (default RESULTS/WHAT.FORMAT)")
    return p


def _device_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--allow-device", action="append", type=Path, default=[], metavar="PATH",
        help="a real block device storage.device may format (destroying its contents)",
    )  # fmt: skip
    p.add_argument(
        "--wipe", action="store_true",
        help="with --allow-device: format it even if it carries a filesystem or RAID signature",
    )  # fmt: skip


def _grant(args: argparse.Namespace) -> Grant:
    if args.wipe and not args.allow_device:
        raise PgsweepError("--wipe needs --allow-device naming the device",
                           fix="pgsweep run FILE --allow-device /dev/DEVICE --wipe")  # fmt: skip
    return Grant(tuple(args.allow_device), args.wipe)


def _console() -> Console:
    # Logs and CI are not terminals: rich would assume 80 columns and crop the tables.
    width = None if sys.stdout.isatty() else int(os.environ.get("COLUMNS", "160"))
    return Console(no_color=bool(os.environ.get("NO_COLOR")), highlight=False, width=width)


def cmd_plan(args: argparse.Namespace, console: Console) -> int:
    from .engine import buildprep, plans

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

    client = clients.open_client(exp)  # every host reached and checked, read-only
    if client is not None:
        client.close()
        exp.notes.append(f"client: host {client.name} ({client.hello.get('hostname')}) "
                         "reached and checked: root, the same pgsweep, pgbench, the user")
    notes = (
        []
        if exp.seed_given or exp.shard is not None
        else [f"no seed in the file: this plan used {exp.seed}; `run` records the seed it uses"]
    )
    notes += exp.notes + show.build_notes(buildprep.planned(exp))
    costs = plans.trial_costs(exp, plan)
    show.render_plan(plan, estimate_parts(plan, costs), console, notes)
    if shard is not None:
        show.render_fleet(plan, fleet_estimate(plan, costs), args.shard and shard.k, console)
    from .analysis import planning

    for line in planning.lines(exp, plan, args.noise_from):
        console.print(line, markup=False, highlight=False)
    if args.commands:
        from .engine import dryrun

        results = args.results or Path("results") / exp.name
        for line in dryrun.commands(exp, plan, results, client.name if client else None):
            console.print(line, markup=False, highlight=False, soft_wrap=True)
    return EXIT_OK


def cmd_run(args: argparse.Namespace, console: Console) -> int:
    if args.resume and args.results is None:
        raise PgsweepError(
            "--resume needs --results naming the run to continue",
            fix="pgsweep run FILE --results DIR --resume",
        )
    grant = _grant(args)
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

    if args.shard or args.group or args.resume or args.results is None:
        raise PgsweepError("--inventory runs every shard itself, into a new --results folder",
                           fix="pgsweep run FILE --inventory INV --results DIR "
                           "(without --shard, --group, --resume)")  # fmt: skip
    wanted = [g.strip() for g in (args.groups or "").split(",") if g.strip()]
    plans.apply_shard(exp, max(2, len(wanted)), None)  # refuses what a fleet cannot run
    outcome = fleet.dispatch(exp, args.inventory, wanted, args.results)
    for line in fleet.describe(outcome):
        console.print(line, markup=False)
    if outcome.merged is None:
        console.print("no group's shard came back: nothing to merge", markup=False)
        return EXIT_FAILED_TRIALS
    store = show.open_store(outcome.folder)
    show.render_summary(store, console)
    store.close()
    bad = [g for g, why in outcome.groups.items() if why != "ok"]
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


def cmd_show(args: argparse.Namespace, console: Console) -> int:
    store = show.open_store(args.results)
    if args.env:
        show.render_environment(store, console)
    elif args.commands:
        show.render_commands(store, console)
    else:
        show.render_summary(store, console)
    store.close()
    return EXIT_OK


def cmd_cleanup(args: argparse.Namespace, console: Console) -> int:
    done, failed = journal.recover_stale()
    for line in done + failed:
        console.print(line, markup=False)
    if failed:
        console.print(
            f"{len(failed)} items could not be put back (exit code 1); the journal "
            "keeps them: fix the cause and run `pgsweep restore` again",
            markup=False,
        )
        return EXIT_INTERNAL
    console.print("nothing left to clean up" if not done else f"{len(done)} items cleaned up")
    return EXIT_OK


def _gate_threshold(args: argparse.Namespace) -> float | None:
    """--fail-if-slower as a fraction; --junit without it is refused before any work."""
    if args.fail_if_slower is None:
        if args.junit:
            raise PgsweepError("--junit writes the gate's verdicts: it needs --fail-if-slower",
                               fix="add e.g. --fail-if-slower 3%")  # fmt: skip
        return None
    return spec.parse_margin(args.fail_if_slower, "--fail-if-slower")


def _gate_options(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--fail-if-slower", metavar="PCT",
        help=f'regression gate, e.g. "3%%": exit 4 when a {what} (its whole interval below '
        "-PCT)",
    )  # fmt: skip
    parser.add_argument("--junit", type=Path, metavar="FILE", help="also write JUnit XML for CI")


def _outputs_first(args: argparse.Namespace) -> None:
    """A command's output names (-o, --junit) refused once its folders are open and
    before it computes anything: write_output checks them again when it writes."""
    for attr, what in (("output", "the report"), ("junit", "the JUnit file")):
        if getattr(args, attr, None):
            folders.output_target(getattr(args, attr), what)


def cmd_report(args: argparse.Namespace, console: Console) -> int:
    from . import analysis

    store = show.open_store(args.results)
    try:
        _outputs_first(args)
        options = spec.report_options(store.experiment().file_text)
        baseline = dict(options.baseline)
        for item in args.baseline:
            name, sep, level = item.partition("=")
            if not sep:
                raise PgsweepError(
                    f"--baseline {item!r} is not FACTOR=LEVEL",
                    fix="write e.g. --baseline server.shared_buffers=128MB",
                )
            baseline[name] = level
        margin = options.margin_fraction()
        if args.margin is not None:
            margin = spec.parse_margin(args.margin, "--margin")
        alpha = options.alpha if args.alpha is None else _alpha(args.alpha)
        threshold = _gate_threshold(args)
        result = analysis.analyse(store, baseline or None, margin, alpha)
        _render_report(args, result, store, console)
    finally:
        store.close()
    if threshold is None:
        return EXIT_OK
    from .analysis import compare
    from .outputs import gate as gate_out

    gate = compare.within_run_gate(result, threshold)
    if args.junit:
        xml = gate_out.junit_xml(gate, result.baseline, str(args.results))
        folders.write_output(args.junit, xml, "the JUnit file")
    to_stdout = args.format == "terminal" and not args.output
    print(gate_out.gate_line(gate), file=sys.stdout if to_stdout else sys.stderr)
    return EXIT_REGRESSION if gate["regressions"] else EXIT_OK


def _render_report(
    args: argparse.Namespace, result: Analysis, store: Results, console: Console
) -> None:
    from .outputs import report, terminal

    if args.format == "terminal" and not args.output:
        terminal.render_terminal(result, console)
        return
    if args.format == "terminal":
        buffer = io.StringIO()
        terminal.render_terminal(result, Console(file=buffer, width=100))
        text = buffer.getvalue()
    elif args.format == "markdown":
        text = report.render_markdown(result)
    elif args.format == "json":
        text = result.to_json() + "\n"
    else:
        from .outputs import html as report_html

        text = report_html.render(result, store)
    if args.output:
        folders.write_output(args.output, text, "the report")
        console.print(f"wrote {args.output}", markup=False)
    else:
        sys.stdout.write(text)


def _alpha(value: float) -> float:
    if not 0 < value <= 0.2:
        raise PgsweepError(
            f"--alpha {value} is outside (0, 0.2]",
            fix="write e.g. --alpha 0.05, or 0.01 for a stricter report",
        )
    return value


def cmd_compare(args: argparse.Namespace, console: Console) -> int:
    from .analysis import compare
    from .outputs import gate as gate_out

    threshold = _gate_threshold(args)
    alpha = compare.ALPHA if args.alpha is None else _alpha(args.alpha)
    stores = {side: [show.open_store(p) for p in paths] for side, paths in (
        ("a", [args.before, *args.more_before]), ("b", [args.after, *args.more_after]),
        ("c", args.calibration))}  # fmt: skip
    try:
        _outputs_first(args)
        result = compare.compare(stores["a"], stores["b"], alpha, threshold, stores["c"])
    finally:
        for store in (s for side in stores.values() for s in side):
            store.close()
    if args.json:
        print(json.dumps(result, indent=1, allow_nan=False))
    else:
        show.render_compare(result, args.before, args.after, console)
    if args.junit:
        xml = gate_out.junit_xml(result, str(args.before), str(args.after))
        folders.write_output(args.junit, xml, "the JUnit file")
    if threshold is None:
        return EXIT_OK
    print(gate_out.gate_line(result), file=sys.stderr if args.json else sys.stdout)
    return EXIT_REGRESSION if result["regressions"] else EXIT_OK


def cmd_doctor(args: argparse.Namespace, console: Console) -> int:
    from .outputs import doctor

    if args.host:
        if args.file is None:
            raise PgsweepError("--host NAME needs the experiment file whose [hosts] names it",
                               fix="pgsweep doctor --host NAME FILE")  # fmt: skip
        from .engine import clients

        console.print(clients.doctor_on(spec.load(args.file), args.host), markup=False)
        return EXIT_OK

    table = Table(title="pgsweep doctor: what this machine offers (nothing was changed)")
    for col in ("section", "item", "finding"):
        table.add_column(col)
    for row in doctor.report():
        table.add_row(*(escape(cell) for cell in row))  # "[never]" is data, not markup
    console.print(table)
    return EXIT_OK


def cmd_facts(args: argparse.Namespace, console: Console) -> int:
    from .collect import hostfacts

    facts = hostfacts.gather(spec.server_bindir(args.file))
    console.print(json.dumps(facts, sort_keys=True), markup=False, highlight=False,
                  soft_wrap=True)  # fmt: skip
    return EXIT_OK


def cmd_export(args: argparse.Namespace, console: Console) -> int:
    from .outputs import export

    store = show.open_store(args.results)
    out = args.output or args.results / f"{args.what}.{args.format}"
    folders.output_target(out, "the export")  # refused before the table is computed
    try:
        tbl = export.table(store, args.what)
    finally:
        store.close()
    folders.write_output(out, export.encode(tbl, args.format), "the export")
    console.print(f"{out}: {tbl.num_rows} rows, {tbl.num_columns} columns", markup=False)
    return EXIT_OK


def cmd_explain(args: argparse.Namespace, console: Console) -> int:
    from .outputs import explain

    store = show.open_store(args.results)
    try:
        alpha = None if args.alpha is None else _alpha(args.alpha)
        explain.run(store, args.config, args.against, alpha, args.json, args.all, console)
    finally:
        store.close()
    return EXIT_OK


def cmd_builds(args: argparse.Namespace, console: Console) -> int:
    from .host import builds

    root = builds.open_cache(create=False)
    if root is None:
        console.print(f"no build cache at {builds.cache_root()}", markup=False)
        return EXIT_OK
    removed = builds.prune(root, args.remove, args.prune, args.unused_days)
    for name in removed:
        console.print(f"removed {root / name}", markup=False)
    show.render_builds(root, builds.entries(root), console)
    return EXIT_OK


def cmd_schema(args: argparse.Namespace, console: Console) -> int:
    from .spec import reference, schema

    text = reference.markdown() if args.markdown else json.dumps(schema.json_schema(), indent=1)
    sys.stdout.write(text if text.endswith("\n") else text + "\n")
    return EXIT_OK


def cmd_agent(args: argparse.Namespace, console: Console) -> int:
    from .host import agent

    return agent.main()


COMMANDS = {
    "builds": cmd_builds,
    "plan": cmd_plan,
    "run": cmd_run,
    "show": cmd_show,
    "cleanup": cmd_cleanup,
    "restore": cmd_cleanup,
    "doctor": cmd_doctor,
    "facts": cmd_facts,
    "agent": cmd_agent,
    "export": cmd_export,
    "explain": cmd_explain,
    "report": cmd_report,
    "compare": cmd_compare,
    "schema": cmd_schema,
    "merge": cmd_merge,
}


def main(argv: list[str] | None = None) -> int:
    for key in [k for k in os.environ if k.startswith("PG") and not k.startswith("PGSWEEP_")]:
        del os.environ[key]  # a user's PGHOST or PGPASSWORD never reaches a trial's server
    args = _parser().parse_args(argv)
    console = _console()
    try:
        return COMMANDS[args.command](args, console)
    except PgsweepError as exc:  # it may quote a level or a folder's text: no escapes
        print(printable(exc.render()), file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:  # a bug: say so plainly, with the traceback for the report
        import traceback

        traceback.print_exc()
        print(f"error: pgsweep itself failed: {exc!r} (please report this)", file=sys.stderr)
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
