"""The experiment file: one TOML file, validated whole before anything runs.

Each layer is a table of base values; `[factors]` mirrors those tables with lists of
levels. Fixed tables are pydantic models; layers validate their own keys (the server layer
against PostgreSQL's own catalog). Every error names the file, the key and its line."""

from __future__ import annotations

import itertools
import math
import os
import re
import secrets
import tempfile
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core import Cost, Value
from ..errors import PgsweepError
from ..host.blockdev import Grant
from ..host.proc import RunAs
from ..layers import all_layers
from ..layers.base import Layer, Source, ValidationContext
from ..layers.workload_tools import check_remote_client
from ..plan import Adaptive, Shard
from ..postgres import binaries as pgbin
from . import hosts
from .tables import (
    FIXED_TABLES,
    ReportTable,
    adaptive_rounds,
    cpu_profile_seconds,
    fixed_table,
    rebuild_policy,
)
from .text import check_text
from .users import default_user as default_user  # bench/ calls spec.default_user
from .users import resolve_user

PLACES = ("factors", "hosts", "roles")  # tables of no layer: the factorial, where roles run


@dataclass(frozen=True)
class Factor:
    layer: str
    key: str
    levels: tuple[Value, ...]

    @property
    def name(self) -> str:
        return f"{self.layer}.{self.key}"


@dataclass
class Experiment:
    source: Source
    name: str
    seed: int
    seed_given: bool
    rounds: int
    rebuild: str
    base: dict[str, dict[str, Value]]  # layer -> key -> validated base value
    factors: list[Factor]
    layers: list[Layer]
    binaries: pgbin.Binaries
    user: RunAs | None
    # server setting -> level text -> what pg_settings shows for it (startcheck.DERIVED: a
    # value the server derives), else its base-unit value from `postgres -C`
    canonical: dict[str, dict[str, str]]
    # levels of every factor (file order) -> every layer's typed settings
    configurations: dict[tuple[Value, ...], dict[str, Any]]
    grant: Grant = field(default_factory=Grant)  # devices --allow-device named, and --wipe
    adaptive: Adaptive | None = None  # rounds = "auto": `rounds` is then the maximum
    pseudo_costs: dict[str, Cost] = field(default_factory=dict)  # factors of no layer (run.against)
    against: Path | None = None  # `run --against DIR`: the results folder measured again
    against_text: str = ""  # its frozen experiment file, as validated
    # builds made before the first trial (engine/buildprep.py): BuildSpec -> PreparedBuild
    builds: dict[Any, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # what runs otherwise than written
    topology: hosts.Topology = field(default_factory=hosts.Topology)  # [hosts], [roles]
    shard: Shard | None = None  # `run --shard K/N`: this run is group K of a fleet of N
    group: str = ""  # the name of that group (`run --group`; default "shardK")
    hosts_may_differ: tuple[str, ...] = ()  # host facts a fleet's groups may differ in
    cpu_profile_s: int = 0  # [experiment] cpu_profile: a perf window after round 1's trials
    io_latency_s: int = 0  # [experiment] io_latency: block requests timed in that window

    def layer(self, name: str) -> Layer:
        return next(layer for layer in self.layers if layer.name == name)

    def settings(self, levels: dict[str, Value]) -> dict[str, Any]:
        """Every layer's typed settings for the configuration with these levels."""
        return self.configurations[tuple(levels[f.name] for f in self.factors)]


def _factors(source: Source, doc: dict[str, Any], layer_names: list[str]) -> list[Factor]:
    table = doc.get("factors", {})
    if not isinstance(table, dict):
        raise source.error(("factors",), "[factors] must be a table of layer.key = [levels]")
    factors = []
    for layer, keys in table.items():
        if layer not in layer_names:
            raise source.error(
                ("factors", layer),
                f"no layer named {layer!r}",
                expected=f"factors named layer.key, layer one of {', '.join(layer_names)}",
                fix='write e.g. server.shared_buffers = ["128MB", "1GB"]',
            )
        if not isinstance(keys, dict):
            raise source.error(
                ("factors", layer),
                f"factors.{layer} must name a key",
                fix=f"write {layer}.KEY = [level, level]",
            )
        for parts, levels in _flatten(keys):
            key, path = ".".join(parts), ("factors", layer, *parts)
            if not isinstance(levels, list):
                raise source.error(
                    path,
                    "a factor's levels must be a list",
                    fix=f"write {layer}.{key} = [level1, level2]",
                )
            if not levels:
                raise source.error(
                    path,
                    "a factor needs at least one level, and this list is empty",
                    fix="list the levels to compare, or remove the factor",
                )
            if len({repr(v) for v in levels}) != len(levels):
                raise source.error(path, "a level is listed twice", fix="remove the duplicate")
            factors.append(Factor(layer, key, tuple(levels)))
    return factors


def _configurations(
    base: dict[str, dict[str, Value]], factors: list[Factor], layers: list[Layer]
) -> dict[tuple[Value, ...], dict[str, Any]]:
    """Every configuration's typed settings of every layer (the full factorial over the
    base), keyed by its levels in factor order."""
    out = {}
    for combo in itertools.product(*(f.levels for f in factors)):
        values = {layer: dict(keys) for layer, keys in base.items()}
        for f, level in zip(factors, combo, strict=True):
            values[f.layer][f.key] = level
        out[combo] = {layer.name: layer.settings(values[layer.name]) for layer in layers}
    return out


def _flatten(keys: dict[str, Any]) -> list[tuple[tuple[str, ...], Any]]:
    """os.sysctl."vm.swappiness" = [...] nests one table deeper: its key becomes
    "sysctl.vm.swappiness" (the TOML path is kept for error lines)."""
    out: list[tuple[tuple[str, ...], Any]] = []
    for key, levels in keys.items():
        if isinstance(levels, dict):
            out += [((key, sub), lv) for sub, lv in levels.items()]
        else:
            out.append(((key,), levels))
    return out


def _check_root(
    source: Source, doc: dict[str, Any], factors: list[Factor], layers: list[Layer]
) -> None:
    """Without root, every key of a layer that changes the machine is refused in one error
    that lists them all (a DBA on a laptop sees at once what to take out)."""
    if os.geteuid() == 0:
        return
    rooted = [layer.name for layer in layers if layer.needs_root]
    keys = [f"{name}.{'.'.join(parts)}" for name in rooted
            for parts, value in _flatten(doc.get(name) or {})
            if (name, parts, value) != ("os", ("drop_caches",), "never")]  # fmt: skip
    keys += [f"{f.layer}.{f.key}" for f in factors if f.layer in rooted]
    if keys:
        table = [name for name in rooted if name in doc]
        where = (table[0],) if table else ("factors", keys[0].split(".")[0])
        raise source.error(
            where,
            f"these factors and settings change the machine and need root: "
            f"{', '.join(sorted(set(keys)))}",
            fix="run pgsweep as root (sudo), or remove them to run as yourself",
        )


# Beyond these a plan is a mistake, not an experiment: 10,000 configurations of a 10 s
# trial is a day per round.
MAX_CONFIGURATIONS = 10_000
MAX_TRIALS = 100_000


def _check_size(source: Source, factors: list[Factor], rounds: int) -> None:
    count = math.prod(len(f.levels) for f in factors)
    if count > MAX_CONFIGURATIONS or count * rounds > MAX_TRIALS:
        raise source.error(
            ("factors",),
            f"the full factorial has {count:,} configurations, {count * rounds:,} trials "
            f"with {rounds} rounds (pgsweep runs at most {MAX_CONFIGURATIONS:,} "
            f"configurations and {MAX_TRIALS:,} trials)",
            fix="fewer factors or levels; split the question into smaller experiments",
        )


def _same_meaning(source: Source, factors: list[Factor], layers: list[Layer]) -> None:
    """Two levels of one factor that mean the same ("1GB" and "1024MB") are refused."""
    by_name = {layer.name: layer for layer in layers}
    for f in factors:
        seen: dict[object, Value] = {}
        for level in f.levels:
            meaning = by_name[f.layer].level_identity(f.key, level)
            if meaning in seen:
                raise source.error(
                    ("factors", f.layer, *f.key.split(".", 1)),
                    f"the levels {seen[meaning]!r} and {level!r} mean the same {f.name}",
                    fix="keep one of them",
                )  # fmt: skip
            seen[meaning] = level


def read_source(path: Path) -> tuple[Source, dict[str, Any]]:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise PgsweepError(
            f"cannot read the experiment file: {exc.strerror}",
            where=str(path),
            fix="check the path",
        ) from None
    try:
        text = raw.decode()  # TOML is UTF-8, whatever the locale says
    except UnicodeDecodeError as exc:  # e.g. an encoded surrogate: no character at all
        line = raw[: exc.start].count(b"\n") + 1
        raise PgsweepError(
            f"byte {exc.start + 1} is not UTF-8 ({exc.reason})", where=f"{path}:{line}",
            expected="a UTF-8 text file", fix="save the file as UTF-8",
        ) from None  # fmt: skip
    source = Source(path, text)
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise PgsweepError(
            f"not valid TOML: {exc}",
            where=str(path),
            fix="fix the syntax at that line (strings need quotes)",
        ) from None
    return source, doc


def _check_baseline(source: Source, report: ReportTable, factors: list[Factor]) -> None:
    levels = {f.name: [str(v) for v in f.levels] for f in factors}
    for name, value in report.baseline.items():
        if name not in levels:
            raise source.error(
                ("report", "baseline"),
                f"the baseline names {name!r}, which is not a factor",
                expected=f"factor names: {', '.join(levels) or '(none)'}",
                fix="name a factor from [factors]",
            )
        if str(value) not in levels[name]:
            raise source.error(
                ("report", "baseline"),
                f"the baseline level {value!r} is not a level of {name}",
                expected=f"one of {', '.join(levels[name])}",
                fix="pick one of the factor's levels",
            )


def parse_margin(text: str, where: str) -> float:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)%", text.strip())
    if not m:
        raise PgsweepError(
            f"{where} {text!r} is not a percentage",
            where=where,
            expected='a percentage such as "2%"',
            fix=f"write e.g. {where} 2%",
        )
    return float(m.group(1)) / 100


def check_adaptive(exp: Experiment) -> None:
    """rounds = "auto" needs something to decide: at least two configurations (checked
    after `run --against` has added its factor)."""
    if exp.adaptive and len(exp.configurations) < 2:
        raise exp.source.error(
            ("repeat", "rounds"),
            'rounds = "auto" needs a factor: with one configuration there is nothing to decide',
            fix="add a factor under [factors], or give a number of rounds",
        )


def report_options(text: str) -> ReportTable:
    """The [report] table of an experiment file already validated by `load`."""
    return ReportTable.model_validate(tomllib.loads(text).get("report", {}))


def server_bindir(path: Path) -> Path:
    """The PostgreSQL binaries an experiment file runs, read without checking the rest of
    the file (`pgsweep facts` on a fleet's host, before dispatch)."""
    source, doc = read_source(path)
    pg = fixed_table(source, doc, "postgres")
    return pgbin.locate(pg.bin, where=source.where("postgres", "bin"))


def load(path: Path) -> Experiment:
    """Read and validate an experiment file. Changes nothing on the machine."""
    source, doc = read_source(path)
    layers = all_layers()
    names = [layer.name for layer in layers]
    for table in doc:
        if table not in FIXED_TABLES and table not in names and table not in PLACES:
            raise source.error(
                (table,),
                f"unknown table [{table}]",
                expected=f"one of {', '.join([*FIXED_TABLES, *names, *PLACES])}",
            )
    if "experiment" not in doc:
        raise PgsweepError(
            "the file has no [experiment] table",
            where=str(path),
            fix='add [experiment] with name = "my-experiment"',
        )
    check_text(source, doc)
    exp, pg, rep, report = (fixed_table(source, doc, t) for t in FIXED_TABLES)
    topo = hosts.topology(source, doc)
    factors = _factors(source, doc, names)
    hosts.check_remote_server(source, doc, topo)
    adaptive = adaptive_rounds(source, doc, rep, math.prod(len(f.levels) for f in factors))
    rounds = (adaptive.max_rounds or adaptive.min_rounds) if adaptive else int(rep.rounds or 3)
    _check_size(source, factors, rounds)
    _check_baseline(source, report, factors)
    if not topo.remote_server:  # else its agent's, checked root when it is reached
        _check_root(source, doc, factors, layers)
    user = resolve_user(pg.user, source)
    bindir = pgbin.locate(pg.bin, where=source.where("postgres", "bin"))
    with tempfile.TemporaryDirectory(prefix="pgsweep-inspect-") as scratch:
        binaries = pgbin.inspect(bindir, Path(scratch), user)
    base: dict[str, dict[str, Value]] = {}
    with pgbin.ValueChecker(binaries, user) as checker, hosts.asked(source, doc, topo) as host:
        ctx = ValidationContext(source, binaries, checker, user, host=host)
        for layer in layers:
            table = doc.get(layer.name, {})
            if not isinstance(table, dict):
                raise source.error((layer.name,), f"[{layer.name}] must be a table")
            mine = {f.key: list(f.levels) for f in factors if f.layer == layer.name}
            base[layer.name] = layer.validate(table, mine, ctx)
        by_name = {layer.name: layer for layer in layers}
        factors = [Factor(f.layer, by_name[f.layer].canonical_key(f.key), f.levels)
                   for f in factors]  # fmt: skip
        _same_meaning(source, factors, layers)
        configs = _configurations(base, factors, layers)
        hosts.check_standbys(source, topo, list(configs.values()))
        check_remote_client(source, list(configs.values()), topo.remote or topo.remote_server)
        for layer in layers:
            layer.check_configurations(list(configs.values()), ctx)
        canonical: dict[str, dict[str, str]] = {}
        for (name, text), value in [*checker.answers().items(), *ctx.shown.items()]:
            canonical.setdefault(name, {})[text] = value  # as the started server shows it
    seed = exp.seed if exp.seed is not None else secrets.randbelow(2**31)
    out = Experiment(
        source,
        exp.name,
        seed,
        exp.seed is not None,
        rounds,
        rebuild_policy(rep),
        base,
        factors,
        layers,
        binaries,
        user,
        canonical,
        configs,
        adaptive=adaptive,
        notes=[*ctx.notes, *topo.notes],
        topology=topo,
        hosts_may_differ=tuple(exp.hosts_may_differ),
        cpu_profile_s=cpu_profile_seconds(source, exp.cpu_profile, str(base["workload"]["tool"])),
        io_latency_s=cpu_profile_seconds(
            source, exp.io_latency, str(base["workload"]["tool"]), "io_latency"
        ),
    )
    if adaptive is not None and not adaptive.max_rounds:  # settled from the noise and budget
        from .rounds import settle_max_rounds

        settle_max_rounds(out)
        _check_size(source, factors, out.rounds)
    return out
