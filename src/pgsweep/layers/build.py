"""The `build` layer: PostgreSQL compiled from source, cached per option set (host/builds.py).

Builds are made before the first trial (engine/buildprep.py); at trial time a build is a
resource like a filesystem: clusters are keyed by it and run its binaries. A configuration
with `source = "installed"` (the default) runs the installed PostgreSQL (postgres.bin)."""

from __future__ import annotations

import difflib
import re
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..core import Cost, Value
from ..errors import PgsweepError
from ..host import sources
from ..host.api import Host
from ..host.blockdev import Grant
from ..host.builds import Build, BuildSpec
from ..postgres.binaries import Binaries
from .base import ResourceLayer, ValidationContext, check_table
from .context import RunContext, TrialContext, TrialFailure

INSTALLED = "installed"
WAL_BLOCKSIZES = (1, 2, 4, 8, 16, 32, 64)
BLOCKSIZES = (1, 2, 4, 8, 16, 32)
# configure options: --enable-X, --disable-X, --with-X, --without-X, a value without paths
CONFIGURE = re.compile(
    r"^--(enable|disable|with|without)-([a-z0-9][a-z0-9-]*)(=[A-Za-z0-9_.,+:-]*)?$"
)
OWN_KEYS = {"wal-blocksize": "wal_blocksize", "blocksize": "blocksize", "segsize": "segsize",
            "debug": "debug"}  # fmt: skip
# options that name paths, or change where things are installed
PATH_OPTIONS = {"includes", "libraries", "libs", "system-tzdata", "extra-version", "tclconfig",
                "template", "pgport"}  # fmt: skip
CFLAG = re.compile(r"^-(O[0-3sgz]?|g[0-3]?|pipe|D[A-Za-z_][A-Za-z0-9_]*(=[A-Za-z0-9_.]*)?|"
                   r"U[A-Za-z_][A-Za-z0-9_]*|W[a-z0-9=-]+|march=[a-z0-9.-]+|mtune=[a-z0-9.-]+|"
                   r"f[a-z0-9-]+(=[a-z0-9.-]+)?|m[a-z0-9-]+)$")  # fmt: skip
BAD_CFLAGS = ("-fplugin", "-fpass-plugin", "-fprofile", "-fdump", "-fauto-profile",
              "-fdebug-prefix", "-fmacro-prefix", "-ffile-prefix", "-fcallgraph-info",
              "-fstack-usage", "-fopt-info", "-flto-incremental", "-fsanitize-ignorelist",
              "-fsanitize-blacklist", "-fcoverage", "-ftest-coverage",
              "-DUSE_ASSERT_CHECKING")  # fmt: skip
BASE_ONLY = ("allow_cassert", "pgbench")


class BuildTable(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    source: str = Field(
        INSTALLED, description='"installed", "apt:postgresql-15", a tarball, a git tree'
    )
    ref: str | None = Field(None, description="with a git work tree: commit, tag or branch")
    wal_blocksize: int | None = Field(None, description="--with-wal-blocksize, kB")
    blocksize: int | None = Field(None, description="--with-blocksize, kB")
    segsize: int | None = Field(None, description="--with-segsize, GB")
    optimize: str | None = Field(None, description='-O level: "0", "1", "2", "3", "s", "g"')
    debug: bool = Field(False, description="--enable-debug")
    cflags: str = Field("", description="more CFLAGS (no paths)")
    configure: str = Field("", description="more configure options, space-separated")
    allow_cassert: bool = Field(False, description="allow --enable-cassert")
    pgbench: Literal["shared", "own"] = Field("shared", description="which pgbench runs")

    @field_validator("source")
    @classmethod
    def _source(cls, v: str) -> str:
        if v == INSTALLED:
            return v
        if not sources.kind_of(v):
            raise ValueError('"installed", "apt:postgresql-N", an absolute path to a release '
                             "tarball (.tar.gz, .tar.bz2, .tar.xz), a git work tree")  # fmt: skip
        if v.startswith("/"):
            why = sources.check_path(v)
            if why:
                raise ValueError(f"{v}: {why}")
        return v

    @field_validator("ref")
    @classmethod
    def _ref(cls, v: str | None) -> str | None:
        if v is not None and not sources.GIT_REF.fullmatch(v):
            raise ValueError("a commit, tag or branch name (letters, digits, ._/-)")
        return v

    @field_validator("wal_blocksize", "blocksize", "segsize")
    @classmethod
    def _sizes(cls, v: int | None, info: Any) -> int | None:
        allowed = {"wal_blocksize": WAL_BLOCKSIZES, "blocksize": BLOCKSIZES,
                   "segsize": (1, 2, 4, 8, 16, 32, 64)}[info.field_name]  # fmt: skip
        if v is not None and v not in allowed:
            raise ValueError(f"one of {', '.join(map(str, allowed))}")
        return v

    @field_validator("optimize")
    @classmethod
    def _optimize(cls, v: str | None) -> str | None:
        if v is not None and v not in ("0", "1", "2", "3", "s", "g"):
            raise ValueError('one of "0", "1", "2", "3", "s", "g" (the -O level)')
        return v

    @field_validator("cflags")
    @classmethod
    def _cflags(cls, v: str) -> str:
        for flag in v.split():
            if not CFLAG.fullmatch(flag) or flag.startswith(BAD_CFLAGS):
                raise ValueError(f"{flag!r} is not a compiler flag pgsweep passes (optimisation, "
                                 "-g, -D/-U macros, -W, -f and -m options; nothing that names "
                                 "a path or loads a plugin)")  # fmt: skip
        return " ".join(v.split())

    @field_validator("configure")
    @classmethod
    def _configure(cls, v: str) -> str:
        for opt in v.split():
            m = CONFIGURE.fullmatch(opt)
            if not m:
                raise ValueError(f"{opt!r}: configure options are --enable-X, --disable-X, "
                                 "--with-X[=VALUE], --without-X; no --prefix")  # fmt: skip
            if m.group(2) in OWN_KEYS and m.group(1) in ("with", "enable"):
                raise ValueError(f"{opt!r}: use build.{OWN_KEYS[m.group(2)]}")
            if m.group(2) in PATH_OPTIONS:
                raise ValueError(f"{opt!r} names a path or a version string pgsweep records "
                                 "itself")  # fmt: skip
        return " ".join(v.split())


@dataclass(frozen=True)
class BuildSettings:
    spec: BuildSpec | None  # None: the installed PostgreSQL
    pgbench: str  # shared | own
    wal_blocksize: int | None
    blocksize: int | None
    segsize: int | None


@dataclass
class PreparedBuild:
    """A build made (or found in the cache) before the first trial, or why it failed."""

    spec: BuildSpec
    build: Build | None = None
    binaries: Binaries | None = None
    canonical: dict[str, dict[str, str]] = field(default_factory=dict)
    failure: str = ""
    log_tail: str = ""


@dataclass(frozen=True)
class BuildResource:
    binaries: Binaries
    build: Build | None  # None: the installed PostgreSQL


def cassert(options: Sequence[str]) -> bool:
    return any(o.split("=")[0] == "--enable-cassert" for o in options)


def spec_of(values: Mapping[str, Value]) -> BuildSpec | None:
    if values.get("source", INSTALLED) == INSTALLED:
        return None
    opts = (
        [f"--with-wal-blocksize={values['wal_blocksize']}"] if values.get("wal_blocksize") else []
    )
    opts += [f"--with-blocksize={values['blocksize']}"] if values.get("blocksize") else []
    opts += [f"--with-segsize={values['segsize']}"] if values.get("segsize") else []
    opts += ["--enable-debug"] if values.get("debug") else []
    opts += str(values.get("configure") or "").split()
    cflags = " ".join(([f"-O{values['optimize']}"] if values.get("optimize") else [])
                      + ([str(values["cflags"])] if values.get("cflags") else []))  # fmt: skip
    return BuildSpec(str(values["source"]), values.get("ref"), tuple(opts), cflags)  # type: ignore[arg-type]


def _path(key: str, factors: Mapping[str, Any]) -> tuple[str, ...]:
    return ("factors", "build", key) if key in factors else ("build", key)


class BuildLayer(ResourceLayer):
    name = "build"
    acts_here = True

    def validate(
        self, base: dict[str, Any], factors: dict[str, list[Any]], ctx: ValidationContext
    ) -> dict[str, Value]:
        table = check_table(BuildTable, self.name, base, factors, ctx.source)
        for key in BASE_ONLY:
            if key in factors:
                raise ctx.source.error(("factors", "build", key), f"build.{key} cannot be a "
                                       "factor", fix="set it in [build]")  # fmt: skip
        sources_ = factors.get("source", [table.source])
        if all(s == INSTALLED for s in sources_):
            for key in [*base, *factors]:
                if key not in ("source", "pgbench"):
                    raise ctx.source.error(
                        _path(key, factors),
                        f"build.{key} needs build.source: the installed PostgreSQL is not built",
                        fix='set [build] source = "apt:postgresql-15" (or a tarball, a git tree)',
                    )  # fmt: skip
        ctx.catalog_deferred = INSTALLED not in sources_
        refs = factors.get("ref", [table.ref])
        gits = [s for s in sources_ if sources.kind_of(s) == "git"]
        if any(r is not None for r in refs) and len(gits) != len(sources_):
            raise ctx.source.error(_path("ref", factors),
                                   "build.ref needs every build.source to be a git work tree",
                                   fix="remove ref, or name a git work tree as source")  # fmt: skip
        opts = [table.configure, *factors.get("configure", [])]
        if any(cassert(str(o).split()) for o in opts) and not table.allow_cassert:
            raise ctx.source.error(
                _path("configure", factors),
                "--enable-cassert makes an assertion build: its numbers are not performance "
                "numbers",
                fix="set [build] allow_cassert = true to build it anyway (every report marks it)",
            )  # fmt: skip
        return dict(table.model_dump())

    def check_configurations(
        self, configs: Sequence[Mapping[str, Any]], ctx: ValidationContext
    ) -> None:
        """When every configuration runs a build, the server layer leaves names the
        installed catalog lacks to the builds' catalogs, which exist only once compiled.
        Builds of the installed major version (apt's package, a tarball's top folder, a git
        tree's configure.ac) share its catalog of names: a name it lacks is refused now,
        at `plan`, before anything is fetched or compiled."""
        if not ctx.catalog_deferred:
            return
        specs = {c[self.name].spec for c in configs if c[self.name].spec is not None}
        if any("-D" in s.cflags for s in specs):
            return  # a macro can add settings (-DLOCK_DEBUG: trace_locks): the builds decide
        majors = {sources.major_version(s.source, s.ref) for s in specs}
        if majors != {ctx.binaries.major}:
            return  # another version, or one not known before unpacking: the builds decide
        catalog = ctx.binaries.settings
        names = sorted({n for c in configs for n in c.get("server", {}) if n not in catalog})
        for name in names:
            if "." in name or ctx.checker.hidden(name) is not None:
                continue  # an extension's setting, or one settable though not described
            close = difflib.get_close_matches(name, list(catalog), n=3)
            raise ctx.source.error(
                ctx.where.get(f"server.{name}", ("server", name)),
                f"PostgreSQL {ctx.binaries.major} has no setting named {name!r} (every build "
                f"here is version {ctx.binaries.major}, as the installed binaries, without "
                f"macros that add settings: {'; '.join(sorted(s.describe() for s in specs))})",
                expected="a setting from the server's own catalog",
                fix=f"did you mean {' or '.join(close)}?" if close else "see `postgres "
                "--describe-config`",
            )  # fmt: skip

    def settings(self, values: dict[str, Value]) -> BuildSettings:
        if values.get("source", INSTALLED) == INSTALLED:  # the other keys describe builds
            return BuildSettings(None, str(values.get("pgbench", "shared")), None, None, None)
        return BuildSettings(spec_of(values), str(values.get("pgbench", "shared")),
                             values.get("wal_blocksize"), values.get("blocksize"),  # type: ignore[arg-type]
                             values.get("segsize"))  # type: ignore[arg-type]  # fmt: skip

    def level_identity(self, key: str, level: Value) -> object:
        if key in ("cflags", "configure") and isinstance(level, str):
            return " ".join(level.split())
        return repr(level)

    def cost(self, key: str) -> Cost:
        return Cost.BUILD

    def resource_key(self, settings: BuildSettings, config: Mapping[str, Any]) -> str:
        return settings.spec.describe() if settings.spec else INSTALLED

    def built_event(self, settings: Any) -> str | None:
        return None  # compiled before the first trial; at trial time nothing is made

    def coexist(self, configs: Sequence[Mapping[str, Any]], where: Any) -> str | None:
        return None

    def check_host(self, host: Host, where: Any, settings: list[BuildSettings],
                   grant: Grant | None = None) -> None:  # fmt: skip
        """The tools a build needs on this machine, where it is compiled (plan says so
        before anything is fetched)."""
        specs = [s.spec for s in settings if s.spec is not None]
        if not specs:
            return
        tools = ["cc", "make", "tar", "perl"]
        tools += ["git"] if any(sources.kind_of(s.source) == "git" for s in specs) else []
        tools += ["apt-get"] if any(sources.kind_of(s.source) == "apt" for s in specs) else []
        missing = [t for t in tools if shutil.which(t) is None]
        if missing:
            raise PgsweepError(
                f"building PostgreSQL needs {', '.join(missing)}, missing on this machine",
                where="[build] source",
                fix="apt-get install build-essential libreadline-dev zlib1g-dev git",
            )  # fmt: skip

    def build(self, settings: BuildSettings, config: Mapping[str, Any],
              below: Mapping[str, Any], run: RunContext) -> BuildResource:  # fmt: skip
        if settings.spec is None:
            return BuildResource(run.binaries, None)
        prepared = run.builds.get(settings.spec)
        if prepared is None or prepared.binaries is None or prepared.build is None:
            why = prepared.failure if prepared else "it was not made before the run"
            raise TrialFailure(f"the build {settings.spec.describe()} failed: {why}",
                               prepared.log_tail if prepared else "")  # fmt: skip
        return BuildResource(prepared.binaries, prepared.build)

    def destroy(self, resource: BuildResource, run: RunContext) -> None:
        """Builds stay in the cache for the next run (`pgsweep builds` prunes it)."""

    def verify(self, settings: BuildSettings, trial: TrialContext) -> None:
        """Record which build ran the trial, and check the block sizes it was built with."""
        res: BuildResource = trial.resources[self.name]
        build = res.build
        trial.effective["build.id"] = build.key if build else INSTALLED
        trial.effective["build.version"] = res.binaries.version  # "15.18", built or not
        if build:
            trial.effective["build.configure"] = build.configure_line
            trial.effective["build.source"] = build.source
        with trial.cluster.connect() as conn:
            for name in ("wal_block_size", "block_size", "segment_size", "debug_assertions"):
                row = conn.execute("SELECT current_setting(%s)", (name,)).fetchone()
                trial.effective[f"build.{name}"] = str(row[0]) if row else ""
        for key, name, unit in (("wal_blocksize", "wal_block_size", 1024),
                                ("blocksize", "block_size", 1024)):  # fmt: skip
            want = getattr(settings, key)
            got = trial.effective[f"build.{name}"]
            if want is not None and got != str(want * unit):
                raise TrialFailure(f"build.{key} = {want} but the server reports {name} = {got}")
