"""`pgsweep run FILE --against DIR`: measure again the configurations a finished run
measured (its frozen experiment.toml), interleaved in every round with FILE's, as one new
run. The change becomes a factor, `run.against` = "before" (DIR's file) or "after"
(FILE), so the report judges it side by side within rounds, without the drift between
two sessions that `compare` cannot separate from the change.

Both files must describe the same factors and levels on the same installed PostgreSQL
binaries (postgres.bin; a change of [build] base values is a change like any other, and
two builds are best compared as a `build.*` factor) as the same user.
What differs between them (base values of any layer) is the change; its cost is the
largest cost of a key that differs, so a cluster-level change gets a cluster per side.
Every layer's checks across configurations run again on both sides' configurations
together (one set of layer instances runs them all), and trials record what was in
force, read back from the servers."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from ..core import Cost
from ..errors import PgsweepError
from ..host import folders
from ..host.local import LOCAL
from ..layers.base import ValidationContext
from ..postgres import binaries as pgbin
from ..postgres import pgbench
from ..spec import Experiment, Factor

AGAINST = Factor("run", "against", ("before", "after"))


def frozen_file(folder: Path) -> Path:
    """The experiment file a results folder froze, or an error saying what is wrong. Root
    reads it: the folder must be one no other user can change, and the file no link of
    theirs (host.folders)."""
    path = folders.results_folder(folder, "the --against folder") / "experiment.toml"
    folders.check_file(path, "the --against folder's")
    if not path.is_file() or not (path.parent / "results.db").is_file():
        raise PgsweepError(
            f"{folder} is not a results folder of `pgsweep run` (no experiment.toml and "
            "results.db)", where=str(folder), fix="name the results folder of the earlier run",
        )  # fmt: skip
    return path


def combine(before: Experiment, after: Experiment, folder: Path) -> Experiment:
    """One experiment holding both files' configurations under the factor run.against."""
    where = str(after.source.path)
    for exp in (before, after):  # each file's checks saw its own [roles] only
        if exp.topology.remote_server:
            raise exp.source.error(("roles", "server"), "--against cannot combine runs with "
                                   "a server on another host yet", fix="run both files and "
                                   f"use `pgsweep compare {folder} NEW_DIR`")  # fmt: skip
    if before.binaries.bindir != after.binaries.bindir:
        raise PgsweepError(
            f"{folder} ran PostgreSQL from {before.binaries.bindir}, this file from "
            f"{after.binaries.bindir}", where=where,
            fix="compare binaries with `pgsweep compare`; --against needs the same ones",
        )  # fmt: skip
    if _user(before) != _user(after):
        raise PgsweepError(
            f"{folder} ran the server as {_user(before)}, this file as {_user(after)}",
            where=where, fix="set the same [postgres] user in both",
        )  # fmt: skip
    mine = [(f.name, f.levels) for f in after.factors]
    theirs = [(f.name, f.levels) for f in before.factors]
    if mine != theirs:
        raise PgsweepError(
            f"the factors differ from those of {folder}", where=where,
            expected=f"the same factors and levels: {theirs or 'none'}",
            fix="give both runs the same [factors]; put the change in the base values",
        )  # fmt: skip
    _supported(before, folder)
    _supported(after, folder)
    changed = [(layer.name, key) for layer in after.layers
               for key in _differing(before.base.get(layer.name, {}),
                                     after.base.get(layer.name, {}))]  # fmt: skip
    cost = max((after.layer(n).cost(k) for n, k in changed), default=Cost.NOTHING)
    configs: dict[tuple[Any, ...], dict[str, Any]] = {}
    for side, exp in (("before", before), ("after", after)):
        configs.update({(side, *levels): s for levels, s in exp.configurations.items()})
    _check_together(after, list(configs.values()), folder)
    canonical = {n: {**before.canonical.get(n, {}), **after.canonical.get(n, {})}
                 for n in {*before.canonical, *after.canonical}}  # fmt: skip
    return replace(after, factors=[AGAINST, *after.factors], configurations=configs,
                   canonical=canonical, pseudo_costs={AGAINST.name: cost},
                   against=folder, against_text=before.source.text)  # fmt: skip


def _check_together(after: Experiment, configs: list[dict[str, Any]], folder: Path) -> None:
    """Every layer's checks across configurations, on both sides' together: the run uses
    one set of layer instances (FILE's), and what they learn from the configurations
    (the replication layer: that some configuration has a standby, so every trial's
    primary is set up for one or none) must hold for DIR's too."""
    with pgbin.ValueChecker(after.binaries, after.user) as checker:
        ctx = ValidationContext(after.source, after.binaries, checker, after.user, host=LOCAL)
        ctx.catalog_deferred = all(getattr(c.get("build"), "spec", None) for c in configs)
        try:
            for layer in after.layers:
                layer.check_configurations(configs, ctx)
        except PgsweepError as exc:
            raise PgsweepError(f"{exc.what} (with the configurations of {folder} beside "
                               "this file's)", where=exc.where, expected=exc.expected,
                               fix=exc.fix) from None  # fmt: skip


def _supported(exp: Experiment, folder: Path) -> None:
    """The combined run's workload layer validates and copies the custom scripts of one
    file only: files with custom scripts are not combined yet. [storage] and [os] are:
    what a run does on its host lives in its context, each configuration carries its
    own settings (a storage is a resource keyed by them), the os layer's page counts
    come from the checks `_check_together` runs on both sides, and a kernel value one
    file sets and the other leaves unset runs at the machine's own on the other side."""
    custom = sorted({s["workload"].script for s in exp.configurations.values()}
                    - set(pgbench.BUILTIN_SCRIPTS))  # fmt: skip
    if custom:
        what = ", ".join(f"the script {c}" for c in custom)
        raise PgsweepError(
            f"--against cannot combine runs that use {what} yet ({exp.source.path} does)",
            where=str(exp.source.path),
            fix=f"run both files and use `pgsweep compare {folder} NEW_DIR` (which warns "
            "about session drift), or a script pgbench has built in",
        )  # fmt: skip


def _differing(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    return sorted(k for k in {*a, *b} if a.get(k) != b.get(k))


def _user(exp: Experiment) -> str:
    return exp.user.name if exp.user else "(the invoking user)"
