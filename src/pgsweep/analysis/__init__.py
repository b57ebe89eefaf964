"""The reading side: from a results folder to what a report says (core: the model per
metric and its families of verdicts; design: what survives lost configurations; checks:
warnings; builds: the builds and phases tables; compare: two folders; planning and
trial_length: what a plan can detect, from recorded or pilot noise)."""

from .checks import CV_WARN
from .core import analyse, complete_rounds, rebuild_every, replicated, stop_reason, tps_noise
from .types import METRICS, NEGLIGIBLE_BYTES, WHOLE_PLOT_COSTS, Analysis, Config

__all__ = ["CV_WARN", "METRICS", "NEGLIGIBLE_BYTES", "WHOLE_PLOT_COSTS", "Analysis", "Config",
           "analyse", "complete_rounds", "rebuild_every", "replicated", "stop_reason",
           "tps_noise"]  # fmt: skip
