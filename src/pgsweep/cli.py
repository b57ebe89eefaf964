"""The command line: parses arguments, calls the modules, prints. Errors are caught once,
here: a PgsweepError prints its message and exits with its code."""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from . import __version__
from .core import EXPORT_FORMATS, EXPORT_WHAT, REPORT_FORMATS, printable
from .errors import (
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_OK,
    PgsweepError,
)

Command = Callable[[argparse.Namespace, Console], int]


def _lazy(module: str, name: str) -> Command:
    """A command whose module is imported when it runs: the experiment file's models, the
    engine and the analysis cost about a second of CPU to import, and `pgsweep --version`,
    `progress`, `facts` and `agent` (what a fleet's or a remote host's SSH session runs,
    on the host being measured) need none of it."""

    def command(args: argparse.Namespace, console: Console) -> int:
        return int(getattr(importlib.import_module(module, __package__), name)(args, console))

    command.__name__ = name
    return command


@functools.cache  # one per process: main() may be called many times in one (the tests)
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
    sr.add_argument("--host", action="append", metavar="NAME=DEST", default=[],
                    help="reach the host [hosts.NAME] at DEST instead (a fleet group's own "
                    "client or standby host; repeat for each)")  # fmt: skip
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
    sf.add_argument("file", type=Path, help="the experiment file (its PostgreSQL server); "
                    "- reads it from stdin (a fleet sends it so: nothing written on the host)")
    sg = sub.add_parser("progress", help="how far the run writing a results folder is: trials "
                        "done, ETA, whether it still runs here (changes nothing)")  # fmt: skip
    sg.add_argument("results", type=Path)
    sg.add_argument("--json", action="store_true", help="one JSON object (a fleet asks this)")
    sg.add_argument("--wait", type=float, default=0.0, metavar="SECONDS",
                    help="answer once the run has ended, or after SECONDS (default 0: now)")
    sx = sub.add_parser("stop", help="Ctrl-C to the runs writing a results folder on this "
                        "machine, by PID: each stops its trial and puts the machine back "
                        "(resumable); waits for them to end")  # fmt: skip
    sx.add_argument("results", type=Path)
    sx.add_argument("--wait", type=float, default=600.0, metavar="SECONDS",
                    help="how long to wait for them to end (default 600)")
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
        "of each process type; cpu: per trial and process type; devices: per trial, device and "
        "second; tool: the workload tool's own figures per trial, second and name (sysbench's "
        "qps, reads_s, writes_s, other_s, errors_s, reconnects_s); profiles: per trial and CPU "
        "stack; io_latency: per trial, block device, kind of request and latency bucket",
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


def _console() -> Console:
    # Logs and CI are not terminals: rich would assume 80 columns and crop the tables.
    width = None if sys.stdout.isatty() else int(os.environ.get("COLUMNS", "160"))
    return Console(no_color=bool(os.environ.get("NO_COLOR")), highlight=False, width=width)


def cmd_cleanup(args: argparse.Namespace, console: Console) -> int:
    from .host import journal
    from .host.local import LOCAL

    done, failed = journal.recover_stale(LOCAL)
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


def _gate_options(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--fail-if-slower", metavar="PCT",
        help=f'regression gate, e.g. "3%%": exit 4 when a {what} (its whole interval below '
        "-PCT)",
    )  # fmt: skip
    parser.add_argument("--junit", type=Path, metavar="FILE", help="also write JUnit XML for CI")


def cmd_doctor(args: argparse.Namespace, console: Console) -> int:
    from . import spec
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
    from . import spec
    from .collect import hostfacts

    file = Path("/dev/stdin") if str(args.file) == "-" else args.file
    facts = hostfacts.gather(spec.server_bindir(file))
    console.print(json.dumps(facts, sort_keys=True), markup=False, highlight=False,
                  soft_wrap=True)  # fmt: skip
    return EXIT_OK


def cmd_builds(args: argparse.Namespace, console: Console) -> int:
    from .host import builds
    from .outputs import show

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


def cmd_progress(args: argparse.Namespace, console: Console) -> int:
    from .engine import watch

    p = watch.progress_awaited(args.results, max(0.0, args.wait))
    text = watch.as_json(p) if args.json else watch.line(p)
    console.print(text, markup=False, highlight=False, soft_wrap=True)
    return EXIT_OK


def cmd_agent(args: argparse.Namespace, console: Console) -> int:
    from .host import agent

    return agent.main()


COMMANDS = {
    "builds": cmd_builds,
    "plan": _lazy(".cli_run", "cmd_plan"),
    "run": _lazy(".cli_run", "cmd_run"),
    "show": _lazy(".cli_read", "cmd_show"),
    "cleanup": cmd_cleanup,
    "restore": cmd_cleanup,
    "doctor": cmd_doctor,
    "facts": cmd_facts,
    "progress": cmd_progress,
    "stop": _lazy(".cli_run", "cmd_stop"),
    "agent": cmd_agent,
    "export": _lazy(".cli_read", "cmd_export"),
    "explain": _lazy(".cli_read", "cmd_explain"),
    "report": _lazy(".cli_read", "cmd_report"),
    "compare": _lazy(".cli_read", "cmd_compare"),
    "schema": cmd_schema,
    "merge": _lazy(".cli_run", "cmd_merge"),
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
