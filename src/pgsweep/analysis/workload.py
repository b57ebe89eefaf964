"""Which tool ran the workload, which version of it, and what the verdicts judged: the
report names them (issue 27), from the experiment file as the run froze it and each
trial's record (the tool and its version, read back from its own output)."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from ..store import Results
from .types import METRICS

# What a tool's own words for its figures are; TPS is transactions/s for every tool
RATES = {"tps": "transactions/s", "sysbench.qps": "queries/s"}


def workload_info(results: Results, comparisons: list[dict[str, Any]]) -> dict[str, Any]:
    """{tool, versions, what (test or script, or "per configuration" when a factor), judged
    (the labels of the rate metrics verdicts were made on)}."""
    doc = tomllib.loads(results.experiment().file_text)
    table = doc.get("workload", {})
    tool = str(table.get("tool", "pgbench"))
    key, default = {"sysbench": ("test", "oltp_read_write"),
                    "pgreplay": ("replay", "")}.get(tool, ("script", "tpcb-like"))  # fmt: skip
    varied = key in doc.get("factors", {}).get("workload", {}) or f"workload.{key}" in doc.get(
        "factors", {})  # fmt: skip
    versions = sorted({t.effective["workload.tool_version"] for t in results.trials(ok_only=True)
                       if t.effective.get("workload.tool") == tool
                       and "workload.tool_version" in t.effective})  # fmt: skip
    judged = [METRICS[m][0] for m in RATES if any(c["metric"] == m for c in comparisons)]
    what = "per configuration" if varied else str(table.get(key, default))
    return {"tool": tool, "versions": versions, "what": Path(what).name if "/" in what else what,
            "judged": judged or ["TPS"]}  # fmt: skip


def workload_line(exp: dict[str, Any]) -> str:
    """One line for every report: "workload: sysbench 1.0.20, oltp_read_write; verdicts on
    TPS (transactions/s) and QPS (queries/s)"."""
    w = exp.get("workload")
    if not w:  # a report of a folder older than the field
        return ""
    tool = " ".join([w["tool"], *w["versions"][:1]])
    if len(w["versions"]) > 1:
        tool += f" (versions {', '.join(w['versions'])})"
    words = {label: RATES[m] for m, (label, _, _) in METRICS.items() if m in RATES}
    if w["tool"] == "pgreplay":  # its trials' TPS column holds replayed statements/s
        words["TPS"] = "here replayed statements/s"
    judged = [f"{label} ({words.get(label, '')})".replace(" ()", "") for label in w["judged"]]
    return f"workload: {tool}, {w['what']}; verdicts on {' and '.join(judged)}"
