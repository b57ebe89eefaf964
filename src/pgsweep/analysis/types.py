"""What the reading side passes around: the metrics a report judges, one configuration's
values, and the analysis a report renders (plain data: the JSON report is this)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

# metric -> (label, higher is better, unit); values per trial come from trial.tps or metric
METRICS: dict[str, tuple[str, bool, str]] = {
    "tps": ("TPS", True, "tx/s"),
    "sysbench.qps": ("QPS", True, "queries/s"),  # sysbench's queries/s (issue 27)
    "latency.p50_ms": ("p50 latency", False, "ms"),
    "latency.p95_ms": ("p95 latency", False, "ms"),
    "latency.p99_ms": ("p99 latency", False, "ms"),
    "io.device_bytes_written_per_tx": ("device bytes written / tx", False, "B"),
    "io.wal_bytes_per_tx": ("WAL bytes / tx", False, "B"),
}
# factors whose levels each need a cluster of their own (a build is compiled, then a cluster)
WHOLE_PLOT_COSTS = ("cluster", "build")
# A workload that writes less than this per transaction (select-only) writes next to
# nothing: ratios of such values are noise, so those trials are left out of the byte metrics.
NEGLIGIBLE_BYTES = 64.0


@dataclass
class Config:
    id: str
    levels: dict[str, Any]
    label: str
    group: int
    values: dict[str, dict[int, float]] = field(default_factory=dict)  # metric -> round -> v
    negligible: list[str] = field(default_factory=list)  # byte metrics under NEGLIGIBLE_BYTES
    summary: dict[str, dict[str, Any]] = field(default_factory=dict)
    failed: int = 0


@dataclass
class Analysis:
    experiment: dict[str, Any]
    factors: list[str]
    whole_plot_factors: list[str]  # factors whose levels each need a cluster of their own
    baseline: str
    configurations: list[Config]
    comparisons: list[dict[str, Any]]  # every configuration against the baseline
    effects: list[dict[str, Any]]  # main effects, then two-factor interactions
    rounds: list[dict[str, Any]]  # per round: the TPS level (geometric mean of the round)
    drift: dict[str, Any] | None
    method: dict[str, Any]
    warnings: list[str]
    # per configuration with standbys: lags, bytes behind, sync share, conflicts, stalls
    replication: list[dict[str, Any]] = field(default_factory=list)
    # per configuration: the PostgreSQL build it ran (only when some ran a build)
    builds: list[dict[str, Any]] = field(default_factory=list)
    # per configuration: bytes written while loading and while running (seed 3)
    phases: list[dict[str, Any]] = field(default_factory=list)
    # configuration id -> the levels that differ from the baseline's (headline.config_names)
    names: dict[str, str] = field(default_factory=dict)
    # the answer first: one sentence per factor, interaction and configuration called
    # different, each restating a verdict above (headline.headline)
    headline: list[dict[str, Any]] = field(default_factory=list)
    # The explain panels (issue 26): per comparison the report calls different, what changed
    # beside the verdict and why. Empty until analysis/explain.py fills it; the HTML report
    # renders it between the headline plot and the details (templates/explain.html.j2),
    # the terminal after the headline. Each panel: {"contrast": the verdict's contrast label,
    # "config": id or None, "sentence": one line in words, "rows": [{"name", "unit",
    # "before", "after", "change", "verdict"}, ...]} (rows as the template shows them, text).
    explain: list[dict[str, Any]] = field(default_factory=list)
    # a sharded or merged folder: its host groups, their rounds, the configuration x group test
    fleet: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, default=str, allow_nan=False)

    def main_effects(self, metric: str = "tps") -> list[dict[str, Any]]:
        return [e for e in self.effects if e["metric"] == metric and e["kind"] == "main"]

    def interactions(self, metric: str = "tps") -> list[dict[str, Any]]:
        return [e for e in self.effects if e["metric"] == metric and e["kind"] == "interaction"]
