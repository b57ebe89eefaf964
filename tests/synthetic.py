"""Results folders written through the real store from numbers a test chooses: reports,
drift warnings and plots are tested on them where a real run could not give the numbers
(a trend across rounds, a trial of 0 TPS, a level that reads as mathtext)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import numpy as np

from pgsweep.core import Cost
from pgsweep.plan import Adaptive, PlanFactor, make_plan
from pgsweep.store import Store, TrialRecord


def make_results(
    folder: Path,
    factors: dict[str, list[Any]],
    tps: dict[tuple[int, int], float],
    rounds: int,
    *,
    name: str = "synthetic",
    cost: Cost = Cost.RESTART,
    metrics: dict[tuple[int, int], dict[str, float]] | None = None,
    adaptive: Adaptive | None = None,
    last_round: int | None = None,
    per_second: dict[tuple[int, int], list[float]] | None = None,
    skip: set[tuple[int, int]] | None = None,
    order_values: Any = None,
) -> Path:
    """A results folder whose trial (configuration index, round) has TPS tps[(c, r)];
    configurations in factorial order, as `pgsweep run` numbers them. With
    `order_values`, the n-th trial in run order has TPS 1000 exp(order_values[n - 1])."""
    folder.mkdir(parents=True, exist_ok=True)
    plan = make_plan([PlanFactor(n, tuple(v), cost) for n, v in factors.items()], rounds, 1,
                     adaptive=adaptive)  # fmt: skip
    store = Store(folder / "results.db")
    # a fixture, not a run: no fsync per trial (a real run's store keeps FULL: a trial is
    # on disk before the next starts); under the suite's parallel lanes the fsyncs were
    # most of these tests' time
    store.db.execute("PRAGMA synchronous = OFF")
    text = f'[experiment]\nname = "{name}"\n'
    store.write_experiment(
        {"name": name, "file_text": text, "fingerprint": "{}", "seed": 1,
         "plan_json": plan.to_json(), "created_at": "2026-11-22T00:00:00+00:00",
         "pgsweep_version": "test", "postgres_version": "15.18"},
        [(c.id, c.label(), json.dumps(c.levels), c.group) for c in plan.configurations],
    )  # fmt: skip
    index = {c.id: i for i, c in enumerate(plan.configurations)}
    clock = itertools.count()
    for t in plan.trials:
        if last_round is not None and t.round > last_round:
            break
        key = (index[t.config], t.round)
        if skip and key in skip:  # never run: the run was cut short there
            continue
        at = f"2026-11-22T00:{next(clock) // 60:02d}:{next(clock) % 60:02d}+00:00"
        value = 1000 * float(np.exp(order_values[t.order - 1])) if order_values is not None else (
            tps[key])  # fmt: skip
        record = TrialRecord(t.id, t.order, t.round, t.config, "ok", at, at, tps=value)
        record.metrics = dict((metrics or {}).get(key, {}))
        if per_second:  # pgbench's progress lines, one a second
            series = per_second[key]
            record.duration_s = len(series)
            record.samples = [(i + 1.0, v, None, None, None, None, None)
                              for i, v in enumerate(series)]  # fmt: skip
        store.save_trial(record)
    store.close()
    return folder
