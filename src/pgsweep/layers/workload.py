"""The `workload` layer: which tool (pgbench, or sysbench), which script or test, how many
clients, for how long. Changing it costs nothing; it decides the command line of the
trial."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..core import Cost, Value
from ..host import safefs, userfile
from ..host.userfile import UserFileError
from ..postgres import pgbench, pgreplay, sysbench
from ..postgres.access import ROLE
from ..postgres.pgbench import Workload
from ..units import parse_duration
from . import workload_tools as tools
from .base import Layer, ValidationContext, check_table
from .context import Demand, RunContext, TrialContext, TrialFailure
from .workload_replay import ReplayLog, check_replay

MAX_TRIAL_S = 24 * 3600  # one trial's window (or warm-up): a day is already a plan to split
MAX_RATE = 10_000_000  # pgbench -R, transactions/s: far beyond any server

PGBENCH_TABLES = (
    "pgbench_accounts",
    "pgbench_branches",
    "pgbench_tellers",
    "pgbench_history",
    "pgbench_accounts_pkey",
    "pgbench_branches_pkey",
    "pgbench_tellers_pkey",
)


class WorkloadTable(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    tool: Literal["pgbench", "sysbench", "pgreplay"] = Field("pgbench",
                                                             description="the program")
    script: str = Field("tpcb-like", description="tpcb-like | simple-update | select-only | path")
    test: str | None = Field(None, description="sysbench: oltp_read_write (default), ...")
    tables: int = Field(1, ge=1, le=10_000, description="sysbench --tables")
    table_size: int = Field(10_000, ge=1, le=1_000_000_000, description="sysbench --table-size")
    replay: str | None = Field(None, description="pgreplay: the captured csvlog")
    replay_speed: int | float = Field(1.0, gt=0, le=1000, description="pgreplay -s")
    clients: int = Field(1, ge=1, le=10_000)
    jobs: int = Field(1, ge=1, le=1_000)
    duration: int | float | str = Field("30s")
    warmup: int | float | str = Field("10s")
    rate: int | float | None = Field(None, gt=0, description="pgbench -R, transactions/s")
    latency_limit: int | float | str | None = Field(None, description="pgbench -L")
    protocol: Literal["simple", "extended", "prepared"] = "simple"
    prewarm: bool = Field(False, description="pg_prewarm the pgbench relations after each start")
    latency_log: Literal["auto", "off"] | float = Field(
        "auto", description="per-transaction log: auto, off, or a fixed --sampling-rate"
    )
    max_tries: int = Field(1, ge=0, le=1_000_000, description="pgbench --max-tries (PG 15+)")
    explain: bool = Field(True, description="collect the explain figures over each window")
    standby_script: str | None = Field(None, description="read load on each standby")
    standby_clients: int = Field(1, ge=1, le=1_000, description="its pgbench -c, per standby")

    @field_validator("latency_log")
    @classmethod
    def _latency_log(cls, v: Any) -> Any:
        if isinstance(v, float | int) and not 0 < v <= 1:
            raise ValueError('"auto", "off", or a sampling rate above 0 and at most 1')
        return v

    @field_validator("duration", "warmup")
    @classmethod
    def _duration(cls, v: Any, info: Any) -> Any:
        least = 1 if info.field_name == "duration" else 0
        if not least <= parse_duration(v) <= MAX_TRIAL_S:
            raise ValueError(f"a duration from {least} s to {MAX_TRIAL_S // 3600} h")
        return v

    @field_validator("rate")
    @classmethod
    def _rate(cls, v: Any) -> Any:
        if v is not None and not (math.isfinite(v) and v <= MAX_RATE):
            raise ValueError(f"a finite rate above 0, at most {MAX_RATE:,} transactions/s")
        return v

    @field_validator("latency_limit")
    @classmethod
    def _latency(cls, v: Any) -> Any:
        if v is not None and not 0 < parse_duration(v, default_unit="ms") <= 3600:
            raise ValueError('a latency limit above 0 and at most 1 h, e.g. "50ms"')
        return v


def seconds(value: Value) -> int:
    return round(parse_duration(value))


@dataclass(frozen=True)
class WorkloadSettings:
    """One configuration's workload, typed: durations in seconds, the latency limit in ms."""

    script: str  # as written: a builtin name or a path relative to the experiment file
    clients: int
    jobs: int
    duration_s: int
    warmup_s: int
    rate: float | None
    latency_limit_ms: float | None
    protocol: str
    prewarm: bool
    latency_log: str | float  # "auto", "off" or a sampling rate
    max_tries: int
    writes: bool  # the script changes data: each trial starts from the snapshot
    explain: bool = True  # collect the explain figures (waits, CPU by process, devices)
    standby_script: str | None = None  # a read load on each standby during the window
    standby_clients: int = 1
    tool: str = "pgbench"  # or "sysbench": then test, tables and table_size are its own
    test: str | None = None
    tables: int = 1
    table_size: int = 10_000
    replay: str | None = None  # pgreplay: the log as written, its speed and its roles
    replay_speed: float = 1.0
    replay_roles: tuple[str, ...] = ()
    replay_bytes: int = 0  # the log's size, as frozen

    def sysbench(self) -> sysbench.Workload:
        assert self.test is not None, "validate gives sysbench its test"
        return sysbench.Workload(self.test, self.tables, self.table_size, self.clients,
                                 self.duration_s, self.rate)  # fmt: skip

    def replayed(self, log: Path) -> pgreplay.Replay:
        return pgreplay.Replay(str(log), self.replay_speed, self.duration_s)

    def pgbench(self, script_path: str) -> pgbench.Workload:
        return pgbench.Workload(
            script=script_path, clients=self.clients, jobs=self.jobs, seconds=self.duration_s,
            protocol=self.protocol, rate=self.rate, latency_limit_ms=self.latency_limit_ms,
            max_tries=self.max_tries,
        )  # fmt: skip

    def standby_pgbench(self, script_path: str) -> Workload:
        """The standbys' read load: as many seconds as the window; a query cancelled by a
        recovery conflict (SQLSTATE 40001) is retried until the window ends, and counted."""
        return pgbench.Workload(
            script=script_path, clients=self.standby_clients, jobs=1, seconds=self.duration_s,
            protocol=self.protocol, max_tries=0,
        )  # fmt: skip


class WorkloadLayer(Layer):
    name = "workload"

    def __init__(self) -> None:
        self.scripts: dict[str, tuple[Path, str]] = {}  # as written -> (resolved path, text)
        self.replays: dict[str, ReplayLog] = {}  # workload.replay as written -> its log

    def validate(
        self, base: dict[str, Any], factors: dict[str, list[Any]], ctx: ValidationContext
    ) -> dict[str, Value]:
        table = check_table(WorkloadTable, self.name, base, factors, ctx.source)
        for key in factors:  # other layers refusing a combination name the factor's line
            ctx.where[f"workload.{key}"] = ("factors", "workload", key)
        tools.check_keys(base, factors, table.tool, ctx.source)
        if table.tool == "sysbench":
            tools.require(ctx.source, "sysbench")
            tests: list[tuple[tuple[str, ...], str]]
            tests = [(("workload", "test"), table.test or tools.DEFAULT_TEST)]
            tests += [(("factors", "workload", "test"), t) for t in factors.get("test", [])]
            tools.check_tests(tests, ctx)
            tools.check_data(table.tool, ctx.source)
            return {**table.model_dump(), "test": table.test or tools.DEFAULT_TEST}
        if table.tool == "pgreplay":
            if table.replay is None:
                raise ctx.source.error(("workload", "tool"), "workload.tool is pgreplay, and "
                                       "workload.replay names no log",
                                       fix='set replay = "/abs/path/postgresql.csv"')  # fmt: skip
            self.replays.setdefault(table.replay, check_replay(table.replay, ctx))
            return dict(table.model_dump())
        scripts: list[tuple[tuple[str, ...], str]] = [(("workload", "script"), table.script)]
        scripts += [(("factors", "workload", "script"), s) for s in factors.get("script", [])]
        standby: list[tuple[tuple[str, ...], str | None]]
        standby = [(("workload", "standby_script"), table.standby_script)]
        standby += [(("factors", "workload", "standby_script"), s)
                    for s in factors.get("standby_script", [])]  # fmt: skip
        scripts += [(p, s) for p, s in standby if s is not None]
        for path, script in scripts:
            if script not in pgbench.BUILTIN_SCRIPTS and script not in self.scripts:
                self.scripts[script] = _read_script(ctx, path, script)
        for path, maybe in standby:
            if maybe is not None and ctx.binaries.major < 15:
                raise ctx.source.error(
                    path,
                    f"a standby read load needs pgbench 15 or newer (--max-tries); this is "
                    f"{ctx.binaries.version}",
                    fix="use PostgreSQL 15+, or remove standby_script",
                )
            custom = self.scripts[maybe][1] if maybe in self.scripts else None
            if maybe is not None and pgbench.writes(maybe, custom):
                raise ctx.source.error(path, f"the standby script {maybe!r} changes data, and "
                                       "a standby is read-only", expected="select-only or a "
                                       "custom script that only reads",
                                       fix="drop the writing statements")  # fmt: skip
        return dict(table.model_dump())

    def settings(self, values: dict[str, Value]) -> WorkloadSettings:
        if values["tool"] == "pgreplay":  # the log's span at its speed, no warm-up
            span = self.replays[str(values["replay"])].facts.seconds
            speed = float(values["replay_speed"])
            values = {**values, "duration": max(1, math.ceil(span / speed)), "warmup": 0}
        script = str(values["script"])
        custom = self.scripts[script][1] if script in self.scripts else None
        limit, rate, log = values.get("latency_limit"), values.get("rate"), values["latency_log"]
        return WorkloadSettings(
            script=script, clients=int(values["clients"]), jobs=int(values["jobs"]),
            duration_s=seconds(values["duration"]), warmup_s=seconds(values["warmup"]),
            rate=float(rate) if rate is not None else None,
            latency_limit_ms=parse_duration(limit, default_unit="ms") * 1000 if limit else None,
            protocol=str(values["protocol"]), prewarm=bool(values["prewarm"]),
            latency_log=log if isinstance(log, float) else str(log),
            max_tries=int(values["max_tries"]), writes=_writes(values, script, custom),
            explain=bool(values["explain"]),
            standby_script=str(values["standby_script"]) if values.get("standby_script") else None,
            standby_clients=int(values["standby_clients"]), tool=str(values["tool"]),
            test=str(values["test"]) if values.get("test") else None,
            tables=int(values["tables"]), table_size=int(values["table_size"]),
            replay=str(values["replay"]) if values.get("replay") else None,
            replay_speed=float(values["replay_speed"]),
            replay_roles=tuple(u for u in self.replays[str(values["replay"])].facts.users
                               if u != ROLE) if values.get("replay") else (),
            replay_bytes=len(self.replays[str(values["replay"])].text.encode())
            if values.get("replay") else 0,
        )  # fmt: skip

    def check_configurations(self, configs: Sequence[Mapping[str, Any]],
                             ctx: ValidationContext) -> None:  # fmt: skip
        ctx.notes += tools.replay_notes(configs)

    def level_identity(self, key: str, level: Value) -> object:
        if key in ("duration", "warmup"):
            return parse_duration(level)
        if key == "latency_limit":
            return parse_duration(level, default_unit="ms")
        if key == "replay_speed":
            return float(level)
        return repr(level)

    def cost(self, key: str) -> Cost:
        return Cost.NOTHING

    def record_inputs(self, results: Path) -> None:
        """Copy custom scripts next to the results (the text validated, not the file as it
        is now), so the run and the record use one text."""
        into = results / "scripts"
        into.mkdir(mode=0o700, exist_ok=True)  # private, as the whole results folder
        for i, (src, text) in enumerate(self.scripts.values()):
            safefs.write_file(into / f"{i}-{src.name}", text, 0o600)
        for i, log in enumerate(self.replays.values()):  # the replayed log, as validated
            safefs.write_file(into / f"replay-{i}-{log.path.name}", log.text, 0o600)

    def start_run(self, run: RunContext) -> None:
        """The copies pgbench reads: numbered (two scripts may share a name), in a
        root-owned directory, readable by the server user only."""
        if not self.scripts and not self.replays:
            return
        folder = run.workdir / "scripts"
        frozen_of = _frozen(run)  # as written -> the copy on this run's host
        run.host.private_dir_once(folder, 0o711)
        for i, (script, (src, text)) in enumerate(self.scripts.items()):
            frozen = folder / f"{i}-{src.name}"
            run.host.write_file(frozen, text, 0o400, run.host.ids(run.user))
            frozen_of[script] = frozen
        for i, (replay, log) in enumerate(self.replays.items()):  # pgreplay reads its copy
            frozen = folder / f"replay-{i}-{log.path.name}"
            run.host.write_file(frozen, log.text, 0o400, run.host.ids(run.user))
            frozen_of[replay] = frozen


    def prepare(self, settings: WorkloadSettings, trial: TrialContext) -> Demand:
        frozen = _frozen(trial.run)
        if settings.tool == "sysbench":
            return Demand(tool_workload=settings.sysbench())
        if settings.tool == "pgreplay" and settings.replay is not None:
            return Demand(tool_workload=settings.replayed(frozen[settings.replay]))
        script = str(frozen.get(settings.script, settings.script))
        if settings.prewarm and trial.server.prewarmed_for != trial.server.started_at:
            _prewarm(trial)
        demand = Demand(workload=settings.pgbench(script))
        if settings.standby_script is not None:
            path = str(frozen.get(settings.standby_script, settings.standby_script))
            demand.standby_workload = settings.standby_pgbench(path)
        return demand


def _frozen(run: RunContext) -> dict[str, Path]:
    """The run's copies of the custom scripts and replayed logs on its host: the script as
    written -> the copy pgbench (or pgreplay) reads. Run state, so it lives in the run."""
    return run.state_of("workload", dict)


MAX_SCRIPT_BYTES = 1 << 20


def _writes(values: dict[str, Value], script: str, custom: str | None) -> bool:
    if values.get("tool") == "pgreplay":
        return True  # a captured log: what it changes is not known, so it starts from the data
    if values.get("tool") == "sysbench":
        return sysbench.TESTS[str(values["test"])]
    return pgbench.writes(script, custom)


def _read_script(ctx: ValidationContext, path: tuple[str, ...], script: str) -> tuple[Path, str]:
    """A custom pgbench script: a regular `.sql` file of UTF-8 text at a path relative to
    the experiment file; opened once without following a link, every check made on what
    was opened (host/userfile.py), and read there, here, once."""
    named = ctx.source.path.parent / script
    expected = (f"one of {', '.join(pgbench.BUILTIN_SCRIPTS)} or a path to a .sql file, "
                "relative to the experiment file")  # fmt: skip
    if named.suffix != ".sql":  # refused by its name alone: nothing else is opened
        what = "is not a .sql file" if named.is_file() else f"does not exist (at {named})"
        raise ctx.source.error(path, f"the custom script {script!r} {what}",
                               expected=expected, fix="name pgbench scripts NAME.sql")  # fmt: skip
    try:
        opened = userfile.read(named, ctx.user, MAX_SCRIPT_BYTES)
    except UserFileError as exc:
        what = str(exc)
        if "No such file" in what or "not a regular file" in what:
            what = f"does not exist as a file ({what})"
        elif "server user" in what:
            what = f"is not readable by the server user, who runs pgbench: {what}"
        raise ctx.source.error(path, f"the custom script {script!r} {what}", expected=expected,
                               fix="point it at a pgbench .sql script the server user may "
                               "read (it gets the script's text)") from None  # fmt: skip
    try:
        text = opened.data.decode()
    except UnicodeDecodeError:
        text = ""
    if not text or "\0" in text:
        raise ctx.source.error(path, f"the custom script {script!r} is not a pgbench script "
                               f"(UTF-8 text up to {MAX_SCRIPT_BYTES >> 20} MiB)",
                               expected=expected,
                               fix="point it at a pgbench .sql script")  # fmt: skip
    return opened.path, text


def _prewarm(trial: TrialContext) -> None:
    with trial.cluster.connect() as conn:
        if not conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'pg_prewarm'").fetchone():
            raise TrialFailure(
                "workload.prewarm is on but the pg_prewarm extension is not "
                "installed (apt-get install postgresql-contrib)"
            )
        conn.execute(
            "SELECT pg_prewarm(c.oid) FROM pg_class c WHERE c.relname = ANY(%s)",
            (list(PGBENCH_TABLES),),
        )
    trial.server.prewarmed_for = trial.server.started_at
    trial.events.append("prewarm")
