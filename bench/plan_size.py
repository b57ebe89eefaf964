"""How long the planner takes for the largest plans pgsweep accepts (spec.MAX_CONFIGURATIONS
configurations, spec.MAX_TRIALS trials): planning must stay linear in the trials."""

from __future__ import annotations

import time

from pgsweep.core import Cost
from pgsweep.plan import PlanFactor, TrialCost, estimate_seconds, make_plan
from pgsweep.spec import MAX_CONFIGURATIONS, MAX_TRIALS


def main() -> None:
    print(f"limits: {MAX_CONFIGURATIONS:,} configurations, {MAX_TRIALS:,} trials")
    for configs, rounds in ((100, 10), (1_000, 10), (10_000, 10)):
        factors = [
            PlanFactor("server.work_mem", tuple(f"{i}MB" for i in range(1, configs // 10 + 1)),
                       Cost.RELOAD),
            PlanFactor("cluster.scale", tuple(range(1, 11)), Cost.CLUSTER),
        ]  # fmt: skip
        began = time.perf_counter()
        plan = make_plan(factors, rounds, seed=1)
        planned = time.perf_counter() - began
        costs = {c.id: TrialCost(10.0, 30.0) for c in plan.configurations}
        began = time.perf_counter()
        estimate_seconds(plan, costs)
        estimated = time.perf_counter() - began
        size = f"{len(plan.configurations):>6,} configurations x {rounds} rounds"
        print(f"{size} = {len(plan.trials):>7,} trials: plan {planned:6.3f} s, "
              f"estimate {estimated:6.3f} s")  # fmt: skip


if __name__ == "__main__":
    main()
