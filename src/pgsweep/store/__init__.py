"""The results store: `db` holds the schema, its migrations and the writer the run loop
uses; `results` is the typed, read-only API everything that reports reads through."""

from __future__ import annotations

from .db import MIGRATIONS, SCHEMA_VERSION, SECOND_COLUMNS, Store, TrialRecord
from .results import (
    TPS,
    Configuration,
    Experiment,
    Fact,
    LatencyBin,
    ProcessCpu,
    Results,
    Sample,
    Second,
    StandbySecond,
    Trial,
    Wait,
)

__all__ = [
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "SECOND_COLUMNS",
    "TPS",
    "Configuration",
    "Experiment",
    "Fact",
    "LatencyBin",
    "ProcessCpu",
    "Results",
    "Sample",
    "Second",
    "StandbySecond",
    "Store",
    "Trial",
    "TrialRecord",
    "Wait",
]
