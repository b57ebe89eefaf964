"""The experiment file's fixed tables ([experiment], [postgres], [repeat], [report]) as
pydantic models, and their validation into errors that name the file, key and line."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ..collect.hostfacts import FACTS
from ..layers.base import Source
from ..plan import Adaptive
from ..units import parse_duration


class ExperimentTable(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    name: str = Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")
    seed: int | None = Field(None, ge=0)
    description: str = ""
    hosts_may_differ: list[str] = Field(
        default_factory=list, description="host facts a fleet's groups may differ in "
        f"(else they are refused before dispatch): {', '.join(FACTS)}",
    )  # fmt: skip

    cpu_profile: str = Field("0s", description="a CPU profile window after each round-1 "
                             "trial's measured window (perf): its length, or 0s for none")

    io_latency: str = Field("0s", description="block-I/O latency of the server's devices, "
                            "timed in the same window (perf): its length, or 0s for none")

    @field_validator("cpu_profile", "io_latency")
    @classmethod
    def _profile(cls, v: str) -> str:
        seconds = parse_duration(v)
        if not 0 <= seconds <= 600:
            raise ValueError("a length of up to 10 minutes, such as \"5s\" (0s: none)")
        return v

    @field_validator("hosts_may_differ")
    @classmethod
    def _known_facts(cls, v: list[str]) -> list[str]:
        unknown = [f for f in v if f not in FACTS]
        if unknown:
            raise ValueError(f"{', '.join(map(repr, unknown))} is not a host fact; the facts "
                             f"are {', '.join(FACTS)}")  # fmt: skip
        return v


class PostgresTable(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    bin: str = "auto"
    user: str | None = Field(None, description="OS user the server runs as when pgsweep is root")


class RepeatTable(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    rounds: int | str | None = Field(
        None, description='a number, or "auto" (the default with two configurations or more): '
        "look after each round and stop once decided",
    )  # fmt: skip
    min_rounds: int = Field(3, ge=2, le=50, description="rounds before the first look")
    # each look's boundary is computed numerically: 50 rounds take seconds, 200 minutes
    max_rounds: int | None = Field(
        None, ge=2, le=50, description="rounds at most (default: what `interest` needs on "
        "this machine's recorded noise, within `budget`)",
    )  # fmt: skip
    decide: Literal["baseline", "effects"] = Field(
        "baseline", description="what must be decided: each configuration against the baseline, "
        "or the factor effects",
    )  # fmt: skip
    precision: str = Field("2%", description="equivalence margin and interval precision")
    interest: str = Field("10%", description="the smallest change worth finding (futility)")
    budget: str = Field("2h", description="machine time the default max_rounds may take")
    rebuild: int | str = Field(
        "auto", description='"auto", "per_round", "once", or every N rounds: new instances of '
        "every cluster-level level",
    )  # fmt: skip

    @field_validator("rounds")
    @classmethod
    def _rounds(cls, v: int | str | None) -> int | str | None:
        if v is not None and v != "auto" and not (isinstance(v, int) and 1 <= v <= 10_000):
            raise ValueError('a whole number of rounds from 1 to 10000, or "auto"')
        return v

    @field_validator("precision", "interest")
    @classmethod
    def _percent(cls, v: str) -> str:
        if not re.fullmatch(r"\d+(\.\d+)?%", v) or not 0 < float(v[:-1]) < 100:
            raise ValueError('a percentage above 0% and below 100%, e.g. "2%"')
        return v

    @field_validator("budget")
    @classmethod
    def _budget(cls, v: str) -> str:
        if parse_duration(v) < 60:
            raise ValueError('a duration of at least a minute, such as "2h" or "90min"')
        return v

    @field_validator("rebuild")
    @classmethod
    def _rebuild(cls, v: int | str) -> int | str:
        if v in ("auto", "once", "per_round") or (isinstance(v, int) and 1 <= v <= 10_000):
            return v
        raise ValueError('"auto", "per_round", "once", or a number of rounds (every N rounds)')


class ReportTable(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    baseline: dict[str, str | int | float | bool] = Field(
        default_factory=dict, description="factor levels of the configuration to compare with"
    )
    margin: str | None = Field(None, pattern=r"^\d+(\.\d+)?%$", description='e.g. "2%"')
    alpha: float = Field(
        0.05, gt=0, le=0.2, description="chance of any false 'different' per family of claims"
    )

    def margin_fraction(self) -> float | None:
        return float(self.margin[:-1]) / 100 if self.margin else None


FIXED_TABLES: dict[str, type[BaseModel]] = {
    "experiment": ExperimentTable,
    "postgres": PostgresTable,
    "repeat": RepeatTable,
    "report": ReportTable,
}


def fixed_table(source: Source, doc: dict[str, Any], table: str) -> Any:
    model = FIXED_TABLES[table]
    data = doc.get(table, {})
    if not isinstance(data, dict):
        raise source.error((table,), f"[{table}] must be a table")
    return validated(source, model, data, (table,))


def validated(source: Source, model: type[BaseModel], data: dict[str, Any],
              path: tuple[str, ...]) -> Any:  # fmt: skip
    """A table through its model; the first thing pydantic refuses as the file's error,
    naming the key and its line."""
    name = ".".join(path)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        key = str(err["loc"][0]) if err["loc"] else ""
        if err["type"] == "extra_forbidden":
            raise source.error((*path, key), f"unknown key in [{name}]",
                               expected=f"one of {', '.join(model.model_fields)}") from None
        if err["type"] == "missing":
            raise source.error(path, f"[{name}] needs the key {key!r}",
                               fix=f'add {key} = "..." to [{name}]') from None
        msg = str(err["msg"]).removeprefix("Value error, ")
        raise source.error((*path, key), f"{msg} (got {data.get(key)!r})",
                           fix=f"see [{path[0]}] in docs/reference.md (pgsweep schema "
                               "--markdown)") from None  # fmt: skip


def adaptive_rounds(source: Source, doc: dict[str, Any], rep: RepeatTable,
                    n_configs: int) -> Adaptive | None:  # fmt: skip
    """The adaptive-rounds settings, or None for a fixed number of rounds; the keys that
    only mean something with rounds = "auto" are refused without it. Without `rounds`,
    two configurations or more are adaptive, one is 3 fixed rounds. An Adaptive whose
    max_rounds is 0 is to be settled from the noise and the budget (engine.plans)."""
    given = doc.get("repeat", {})
    if rep.rounds is None:
        rep.rounds = "auto" if n_configs >= 2 else 3
    if rep.rounds != "auto":
        extra = [k for k in ADAPTIVE_KEYS if k in given]
        if extra:
            raise source.error(("repeat", extra[0]), f"{extra[0]} only applies to adaptive rounds",
                               fix='set rounds = "auto", or remove the key')  # fmt: skip
        return None
    top = rep.max_rounds or 50
    if "min_rounds" not in given:  # the default of 3 yields to a smaller maximum
        rep.min_rounds = min(rep.min_rounds, top)
    if rep.min_rounds > top:
        raise source.error(("repeat", "min_rounds"),
                           f"min_rounds ({rep.min_rounds}) exceeds max_rounds ({top})",
                           fix="make min_rounds at most max_rounds")  # fmt: skip
    return Adaptive(rep.min_rounds, rep.max_rounds or 0, rep.decide,
                    float(rep.precision[:-1]) / 100, float(rep.interest[:-1]) / 100,
                    0.0 if rep.max_rounds else parse_duration(rep.budget))  # fmt: skip


def rebuild_policy(rep: RepeatTable) -> str:
    """`rebuild` as the plan takes it: "auto", "once", "per_round" or "every N"."""
    return str(rep.rebuild) if isinstance(rep.rebuild, str) else f"every {rep.rebuild}"


ADAPTIVE_KEYS = ("min_rounds", "max_rounds", "decide", "precision", "interest", "budget")


PERF = ("/usr/bin/perf", "/usr/sbin/perf")  # Debian's linux-perf


def cpu_profile_seconds(source: Source, text: str, tool: str, key: str = "cpu_profile") -> int:
    """[experiment] cpu_profile (or io_latency) in seconds (0: none), refused (exit 2) where
    it cannot run: without root (perf attaches to the server user's processes, or records
    the kernel's block tracepoints), without perf, or for a workload tool other than pgbench
    (the profile window is a pgbench run)."""
    seconds = int(parse_duration(text))
    if seconds == 0:
        return 0
    where = ("experiment", key)
    what = "a CPU profile" if key == "cpu_profile" else "timing block requests"
    if os.geteuid() != 0:
        raise source.error(where, f"{what} runs perf on the server's processes or devices: "
                           "it needs root", fix=f"run pgsweep as root, or remove {key}")
    if not any(Path(p).is_file() for p in PERF):
        raise source.error(where, f"{what} needs perf, which is not installed",
                           fix=f"apt-get install linux-perf, or remove {key}")
    if tool != "pgbench":
        raise source.error(where, f"the profile window runs pgbench; workload.tool = {tool!r}",
                           fix=f'remove {key}, or set workload.tool = "pgbench"')
    return seconds
