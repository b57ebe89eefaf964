"""From a validated experiment to its plan: factor costs from the layers, whether every
configuration's resources can be alive at once (the resource layers decide, on the
filesystem the work area will be on), the rebuild schedule of whole plots and the default
maximum of adaptive rounds (both from rough durations and, for the rounds, the noise),
the read-only checks of the machine (`preflight`, which `plan` runs too), and rough
durations."""

from __future__ import annotations

import hashlib
import math
import os
import re
from pathlib import Path
from typing import Any

from ..errors import PgsweepError
from ..host import safefs, workarea
from ..host.api import Host
from ..host.local import LOCAL
from ..layers.base import ResourceLayer
from ..plan import (
    Plan,
    PlanFactor,
    Shard,
    estimate_parts,
    make_plan,
    round_spans,
    shard_rounds,
)
from ..spec import Experiment
from ..spec.rounds import plan_factors, trial_costs


def existing(path: Path) -> Path:
    """`path`, or its nearest ancestor that exists."""
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def all_settings(exp: Experiment) -> list[dict[str, Any]]:
    return list(exp.configurations.values())


def why_not_alive(exp: Experiment, where: Path) -> str:
    """Why the resources of every configuration cannot all be kept alive, or ""."""
    configs = all_settings(exp)
    storages = {repr(c["storage"]) for c in configs if getattr(c.get("storage"), "used", 0)}
    if exp.topology.remote_server and len(storages) > 1:  # `where` is this machine's
        return (f"storage: the room for {len(storages)} storages' loop images on host "
                f"{exp.topology.server} is not read before the run: one at a time")
    for layer in exp.layers:
        if isinstance(layer, ResourceLayer):
            reason = layer.coexist(configs, where)
            if reason:
                return f"{layer.name}: {reason}"
    return ""


def plan_for(exp: Experiment, where: Path | None = None) -> Plan:
    """The plan; `where` (on the work area's filesystem) lets the resource layers say
    whether everything fits at once, else it is assumed to."""
    factors = plan_factors(exp)
    reason = why_not_alive(exp, where) if where is not None else ""
    every = rebuild_every(exp, factors, not reason)
    return make_plan(factors, exp.rounds, exp.seed, every, not reason, reason, exp.adaptive,
                     shards(exp))  # fmt: skip


def shards(exp: Experiment) -> int:
    """Host groups the rounds are spread over (`run --shard K/N`: N)."""
    return int(exp.shard.n) if exp.shard is not None else 1


GROUP_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def shard_seed(text: str) -> int:
    """The seed of a fleet whose file gives none: drawn from the file's text, so every
    shard, on whatever machine, computes the same plan."""
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "big") % 2**31


def apply_shard(exp: Experiment, shards_n: int, k: int | None = None, group: str = "") -> None:
    """`run --shard K/N [--group NAME]`, `plan --shards N`: checked, then recorded on the
    experiment. A fleet needs a fixed number of rounds, at least one per group: an
    adaptive run looks at every round as it finishes, and groups finishing at their own
    pace would each decide alone (so rounds = "auto" is refused, not split)."""
    if group and k is None:
        raise PgsweepError("--group names the group of a shard: it needs --shard K/N",
                           fix="pgsweep run FILE --shard K/N --group NAME")  # fmt: skip
    where = exp.source.where("repeat", "rounds")
    if exp.adaptive is not None:
        raise PgsweepError(
            'rounds = "auto" looks at every round as it finishes: groups finishing at their '
            "own pace would each decide alone", where=where,
            expected="a fixed number of rounds for a sharded run",
            fix=f"rounds = {2 * shards_n} (two per group), or run without --shard",
        )  # fmt: skip
    if exp.against is not None:
        raise PgsweepError("--against measures one folder again on one machine: it cannot be "
                           "sharded", fix="run it without --shard")  # fmt: skip
    if exp.rounds < shards_n:
        raise PgsweepError(
            f"{exp.rounds} rounds cannot give each of {shards_n} groups a round", where=where,
            expected="at least one round per group", fix=f"rounds = {2 * shards_n} (two per group)",
        )  # fmt: skip
    name = group or (f"shard{k}" if k is not None else "")
    if k is not None and not GROUP_NAME.fullmatch(name):
        raise PgsweepError(f"--group {name!r} cannot name a group", where="--group",
                           expected="letters, digits, - _ and . (at most 64, starting with a "
                           "letter or digit)", fix="choose another name")  # fmt: skip
    if not exp.seed_given:
        exp.seed = shard_seed(exp.source.text)
        exp.notes.append(f"no seed in the file: every shard uses {exp.seed}, drawn from the "
                         "file's text, so all compute the same plan")  # fmt: skip
    exp.shard = Shard(k if k is not None else 1, shards_n)
    exp.group = name


def shard_facts(exp: Experiment) -> dict[str, str]:
    """What a shard's results folder records of it (environment scope "fleet"): the
    fleet's size, this shard's number, group and rounds; `merge` checks them."""
    assert exp.shard is not None
    rounds = shard_rounds(exp.rounds, exp.shard.n)[exp.shard.k - 1]
    return {"shards": str(exp.shard.n), "shard": str(exp.shard.k), "group": exp.group,
            "rounds": round_spans(rounds)}  # fmt: skip


def resumed_plan(exp: Experiment, stored: dict[str, Any]) -> Plan:
    """The plan of a run being resumed: it keeps the policies it started with (what fitted
    then), not what fits now. Plans from before rebuild_every: once or per_round."""
    keep = bool(stored.get("keep_alive", True))
    every = stored.get("rebuild_every")
    if every is None:
        every = 1 if stored.get("rebuild") == "per_round" else 0
    return make_plan(plan_factors(exp), exp.rounds, exp.seed, int(every), keep,
                     stored.get("why_not_alive", ""), exp.adaptive, shards(exp))  # fmt: skip


# rebuild = "auto": every round, unless rebuilding every group would add more than this
# share to the trials' time; then every N rounds, keeping at least two instances per level.
# Instances are what a whole-plot verdict rests on: two cluster levels over 6 rounds detect
# about 21% rebuilt every round and 59% every 2 rounds (planned at 8% noise per trial, 3%
# between instances), so only a rebuild that would more than double the run is spread out.
REBUILD_SHARE = 1.0


def rebuild_every(exp: Experiment, factors: list[PlanFactor], keep_alive: bool) -> int:
    """Rounds one instance of each whole-plot group serves (0: the whole run), from
    `[repeat] rebuild`. "auto": nothing to replicate with one group (0); otherwise every
    round when a round's rebuilds cost at most REBUILD_SHARE of its trials, else the
    fewest rounds per instance that keep them to that share, at most half the rounds (two
    instances per level at least)."""
    policy = exp.rebuild
    if policy in ("once", "per_round"):
        return {"once": 0, "per_round": 1}[policy]
    if policy.startswith("every "):
        return int(policy.split()[1])
    probe = make_plan(factors, 1, exp.seed, 0, keep_alive)
    if len({c.group for c in probe.configurations}) < 2:
        return 0
    costs = trial_costs(exp, probe)
    trials, builds = estimate_parts(probe, costs)
    need = math.ceil(builds / (REBUILD_SHARE * trials)) if trials > 0 else 1
    return max(1, min(need, exp.rounds // 2))


def preflight(exp: Experiment, results: Path) -> Path:
    """Every read-only check of the machine before anything is made (`plan` runs it too):
    the results folder is safe for root to write in, real devices are allowed and free,
    schedulers are offered, loop images fit. Returns a path on the filesystem the work
    area will be on."""
    results = safefs.trusted_target(results, "the results folder")
    where = existing(workarea.work_base(results, exp.user))
    configs = all_settings(exp)
    for layer in exp.layers:
        if exp.topology.remote_server and not layer.acts_here:
            continue  # on the server's host, checked once reached (check_server_host)
        layer.check_host(LOCAL, where, [c[layer.name] for c in configs], exp.grant)
        if isinstance(layer, ResourceLayer) and not exp.topology.remote_server:
            layer.check_room(configs, where)  # after the devices' own checks
    return where


def check_server_host(exp: Experiment, host: Host, where: Path) -> None:
    """A server on another host, once its agent answers (`plan` too): every layer's checks
    of that host, read through its agent; `where` is its agents' work base there (its
    filesystems' room is not checked before the run: this version reads none through a
    host)."""
    configs = all_settings(exp)
    for layer in exp.layers:
        if not layer.acts_here:  # those are this machine's (preflight)
            layer.check_host(host, where, [c[layer.name] for c in configs], exp.grant)


def claim_host(exp: Experiment, results: Path, host: Host) -> None:
    """`run` only, after the read-only checks: what one run at a time may hold on the
    server's host (this machine's, or the agent's there: held until it exits)."""
    configs = all_settings(exp)
    for layer in exp.layers:
        layer.claim_host(host, [c[layer.name] for c in configs],
                         f"PID {os.getpid()}, {results}")  # fmt: skip
