"""The resources a run keeps alive: what each resource layer built (a filesystem, a loaded
cluster), keyed by the levels that shape it and by what it stands on, so every round can
visit every configuration and switch between live resources by stopping one server and
starting another, instead of running all rounds of one cluster and then all of the next.

Three policies, decided before the run (see plan.py):
- keep alive (the default when everything fits): each resource is built on first use and
  kept to the end of the run;
- `rebuild = "per_round"`: the same, but everything is taken down at the start of each
  round, so whole-plot factors are replicated by independent builds;
- one at a time (a real device holds one filesystem, or the disk cannot hold every
  cluster): building a resource first takes down every other one; the plan then visits
  each whole-plot group as one batch per round.

A resource that could not be built fails every trial that needs it, with the reason, and
is not tried again. Everything is taken down on every path (`release_all`)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from ..layers.base import ResourceLayer
from ..layers.context import RunContext, Server, TrialFailure
from ..plan import Plan, Trial


def in_order(plan: Plan, trials: Iterable[Trial], resources: Resources) -> Iterator[Trial]:
    """The trials as given (the run's order), every resource taken down before the first
    trial of a round where the plan renews its whole plots (`rebuild = "per_round"` or
    every N rounds, batches one at a time): the one walk `run` and `plan --commands` share."""
    current = None
    for trial in trials:
        if plan.renews_at(trial.round) and current not in (None, trial.round):
            resources.release_all()  # a new instance of every whole plot (plan.py)
        current = trial.round
        yield trial


class Resources:
    def __init__(self, layers: list[ResourceLayer], run: RunContext, one_at_a_time: bool) -> None:
        self.layers = layers
        self.run = run
        self.one_at_a_time = one_at_a_time
        # layer name -> key chain (keys of this layer and every layer below) -> resource
        self.live: dict[str, dict[tuple[str, ...], Any]] = {layer.name: {} for layer in layers}
        self.failed: dict[tuple[str, ...], str] = {}
        self.built: dict[str, int] = {layer.name: 0 for layer in layers}

    def acquire(self, settings: Mapping[str, Any], events: list[str]) -> dict[str, Any]:
        """The resources of a configuration (built where missing), and every server but its
        own stopped."""
        chain: tuple[str, ...] = ()
        got: dict[str, Any] = {}
        for layer in self.layers:
            key = layer.resource_key(settings[layer.name], settings)
            chain = (*chain, f"{layer.name}={key}")
            if chain in self.failed:
                raise TrialFailure(f"this {layer.name} could not be built: {self.failed[chain]}")
            resource = self.live[layer.name].get(chain)
            if resource is None:
                if self.one_at_a_time:
                    self._release_from(layer)
                resource = self._build(layer, chain, settings, got)
                event = layer.built_event(settings[layer.name])
                events += [event] if event else []
            got[layer.name] = resource
        self._stop_others(got)
        return got

    def _build(self, layer: ResourceLayer, chain: tuple[str, ...], settings: Mapping[str, Any],
               below: dict[str, Any]) -> Any:  # fmt: skip
        try:
            resource = layer.build(settings[layer.name], settings, dict(below), self.run)
        except TrialFailure as exc:
            self.failed[chain] = exc.reason
            raise
        self.live[layer.name][chain] = resource
        self.built[layer.name] += 1
        return resource

    def _stop_others(self, got: dict[str, Any]) -> None:
        mine = [r for r in got.values() if isinstance(r, Server)]
        for resources in self.live.values():
            for resource in resources.values():
                if isinstance(resource, Server) and resource not in mine:
                    resource.stop()

    def servers(self) -> list[Server]:
        return [r for rs in self.live.values() for r in rs.values() if isinstance(r, Server)]

    def _release_from(self, layer: ResourceLayer) -> None:
        """Take down every resource of `layer` and of the layers above it, top first."""
        index = self.layers.index(layer)
        first: BaseException | None = None
        for upper in reversed(self.layers[index:]):
            for chain in list(self.live[upper.name]):
                resource = self.live[upper.name].pop(chain)
                try:
                    upper.destroy(resource, self.run)
                except Exception as exc:  # take the rest down too, then say what failed
                    first = first or exc
        if first is not None:
            raise first

    def release_all(self) -> None:
        if self.layers:
            self._release_from(self.layers[0])
