"""The layer interface. Every layer (build, storage, cluster, os, server, replication,
workload) validates its keys up front, says what changing a key costs, applies the values
of a configuration to a trial, and undoes what it did. The planner only sees costs."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core import Cost, Value
from ..errors import PgsweepError
from ..tomlpos import key_line

if TYPE_CHECKING:
    from ..host.proc import RunAs
    from ..postgres.binaries import Binaries, ValueChecker
    from ..trialenv import TrialEnv


def printable(text: str) -> str:
    """Text from the file as it may be shown: control and formatting characters as escapes."""
    return "".join(c if c.isprintable() else f"\\u{ord(c):04x}" for c in text)


@dataclass
class Source:
    """The experiment file, for messages that name the file, key and line."""

    path: Path
    text: str

    def where(self, *path: str) -> str:
        line = key_line(self.text, tuple(path))
        key = ".".join(f'"{p}"' if "." in p else p for p in map(printable, path))
        return f"{self.path}:{line}: {key}" if line else f"{self.path}: {key}"

    def error(self, path: tuple[str, ...], what: str, **kw: Any) -> PgsweepError:
        return PgsweepError(what, where=self.where(*path), **kw)


@dataclass
class ValidationContext:
    source: Source
    binaries: Binaries
    checker: ValueChecker
    user: RunAs | None
    # "layer.key" -> the TOML path it was written at: a layer refusing a combination names
    # another layer's key where the file has it ("HUGE_PAGES" for server.huge_pages)
    where: dict[str, tuple[str, ...]] = field(default_factory=dict)


class Layer(ABC):
    """One layer of the stack. `values` always maps every key of the layer (base values
    with the configuration's levels laid over them) to its validated value."""

    name: str

    @abstractmethod
    def validate(
        self, base: dict[str, Any], factors: dict[str, list[Any]], ctx: ValidationContext
    ) -> dict[str, Value]:
        """Check base values and every factor level; return the full, normalised base.
        Must raise PgsweepError naming the key. Must not change the machine."""

    @abstractmethod
    def cost(self, key: str) -> Cost:
        """What changing `key` between two consecutive trials costs."""

    @abstractmethod
    def apply(self, values: dict[str, Value], env: TrialEnv) -> None:
        """Bring the trial environment to `values`, as cheaply as the cost allows."""

    def canonical_key(self, key: str) -> str:
        """The key as the layer names it (server settings ignore case)."""
        return key

    def level_identity(self, key: str, level: Value) -> object:
        """What a level means, to refuse two levels of one factor that mean the same
        ("30s" and 30, "1GiB" and "1024MiB"); called after `validate` succeeded."""
        return repr(level)

    def undo(self, env: TrialEnv) -> None:  # noqa: B027 - optional for layers with no state
        """Remove whatever `apply` created. Called on every path, Ctrl-C included."""

    def check_host(self, workdir: Path, values: list[dict[str, Value]]) -> None:  # noqa: B027
        """Before the first trial, once the work area exists: refuse (PgsweepError, exit 2)
        what this machine cannot do for any configuration's `values`. Changes nothing."""

    def check_configurations(  # noqa: B027
        self, configs: list[dict[str, dict[str, Value]]], ctx: ValidationContext
    ) -> None:
        """After every layer validated its own keys: refuse combinations across layers, given
        every configuration's values of every layer. Changes nothing."""

    def verify(self, values: dict[str, Value], env: TrialEnv) -> None:  # noqa: B027
        """After every layer applied its values and the server runs: check that what this
        layer set is in force, record it in env.effective, or raise TrialFailure."""


def _describe_pydantic(err: dict[str, Any]) -> str:
    msg = str(err.get("msg", "invalid value"))
    if err.get("type") == "extra_forbidden":
        return "unknown key"
    return msg.removeprefix("Value error, ")


def check_table(
    model: type[Any],
    layer: str,
    base: dict[str, Any],
    factors: dict[str, list[Any]],
    source: Source,
) -> Any:
    """Validate a layer's fixed-schema table (a pydantic model) and every factor level.

    Returns the model instance for the base values. Errors name `[layer] key` or
    `factors.layer.key`, with the line, and list the keys the layer knows."""
    from pydantic import ValidationError

    known = ", ".join(model.model_fields)

    def fail(path: tuple[str, ...], err: dict[str, Any], value: Any) -> PgsweepError:
        what = _describe_pydantic(err)
        if what == "unknown key":
            return source.error(
                path,
                f"unknown key in [{layer}]",
                expected=f"one of {known}",
                fix="check the spelling; see the README's experiment file reference",
            )
        return source.error(
            path,
            f"{what} (got {value!r})",
            fix="see the README's experiment file reference for this key",
        )

    try:
        instance = model.model_validate(base)
    except ValidationError as exc:
        err = exc.errors()[0]
        key = str(err["loc"][0]) if err["loc"] else ""
        raise fail((layer, key), dict(err), base.get(key)) from None
    for key, levels in factors.items():
        if key not in model.model_fields:
            raise source.error(
                ("factors", layer, key),
                f"no layer owns {layer}.{key}",
                expected=f"one of {known}",
                fix="check the key's spelling",
            )
        for level in levels:
            try:
                model.model_validate({**base, key: level})
            except ValidationError as exc:
                raise fail(("factors", layer, key), dict(exc.errors()[0]), level) from None
    return instance


def check_subtable(
    model: type[Any],
    path: tuple[str, ...],
    base: dict[str, Any],
    factors: dict[str, list[Any]],
    source: Source,
) -> dict[str, Any]:
    """Validate a nested table such as [storage.zfs] (at `path`) and its factor levels
    (`factors` keyed without the prefix); return the base values. Errors name the key."""
    from pydantic import ValidationError

    checks = [(None, base)] + [(k, {**base, k: lv}) for k, v in factors.items() for lv in v]
    for factor, data in checks:
        try:
            model.model_validate(data)
        except ValidationError as exc:
            err = exc.errors()[0]
            name = str(err["loc"][0]) if err["loc"] else ""
            where = ("factors", *path, factor) if factor else (*path, name)
            unknown = err["type"] == "extra_forbidden"
            what = "unknown key" if unknown else str(err["msg"]).removeprefix("Value error, ")
            raise source.error(
                where,
                f"{what} (got {data.get(name)!r})",
                expected=f"one of {', '.join(model.model_fields)}" if unknown else None,
                fix="see the README's experiment file reference for this key",
            ) from None
    return dict(model.model_validate(base).model_dump())
