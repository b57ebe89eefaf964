"""`plan`'s start of each distinct set of server settings: a scratch server started with
them (and their initdb options), so a level, or a combination of levels, that would fail
every trial it is in is exit 2 before anything runs, in the server's own words."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import PgsweepError
from ..postgres.startcheck import DERIVED, StartChecker, StartFailure
from .base import ValidationContext

RESTART_CONTEXTS = {"postmaster", "internal"}


def start_each(configs: Sequence[Mapping[str, Any]], ctx: ValidationContext) -> None:
    """Start a scratch server with each distinct set of server settings (with its initdb
    options): a level, or a combination of levels, that would fail every trial it is in is
    exit 2 now, with the server's own words; what every level shows when it runs (or that
    the server derives it) goes into `ctx.shown` for the trials' read-back."""
    catalog = ctx.binaries.settings
    restart = {n for n, s in catalog.items() if s.context in RESTART_CONTEXTS}

    def order(config: Mapping[str, Any]) -> tuple[object, ...]:  # one start per such group
        fixed = sorted((k, v) for k, v in config["server"].items() if k in restart)
        return (config["cluster"].initdb_options(), fixed)

    with StartChecker(ctx.binaries, ctx.user, ctx.host) as starter:
        for config in sorted(configs, key=order):
            settings: dict[str, str] = config["server"]
            if not settings:
                continue  # nothing of the file's to see: a server with defaults starts
            restart_here = {n for n in settings if n in restart or n not in catalog}
            got = starter.shown(settings, tuple(config["cluster"].initdb_options()),
                                restart_here)  # fmt: skip
            if isinstance(got, StartFailure):
                raise _start_error(got, ctx)
            for name, value in got.items():
                if ctx.shown.get((name, settings[name])) != DERIVED:
                    ctx.shown[(name, settings[name])] = value


def _start_error(failure: StartFailure, ctx: ValidationContext) -> PgsweepError:
    named = failure.names() or list(failure.settings)
    paths: list[tuple[str, ...] | str] = [ctx.where[f"server.{n}"] for n in named
                                          if f"server.{n}" in ctx.where]  # fmt: skip
    paths += [ctx.origins[f"server.{n}"] for n in named if f"server.{n}" in ctx.origins]
    levels = ", ".join(f"{n} = {v!r}" for n, v in sorted(failure.settings.items()))
    fix = ("change the level(s) the server's message names: every configuration of the "
           "full factorial must start")  # fmt: skip
    for library, package in PACKAGED.items():  # a preloaded library Debian packages apart
        if f'could not access file "{library}"' in " ".join(failure.messages):
            fix = (f"install it (apt-get install postgresql-{ctx.binaries.major}-{package}, "
                   f"or scripts/setup.sh --dev), or {fix[0].lower()}{fix[1:]}")  # fmt: skip
    return config_error(
        ctx, paths[0] if paths else ("server",),
        f"a server with these settings does not start ({levels or 'no settings'}): "
        + "; ".join(failure.messages),
        fix=fix,
    )


# libraries the explain panel uses when the file preloads them, and Debian's package
PACKAGED = {"pg_wait_sampling": "pg-wait-sampling"}


def config_error(ctx: ValidationContext, path: tuple[str, ...] | str, what: str,
           **kw: Any) -> PgsweepError:  # fmt: skip
    """An error at a key of the experiment file, or at a line of server.include's files."""
    return PgsweepError(what, where=path, **kw) if isinstance(path, str) else ctx.source.error(
        path, what, **kw)
