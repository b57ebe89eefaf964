"""The reading side: from a results folder to what a report says (core: the model per
metric and its families of verdicts; design: what survives lost configurations; checks:
warnings; builds: the builds and phases tables; compare: two folders; planning and
trial_length: what a plan can detect, from recorded or pilot noise).

The model (core) loads scipy, about a second: it is imported when one of its names is
first used, so a command that only prints a plan or a table (and every module that only
needs the types) starts without it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .checks import CV_WARN
from .types import METRICS, NEGLIGIBLE_BYTES, WHOLE_PLOT_COSTS, Analysis, Config

if TYPE_CHECKING:
    from .core import analyse, complete_rounds, rebuild_every, replicated, stop_reason, tps_noise

_CORE = {"analyse", "complete_rounds", "rebuild_every", "replicated", "stop_reason", "tps_noise"}

__all__ = ["CV_WARN", "METRICS", "NEGLIGIBLE_BYTES", "WHOLE_PLOT_COSTS", "Analysis", "Config",
           "analyse", "complete_rounds", "rebuild_every", "replicated", "stop_reason",
           "tps_noise"]  # fmt: skip


def __getattr__(name: str) -> Any:
    if name in _CORE:
        from . import core

        return getattr(core, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
