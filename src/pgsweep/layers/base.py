"""The layer interface. Every layer (build, storage, cluster, os, server, replication,
workload) validates its keys up front, says what changing a key costs, prepares each trial
for its configuration, and puts back what it changed. The planner only sees costs; the
engine keeps the resources layers build (see Layer and ResourceLayer)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core import Cost, Value, printable
from ..errors import PgsweepError
from ..tomlpos import key_line

if TYPE_CHECKING:
    from ..host.api import Host
    from ..host.blockdev import Grant
    from ..host.proc import RunAs
    from ..postgres.binaries import Binaries, ValueChecker
    from .context import Demand, RunContext, TrialContext


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
    # every configuration runs a build: the installed catalog only parses levels, and
    # names it lacks wait for the builds' own catalogs (engine/buildprep.py)
    catalog_deferred: bool = False
    # (setting, level as written) -> what pg_settings showed for it on a scratch server
    # started with its configuration (postgres/startcheck.py; DERIVED: the server's own)
    shown: dict[tuple[str, str], str] = field(default_factory=dict)
    # what the run will do differently from what the file says, printed by plan and run
    notes: list[str] = field(default_factory=list)
    # "server.name" -> "FILE:LINE" of a setting that came from server.include's files
    origins: dict[str, str] = field(default_factory=dict)
    host: Host = field(kw_only=True)  # the machine the checks ask (the server's)


class Layer(ABC):
    """One layer of the stack.

    Validation (nothing on the machine changes): `validate` checks the layer's table and
    factor levels and returns its normalised base values; `settings` turns one
    configuration's values into the typed settings every later step uses (no re-parsing
    of "30s" or "4GiB" at the point of use); `check_configurations` refuses combinations
    across layers; `check_host` refuses what this machine cannot do. `cost` is all the
    planner knows of a layer.

    Running: `start_run` once before the first trial; per trial, `prepare` brings the
    trial's resources to the configuration (in layer order, each seeing what earlier ones
    demanded), `attach` brings up what stands on the running server, then `verify` reads
    back what is in force; `finish_run` puts back what the
    layer changed, on every path. Layers that make long-lived resources (a filesystem, a
    cluster) are `ResourceLayer`s: the engine keeps what they build and destroys it."""

    name: str
    # True for layers that change the machine (mkfs, mount, kernel files): refused, all
    # their keys named at once, when pgsweep does not run as root
    needs_root: bool = False
    # its work happens on this machine whatever host the server runs on (a build is
    # compiled here, then copied there): its host checks are this machine's
    acts_here: bool = False

    @abstractmethod
    def validate(
        self, base: dict[str, Any], factors: dict[str, list[Any]], ctx: ValidationContext
    ) -> dict[str, Value]:
        """Check base values and every factor level; return the full, normalised base.
        Must raise PgsweepError naming the key. Must not change the machine."""

    def settings(self, values: dict[str, Value]) -> Any:
        """The typed settings of one configuration (its base values with its levels laid
        over them); validated already, so this does not fail."""
        return dict(values)

    @abstractmethod
    def cost(self, key: str) -> Cost:
        """What changing `key` between two consecutive trials costs."""

    def canonical_key(self, key: str) -> str:
        """The key as the layer names it (server settings ignore case)."""
        return key

    def level_identity(self, key: str, level: Value) -> object:
        """What a level means, to refuse two levels of one factor that mean the same
        ("30s" and 30, "1GiB" and "1024MiB"); called after `validate` succeeded."""
        return repr(level)

    def check_configurations(  # noqa: B027
        self, configs: Sequence[Mapping[str, Any]], ctx: ValidationContext
    ) -> None:
        """After every layer validated its own keys: refuse combinations across layers, given
        every configuration's typed settings of every layer. Changes nothing."""

    def check_host(self, host: Host, where: Path, settings: list[Any],  # noqa: B027
                   grant: Grant | None = None) -> None:  # fmt: skip
        """Before anything runs (`plan` too): refuse (PgsweepError, exit 2) what the server's
        host cannot do for any configuration's settings of this layer; `where` is on the
        filesystem the work area will be on there; `grant`: what the command line allows
        beyond the file (--allow-device, --wipe). Read-only."""

    def claim_host(self, host: Host, settings: list[Any], who: str) -> None:  # noqa: B027
        """`run` only, after every read-only check and before anything is made: take what
        one run at a time may hold on the server's host (`who` says which run holds it)."""

    def record_inputs(self, results: Path) -> None:  # noqa: B027
        """Copy what the run depends on beyond the file next to the results (scripts)."""

    def start_run(self, run: RunContext) -> None:  # noqa: B027
        """Once, before the first trial."""

    def prepare(self, settings: Any, trial: TrialContext) -> Demand | None:
        """Bring this trial to the layer's settings, as cheaply as the cost allows; return
        what later layers must do (server settings, a cgroup, the workload)."""
        return None

    def attach(self, settings: Any, trial: TrialContext) -> None:  # noqa: B027
        """After every layer prepared, with the server running: bring up what stands on it
        (standbys made from the running primary)."""

    def verify(self, settings: Any, trial: TrialContext) -> None:  # noqa: B027
        """After every layer prepared and the server runs: check that what this layer set is
        in force, record it in trial.effective, or raise TrialFailure."""

    def finish_run(self, run: RunContext) -> None:  # noqa: B027
        """Put back what the layer changed. Called on every path, Ctrl-C included."""


class ResourceLayer(Layer):
    """A layer whose changes make a long-lived resource (a filesystem, a loaded cluster),
    kept by the engine across trials and rounds while it can, keyed by the levels that
    shape it and by the resources it stands on."""

    @abstractmethod
    def resource_key(self, settings: Any, config: Mapping[str, Any]) -> str:
        """What shapes the resource: configurations with equal keys share one. `config`
        holds every layer's settings of the configuration (a cluster sized as a share of
        RAM depends on os.memory_limit), read only."""

    @abstractmethod
    def build(
        self, settings: Any, config: Mapping[str, Any], below: Mapping[str, Any],
        run: RunContext,
    ) -> Any:  # fmt: skip
        """Make the resource on the ones `below` (layer name -> resource); TrialFailure
        (with its reason) when it cannot be made."""

    @abstractmethod
    def destroy(self, resource: Any, run: RunContext) -> None:
        """Take the resource down; called once what was built on it is gone."""

    def built_event(self, settings: Any) -> str | None:
        """What the trial record says when this layer built a resource for it."""
        return f"new-{self.name}"

    def check_room(self, configs: Sequence[Mapping[str, Any]], where: Path) -> None:
        """Before anything runs (`plan` too): refuse (PgsweepError, exit 2, with the
        figures) a configuration whose resources cannot fit even alone. Read-only."""

    def coexist(self, configs: Sequence[Mapping[str, Any]], where: Path) -> str | None:
        """Why the resources of all these configurations (every layer's settings) cannot be
        alive at once (one real device holds one filesystem at a time, the disk is too
        small), or None. `where` is on the filesystem the work area will be on."""
        return None


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
                fix=f"check the spelling; see [{layer}] in docs/reference.md",
            )
        return source.error(
            path,
            f"{what} (got {value!r})",
            fix="see this key in docs/reference.md (pgsweep schema --markdown)",
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
                fix="see this key in docs/reference.md (pgsweep schema --markdown)",
            ) from None
    return dict(model.model_validate(base).model_dump())
