"""From a validated experiment to its plan: factor costs from the layers, whether every
configuration's resources can be alive at once (the resource layers decide, on the
filesystem the work area will be on), the read-only checks of the machine (`preflight`,
which `plan` runs too), and rough durations."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..core import Cost
from ..host import safefs, workarea
from ..layers.base import ResourceLayer
from ..plan import Plan, PlanFactor, TrialCost, make_plan
from ..spec import Experiment


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
    factors = [
        PlanFactor(f.name, f.levels, exp.pseudo_costs[f.name] if f.name in exp.pseudo_costs
                   else max(exp.layer(f.layer).cost(f.key), Cost.NOTHING))
        for f in exp.factors
    ]  # fmt: skip
    reason = why_not_alive(exp, where) if where is not None else ""
    return make_plan(factors, exp.rounds, exp.seed, exp.rebuild, not reason, reason, exp.adaptive)


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
        scale = max(1, target // (16 * 1024**2)) if target is not None else cluster.scale
        restore = 1.0 + 0.03 * scale if w.writes else 0.0
        # standbys are cloned again after each restore: pg_basebackup took 0.7-1.3 s at
        # scale 10 and 2.7 s at scale 20 here, then a start and the catch-up wait
        n = s["replication"].standbys if "replication" in s else 0
        standbys = n * (0.5 + 0.13 * scale if w.writes else 0.3) + (1.0 if n else 0.0)
        measure = w.warmup_s + w.duration_s + 1.5 + restore + standbys
        costs[c.id] = TrialCost(measure=measure, build=4.0 + 0.35 * scale)
    return costs
