"""The reading commands of the command line (show, report, compare, export, explain):
they open a results folder, call the analysis and print. Errors go up to cli.main."""

from __future__ import annotations

import argparse
import io
import json
import sys
from typing import TYPE_CHECKING

from rich.console import Console

from . import spec
from .errors import (
    EXIT_OK,
    EXIT_REGRESSION,
    PgsweepError,
)
from .host import folders
from .outputs import show
from .store import Results

if TYPE_CHECKING:
    from .analysis import Analysis

# The analysis modules load scipy and pyarrow (a second each): commands import them when used.


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


def _gate_threshold(args: argparse.Namespace) -> float | None:
    """--fail-if-slower as a fraction; --junit without it is refused before any work."""
    if args.fail_if_slower is None:
        if args.junit:
            raise PgsweepError("--junit writes the gate's verdicts: it needs --fail-if-slower",
                               fix="add e.g. --fail-if-slower 3%")  # fmt: skip
        return None
    return spec.parse_margin(args.fail_if_slower, "--fail-if-slower")


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
