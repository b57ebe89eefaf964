"""The results store: `db` holds the schema, its migrations and the writer the run loop
uses; `results` is the typed, read-only API everything that reports reads through."""

from __future__ import annotations

from .db import SECOND_COLUMNS, Store, TrialRecord
from .results import TPS, Configuration, Experiment, Fact, Results, Trial
from .rows import (
    DeviceSecond,
    LatencyBin,
    ProcessCpu,
    Sample,
    Second,
    StandbySecond,
    ToolSecond,
    Wait,
)
from .schema import MIGRATIONS, SCHEMA_VERSION

__all__ = [
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "SECOND_COLUMNS",
    "TPS",
    "Configuration",
    "DeviceSecond",
    "Experiment",
    "Fact",
    "LatencyBin",
    "ProcessCpu",
    "Results",
    "Sample",
    "Second",
    "StandbySecond",
    "Store",
    "ToolSecond",
    "Trial",
    "TrialRecord",
    "Wait",
]
