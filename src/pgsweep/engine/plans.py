"""From a validated experiment to its plan: factor costs from the layers, whether every
configuration's resources can be alive at once (the resource layers decide, on the
filesystem the work area will be on), the rebuild schedule of whole plots and the default
maximum of adaptive rounds (both from rough durations and, for the rounds, the noise),
the read-only checks of the machine (`preflight`, which `plan` runs too), and rough
durations."""

from __future__ import annotations

import math
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..core import Cost
from ..host import safefs, workarea
from ..layers.base import ResourceLayer
from ..plan import Plan, PlanFactor, TrialCost, estimate_parts, make_plan
from ..spec import Experiment
from ..units import human_seconds


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
    return make_plan(factors, exp.rounds, exp.seed, every, not reason, reason, exp.adaptive)


def resumed_plan(exp: Experiment, stored: dict[str, Any]) -> Plan:
    """The plan of a run being resumed: it keeps the policies it started with (what fitted
    then), not what fits now. Plans from before rebuild_every: once or per_round."""
    keep = bool(stored.get("keep_alive", True))
    every = stored.get("rebuild_every")
    if every is None:
        every = 1 if stored.get("rebuild") == "per_round" else 0
    return make_plan(plan_factors(exp), exp.rounds, exp.seed, int(every), keep,
                     stored.get("why_not_alive", ""), exp.adaptive)  # fmt: skip


def plan_factors(exp: Experiment) -> list[PlanFactor]:
    return [
        PlanFactor(f.name, f.levels, exp.pseudo_costs[f.name] if f.name in exp.pseudo_costs
                   else max(exp.layer(f.layer).cost(f.key), Cost.NOTHING))
        for f in exp.factors
    ]  # fmt: skip


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


# At most 20% more rounds than a fixed design of 80% power: on the recorded noise (two
# configurations, 10% change) adaptive runs reach 80% power with 14 rounds at most where a
# fixed design needs 12 (tpcb-like), 11 where it needs 9 (select-only); bench/guarantees
LOOKS_COST = 1.2


def settle_max_rounds(exp: Experiment) -> None:
    """[repeat] max_rounds not given (rounds = "auto" by default): the rounds a change of
    `interest` needs against the baseline with 80% power, on this machine's recorded noise
    carried to this plan's round length, within the time `budget` allows; 2 to 50. A
    fixed design's rounds plus LOOKS_COST: the looks' boundaries (early ones on few
    degrees of freedom) and futility cost power, which more rounds at most buy back."""
    from ..verdict import noise as nz
    from ..verdict import power

    ad = exp.adaptive
    assert ad is not None
    probe = make_plan(plan_factors(exp), 1, exp.seed, 0)
    n = len(probe.configurations)
    if n < 2:  # nothing to decide: spec.check_adaptive says so
        exp.adaptive = replace(ad, max_rounds=max(ad.min_rounds, 2))
        exp.rounds = exp.adaptive.max_rounds
        return
    script = {str(exp.settings(c.levels)["workload"].script) for c in probe.configurations}
    model = nz.recorded(script.pop() if len(script) == 1 else "tpcb-like")
    sigma, _ = model.at(n)
    need = power.rounds_needed(sigma, ad.interest, n, max_rounds=50)
    need = min(50, math.ceil(LOOKS_COST * need)) if need else 50
    costs = trial_costs(exp, probe)
    trials, builds = estimate_parts(probe, costs)
    per_round = trials + (builds if exp.rebuild != "once" and builds and len(
        {c.group for c in probe.configurations}) > 1 else 0.0)  # fmt: skip
    fits = int((ad.budget_s - builds) // per_round) if per_round > 0 else 50
    top = max(ad.min_rounds, min(need, fits, 50))
    why = (f"a {ad.interest:.0%} change needs {need} rounds on {model.source} at rounds of "
           f"{n} trials (80% power)")  # fmt: skip
    if fits < need:
        why += (f"; the budget of {human_seconds(ad.budget_s)} allows {max(fits, 2)} "
                "([repeat] budget, or max_rounds, for more)")  # fmt: skip
    exp.adaptive = replace(ad, max_rounds=top, why_max=why)
    exp.rounds = top


def preflight(exp: Experiment, results: Path) -> Path:
    """Every read-only check of the machine before anything is made (`plan` runs it too):
    the results folder is safe for root to write in, real devices are allowed and free,
    schedulers are offered, loop images fit. Returns a path on the filesystem the work
    area will be on."""
    results = safefs.trusted_target(results, "the results folder")
    where = existing(workarea.work_base(results, exp.user))
    configs = all_settings(exp)
    for layer in exp.layers:
        layer.authorize(exp.grant)
        layer.check_host(where, [c[layer.name] for c in configs])
        if isinstance(layer, ResourceLayer):  # after the devices' own checks
            layer.check_room(configs, where)
    return where


def claim_host(exp: Experiment, results: Path) -> None:
    """`run` only, after `preflight`: what one run at a time may hold on this machine."""
    configs = all_settings(exp)
    for layer in exp.layers:
        layer.claim_host([c[layer.name] for c in configs], f"PID {os.getpid()}, {results}")


def trial_costs(exp: Experiment, plan: Plan) -> dict[str, TrialCost]:
    """Seconds per trial and per cluster build, from the workload and the data size."""
    costs = {}
    for c in plan.configurations:
        s = exp.settings(c.levels)
        w, cluster = s["workload"], s["cluster"]
        target = cluster.target_bytes(getattr(s.get("os"), "memory_limit", None))
        if cluster.dump is not None:  # a restore: about as long as loading as much data
            target = cluster.dump.estimate_bytes()
        scale = max(1, target // (16 * 1024**2)) if target is not None else cluster.scale
        restore = 1.0 + 0.03 * scale if w.writes else 0.0
        # standbys are cloned again after each restore: pg_basebackup took 0.7-1.3 s at
        # scale 10 and 2.7 s at scale 20 here, then a start and the catch-up wait
        n = s["replication"].standbys if "replication" in s else 0
        standbys = n * (0.5 + 0.13 * scale if w.writes else 0.3) + (1.0 if n else 0.0)
        measure = w.warmup_s + w.duration_s + 1.5 + restore + standbys
        costs[c.id] = TrialCost(measure=measure, build=4.0 + 0.35 * scale)
    return costs
