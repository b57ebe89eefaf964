"""How many rounds a plan of this experiment holds and what its trials cost: the planner's
factors (each with what a change of it costs, from its layer), rough durations of a
trial and a cluster build, and the default maximum of adaptive rounds (from this
machine's recorded noise and the budget), which loading the file settles."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TYPE_CHECKING

from ..core import Cost
from ..layers import room
from ..plan import Plan, PlanFactor, TrialCost, estimate_parts, make_plan
from ..units import human_seconds

if TYPE_CHECKING:
    from . import Experiment


def plan_factors(exp: Experiment) -> list[PlanFactor]:
    return [
        PlanFactor(f.name, f.levels, exp.pseudo_costs[f.name] if f.name in exp.pseudo_costs
                   else max(exp.layer(f.layer).cost(f.key), Cost.NOTHING))
        for f in exp.factors
    ]  # fmt: skip


def trial_costs(exp: Experiment, plan: Plan) -> dict[str, TrialCost]:
    """Seconds per trial and per cluster build, from the workload and the data size."""
    costs = {}
    for c in plan.configurations:
        s = exp.settings(c.levels)
        w, cluster = s["workload"], s["cluster"]
        target = cluster.target_bytes(getattr(s.get("os"), "memory_limit", None))
        if cluster.dump is not None:  # a restore: about as long as loading as much data
            target = cluster.dump.estimate_bytes()
        elif w.tool == "sysbench":  # its prepare: about as long as pgbench -i as much data
            target = room.data_bytes(s)
        scale = max(1, target // (16 * 1024**2)) if target is not None else cluster.scale
        restore = 1.0 + 0.03 * scale if w.writes else 0.0
        # standbys are cloned again after each restore: pg_basebackup took 0.7-1.3 s at
        # scale 10 and 2.7 s at scale 20 here, then a start and the catch-up wait
        n = s["replication"].standbys if "replication" in s else 0
        standbys = n * (0.5 + 0.13 * scale if w.writes else 0.3) + (1.0 if n else 0.0)
        measure = w.warmup_s + w.duration_s + 1.5 + restore + standbys
        window = max(exp.cpu_profile_s, exp.io_latency_s)
        if window:  # round 1's profile window and perf script, over the rounds
            measure += (window + 3.0) / max(exp.rounds, 1)
        costs[c.id] = TrialCost(measure=measure, build=4.0 + 0.35 * scale)
    return costs


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
