"""Builds, before the first trial: every build the experiment's configurations need is
found in the cache or compiled (host/builds.py), then the server settings are checked
against each build's own catalog. A build that fails fails only the configurations that
need it (their trials carry its log tail); a setting one build lacks is exit 2 naming it."""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

from ..errors import PgsweepError
from ..host import builds, sources
from ..host.api import Host
from ..host.builds import BuildSpec
from ..host.proc import RunAs
from ..layers.base import ValidationContext
from ..layers.build import PreparedBuild
from ..layers.server_start import start_each
from ..postgres import binaries as pgbin
from ..spec import Experiment
from .signals import stopped_by_signals  # SIGTERM too stops a compile cleanly

# about 3 minutes per build with -O2 on 2 cores here (MACHINE-NOTES), configure included
BUILD_SECONDS_GUESS = 200.0


@dataclass(frozen=True)
class PlannedBuild:
    spec: BuildSpec
    key: str | None  # None: the source is not pinned yet (an apt source not fetched)
    found: builds.Build | None  # the finished build the cache holds
    seconds: float  # how long it took, or the guess

    @property
    def cached(self) -> bool:
        return self.found is not None


def needed(exp: Experiment) -> list[BuildSpec]:
    """The distinct builds of the experiment's configurations, in first-use order."""
    out: list[BuildSpec] = []
    for settings in exp.configurations.values():
        spec = settings["build"].spec if "build" in settings else None
        if spec is not None and spec not in out:
            out.append(spec)
    return out


def planned(exp: Experiment, host: Host) -> list[PlannedBuild]:
    """What `run` will build on the server's host, for `plan`: read only (nothing is
    fetched or compiled)."""
    specs = needed(exp)
    return _planned(specs, host, _cache(exp, host, create=False)) if specs else []


def _cache(exp: Experiment, host: Host, create: bool) -> Path | None:
    """The host's build cache, checked (the server user must reach the binaries in it)."""
    return host.build_cache(host.ids(exp.user)[0], create=create)


def _planned(specs: list[BuildSpec], host: Host, root: Path | None) -> list[PlannedBuild]:
    out = []
    for spec in specs:
        key, found = host.find_build(root, spec) if root is not None else (None, None)
        out.append(PlannedBuild(spec, key, found,
                                found.seconds if found else BUILD_SECONDS_GUESS))  # fmt: skip
    return out


def stand_ins(exp: Experiment, dry: str, host: Host) -> dict[BuildSpec, PreparedBuild]:
    """Each build as `plan --commands` walks its trials, nothing fetched or compiled: one
    in the cache with its own binaries and catalog; one not built yet at the cache entry
    it will have (`dry` standing for a key not known before its source is fetched), with
    the version and catalog of [server]'s binaries (its own are known once it is built).
    What `run` refuses (a cache the server user cannot reach), the dry run refuses."""
    out: dict[BuildSpec, PreparedBuild] = {}
    specs = needed(exp)
    if not specs:
        return out  # no [build]: the cache is not looked at
    unknown = 0  # builds whose key is not known before their source is fetched
    root = _cache(exp, host, create=False)
    for p in _planned(specs, host, root):
        if p.found is not None:
            own = _inspect(p.found.bindir, exp)
            out[p.spec] = PreparedBuild(p.spec, p.found, own, dict(exp.canonical))
            continue
        unknown += p.key is None
        key = p.key or (dry if unknown == 1 else f"{dry}-{unknown}")
        build = builds.Build(key, (root or builds.cache_root()) / key, p.spec,
                             p.spec.describe(), exp.binaries.version, "", p.seconds,
                             cached=False)  # fmt: skip
        out[p.spec] = PreparedBuild(p.spec, build, replace(exp.binaries, bindir=build.bindir),
                                    dict(exp.canonical))  # fmt: skip
    return out


def prepare(exp: Experiment, say: Callable[[str], None],
            host: Host) -> dict[BuildSpec, PreparedBuild]:  # fmt: skip
    """Make (or find) every build on the server's host, then check the server settings
    against each one's catalog. A build that fails fails only its configurations (its
    PreparedBuild says why); PgsweepError (exit 2) for a setting a build lacks or rejects."""
    specs = needed(exp)
    if not specs:
        return {}
    root = _cache(exp, host, create=True)
    assert root is not None
    out: dict[BuildSpec, PreparedBuild] = {}
    with stopped_by_signals():
        for n, spec in enumerate(specs, 1):
            out[spec] = _one(host, root, spec, f"build {n}/{len(specs)}", say)
        say(_client_line(exp))
        for prepared in out.values():
            if prepared.build is not None:
                prepared.binaries = _inspect(prepared.build.bindir, exp)
                prepared.canonical = check_settings(exp, prepared, host)
    return out


def copied(made: Mapping[BuildSpec, PreparedBuild], host: Host, user: RunAs | None,
           say: Callable[[str], None]) -> dict[BuildSpec, PreparedBuild]:  # fmt: skip
    """The builds made here as the server's host runs them: a server on another host has
    each copied into its own build cache (host.copy_build), its binaries there the same
    version and catalog as checked here; a build that failed stays failed."""
    out: dict[BuildSpec, PreparedBuild] = {}
    uid = host.ids(user)[0]
    for n, (spec, prepared) in enumerate(made.items(), 1):
        if prepared.build is None or prepared.binaries is None:
            out[spec] = prepared
            continue
        there = host.copy_build(prepared.build, uid, partial(_labelled, say, f"build {n}"))
        out[spec] = replace(prepared, build=there,
                            binaries=replace(prepared.binaries, bindir=there.bindir))
    return out


def _labelled(say: Callable[[str], None], label: str, text: str) -> None:
    say(f"{label}: {text}")


def _inspect(bindir: Path, exp: Experiment) -> pgbin.Binaries:
    """A build's own binaries: their version and catalog (read on this machine)."""
    with tempfile.TemporaryDirectory(prefix="pgsweep-build-") as tmp:
        return pgbin.inspect(bindir, Path(tmp), exp.user)


def _client_line(exp: Experiment) -> str:
    if any(s["build"].pgbench == "own" for s in exp.configurations.values()):
        return "client: each build runs its own pgbench (build.pgbench = own)"
    return (f"client: every configuration runs {exp.binaries.path('pgbench')} (the installed "
            "one), so a faster client never passes for a faster server")  # fmt: skip


def _one(host: Host, root: Path, spec: BuildSpec, label: str,
         say: Callable[[str], None]) -> PreparedBuild:  # fmt: skip
    prepared = PreparedBuild(spec)
    try:
        build, cached = host.make_build(root, spec, lambda s: say(f"{label}: {s}"))
        prepared.build = build
        if cached:
            say(f"{label}: {spec.describe()}: cached ({build.key}), nothing to compile")
        else:
            say(f"{label}: built in {build.seconds:.0f} s ({build.version})")
    except (builds.BuildError, sources.SourceError) as exc:
        prepared.failure = str(exc)
        prepared.log_tail = exc.tail() if isinstance(exc, builds.BuildError) else ""
        where = f"; log: {exc.log}" if exc.log else ""
        say(f"{label}: FAILED: {exc}{where} (its configurations fail, the others run)")
    return prepared


def check_settings(exp: Experiment, prepared: PreparedBuild,
                   host: Host) -> dict[str, dict[str, str]]:  # fmt: skip
    """The server layer's checks against this build's catalog, and the os layer's shared
    memory sizes from this build's server (huge pages, memory limit); what each level
    means to it."""
    assert prepared.binaries is not None
    server = exp.layer("server")
    mine = {f.key: list(f.levels) for f in exp.factors if f.layer == "server"}
    base = {k: v for k, v in exp.base.get("server", {}).items() if k not in mine}
    configs = [c for c in exp.configurations.values() if c["build"].spec == prepared.spec]
    with pgbin.ValueChecker(prepared.binaries, exp.user) as checker:
        ctx = ValidationContext(exp.source, prepared.binaries, checker, exp.user, host=host)
        try:
            server.validate(base, mine, ctx)
            exp.layer("os").check_configurations(configs, ctx)
            start_each(configs, ctx)
        except PgsweepError as exc:
            raise PgsweepError(
                f"{exc.what} (the build {prepared.spec.describe()}, "
                f"{prepared.build.key if prepared.build else ''})",
                where=exc.where, expected=exc.expected,
                fix=exc.fix or "drop the setting, or the build that lacks it",
            ) from None  # fmt: skip
        canonical: dict[str, dict[str, str]] = {}
        for (name, text), value in [*checker.answers().items(), *ctx.shown.items()]:
            canonical.setdefault(name, {})[text] = value
    return canonical
