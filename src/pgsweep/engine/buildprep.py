"""Builds, before the first trial: every build the experiment's configurations need is
found in the cache or compiled (host/builds.py), then the server settings are checked
against each build's own catalog. A build that fails fails only the configurations that
need it (their trials carry its log tail); a setting one build lacks is exit 2 naming it."""

from __future__ import annotations

import hashlib
import os
import stat
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from ..errors import PgsweepError
from ..host import builds, sources
from ..host.builds import BuildSpec
from ..host.local import LOCAL
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
    cached: bool
    seconds: float  # how long it took, or the guess


def needed(exp: Experiment) -> list[BuildSpec]:
    """The distinct builds of the experiment's configurations, in first-use order."""
    out: list[BuildSpec] = []
    for settings in exp.configurations.values():
        spec = settings["build"].spec if "build" in settings else None
        if spec is not None and spec not in out:
            out.append(spec)
    return out


def planned(exp: Experiment) -> list[PlannedBuild]:
    """What `run` will build, for `plan`: read-only (nothing is fetched or compiled)."""
    specs = needed(exp)
    if not specs:
        return []
    root = builds.open_cache(create=False)
    with tempfile.TemporaryDirectory(prefix="pgsweep-build-") as tmp:
        scratch = Path(tmp)
        compiler = builds.compiler_version(scratch)
        out = []
        for spec in specs:
            key, found = None, None
            if root is not None:
                try:
                    pinned = sources.resolve(spec.source, spec.ref, root, scratch, fetch=False)
                    key = builds.build_key(pinned, spec, compiler)
                    found = builds.lookup(root, key)
                except sources.SourceError:
                    pass
            out.append(PlannedBuild(spec, key, found is not None,
                                    found.seconds if found else BUILD_SECONDS_GUESS))  # fmt: skip
    return out


def stand_ins(exp: Experiment, dry: str) -> dict[BuildSpec, PreparedBuild]:
    """Each build as `plan --commands` walks its trials, nothing fetched or compiled: one
    in the cache with its own binaries and catalog; one not built yet at the cache entry
    it will have (`dry` standing for a key not known before its source is fetched), with
    the version and catalog of [server]'s binaries (its own are known once it is built)."""
    if not needed(exp):
        return {}
    root = builds.open_cache(create=False)
    if root is not None:
        _check_reachable(root, exp)  # what `run` refuses, the dry run refuses (exit 2)
    root = root or builds.cache_root()
    out: dict[BuildSpec, PreparedBuild] = {}
    unknown = 0  # builds whose key is not known before their source is fetched
    with tempfile.TemporaryDirectory(prefix="pgsweep-build-") as tmp:
        for p in planned(exp):
            found = builds.lookup(root, p.key) if p.cached and p.key else None
            if found is not None:
                own = pgbin.inspect(found.bindir, Path(tmp), exp.user)
                out[p.spec] = PreparedBuild(p.spec, found, own, dict(exp.canonical))
                continue
            unknown += p.key is None
            key = p.key or (dry if unknown == 1 else f"{dry}-{unknown}")
            build = builds.Build(key, root / key, p.spec, p.spec.describe(),
                                 exp.binaries.version, "", p.seconds, cached=False)  # fmt: skip
            out[p.spec] = PreparedBuild(p.spec, build, replace(exp.binaries, bindir=build.bindir),
                                        dict(exp.canonical))  # fmt: skip
    return out


def prepare(exp: Experiment, say: Callable[[str], None]) -> dict[BuildSpec, PreparedBuild]:
    """Make (or find) every build, then check the server settings against each one's
    catalog. PgsweepError (exit 2) for a setting a build lacks or rejects."""
    specs = needed(exp)
    if not specs:
        return {}
    root = builds.open_cache()
    assert root is not None
    _check_reachable(root, exp)
    out: dict[BuildSpec, PreparedBuild] = {}

    with stopped_by_signals(), tempfile.TemporaryDirectory(prefix="pgsweep-build-") as tmp:
        scratch = Path(tmp)
        compiler = builds.compiler_version(scratch)
        for n, spec in enumerate(specs, 1):
            out[spec] = _one(spec, root, scratch, compiler, f"build {n}/{len(specs)}", say)
        say(_client_line(exp))
        for prepared in out.values():
            if prepared.build is not None:
                prepared.binaries = pgbin.inspect(prepared.build.bindir, scratch, exp.user)
                prepared.canonical = check_settings(exp, prepared)
    return out


def _check_reachable(root: Path, exp: Experiment) -> None:
    """The server user runs the builds' binaries: every folder above them must let it pass."""
    uid = exp.user.uid if exp.user is not None else os.geteuid()
    if uid == 0:
        return
    for d in [root, *root.parents]:
        st = os.stat(d)
        if st.st_uid != uid and not st.st_mode & stat.S_IXOTH:
            raise PgsweepError(
                f"the build cache {root} is out of the server user's reach: {d} is "
                f"{stat.filemode(st.st_mode)}, and the server runs the builds' binaries",
                where="PGSWEEP_CACHE_DIR" if os.environ.get("PGSWEEP_CACHE_DIR") else None,
                fix="choose a cache folder every folder above which others may pass (0755)",
            )  # fmt: skip


def _client_line(exp: Experiment) -> str:
    if any(s["build"].pgbench == "own" for s in exp.configurations.values()):
        return "client: each build runs its own pgbench (build.pgbench = own)"
    return (f"client: every configuration runs {exp.binaries.path('pgbench')} (the installed "
            "one), so a faster client never passes for a faster server")  # fmt: skip


def _one(spec: BuildSpec, root: Path, scratch: Path, compiler: str, label: str,
         say: Callable[[str], None]) -> PreparedBuild:  # fmt: skip
    prepared = PreparedBuild(spec)
    try:
        with builds.locked(root, "source-" + hashlib.sha256(spec.source.encode()).hexdigest()[:12]):
            try:
                pinned = sources.resolve(spec.source, spec.ref, root, scratch, fetch=False)
            except sources.SourceError:
                if sources.kind_of(spec.source) != "apt":
                    raise
                say(f"{label}: fetching the source of {spec.source[4:]} with apt-get")
                pinned = sources.resolve(spec.source, spec.ref, root, scratch)  # fetched once
        key = builds.build_key(pinned, spec, compiler)

        def make() -> builds.Build:
            say(f"{label}: {spec.describe()}: compiling into {root / key}")
            return builds.compile_build(root, key, spec, pinned, lambda s: say(f"{label}: {s}"))

        # the shared lock stays held while this process lives: prune leaves the build alone
        build, prepared.lock_fd, cached = builds.acquire(root, key, make)
        prepared.build = build
        if cached:
            say(f"{label}: {spec.describe()}: cached ({key}), nothing to compile")
            builds.touch(build)
        else:
            say(f"{label}: built in {build.seconds:.0f} s ({build.version})")
    except (builds.BuildError, sources.SourceError) as exc:
        prepared.failure = str(exc)
        prepared.log_tail = exc.tail() if isinstance(exc, builds.BuildError) else ""
        where = f"; log: {exc.log}" if exc.log else ""
        say(f"{label}: FAILED: {exc}{where} (its configurations fail, the others run)")
    return prepared


def check_settings(exp: Experiment, prepared: PreparedBuild) -> dict[str, dict[str, str]]:
    """The server layer's checks against this build's catalog, and the os layer's shared
    memory sizes from this build's server (huge pages, memory limit); what each level
    means to it."""
    assert prepared.binaries is not None
    server = exp.layer("server")
    mine = {f.key: list(f.levels) for f in exp.factors if f.layer == "server"}
    base = {k: v for k, v in exp.base.get("server", {}).items() if k not in mine}
    configs = [c for c in exp.configurations.values() if c["build"].spec == prepared.spec]
    with pgbin.ValueChecker(prepared.binaries, exp.user) as checker:
        ctx = ValidationContext(exp.source, prepared.binaries, checker, exp.user, host=LOCAL)
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
