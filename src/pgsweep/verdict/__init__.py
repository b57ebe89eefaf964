"""One model per metric for pgsweep's verdicts: log(value) ~ round + configuration.

Every round runs every configuration once, close together in time, so the round is a block.
Fitting all configurations at once (least squares with dummy coding, so missing trials are
just missing rows) removes each round's level and pools the remaining noise over every
configuration: many more degrees of freedom than a paired t on two configurations, hence
tighter intervals at the same error rate. Contrasts are differences of logs, reported as
ratios.

Multiplicity: a report makes two kinds of claims per metric, "baseline" (every
configuration against the baseline) and "effects" (main effects first, then every
two-factor interaction contrast), judged together: one single-step max-|t| critical value
over all of them, computed from the contrasts' correlation (Dunnett's method,
generalised), holds the chance of any false "different" among the metric's verdicts at
`alpha`. A contrast is "different" exactly when its simultaneous interval excludes 1, so
the interval and the verdict cannot disagree.

Split-plot: factors whose levels need their own cluster ("whole-plot" factors) are compared
through the instances (clusters, filesystems) of each level. The model then has two
strata: instances (group x period) and trials within a group's round. A contrast's
whole-plot part is estimated from the instance means and their group x period
interaction (between-instance error); its within part from the trials. With one instance
per level for the whole run that interaction is round-to-round noise inside one build,
so such contrasts are no verdict ("unreplicated": the builds differ by so much, in this
run).

Sensitivity ("differences above 8% would have been detected with 80% power"): if the true
ratio moved by 8% or more, up or down, a repeat of this design (same rounds, same critical
value) calls it different with probability >= 80%, provided the noise SD is no larger
than its 80% upper confidence bound, from a chi-square on the noise estimate's effective
degrees of freedom (model.effective_df: the noise level of this machine wanders between
stretches of rounds); rounded up. Pooling is refused for clearly unequal noise (see
model._heterogeneity): each contrast then uses its own paired t. Values coarser than the
noise (latencies in whole microseconds) have their noise SD floored at the resolution's
rounding error, so no interval has zero width.

Modules: `model` (the fit and the contrast specifications), `dist` (the max-|t|
distribution, power and rounding), `families` (the families of claims), `words` (verdicts
and caveats), `levels` (per-configuration means), `noise` (the noise a plan is sized with),
`power` (sensitivity of a planned design); sequential looks and spending live in
`sequential`, sessions compared across runs in `sessions`, simulated experiments over
recorded noise in `simulate`. The names callers use are re-exported here."""

from .dist import (
    ALPHA,
    MC_BINS,
    MC_POINTS,
    MC_SEED,
    POWER,
    SD_CONFIDENCE,
    SMALL_ALPHA,
    Array,
    corr_key,
    max_t_quantile,
    max_t_sf,
    noncentrality,
    round_up,
    sd_upper,
)
from .families import (
    Contrast,
    Family,
    Level,
    baseline_family,
    effects_family,
    pair_contrast,
    report_families,
)
from .levels import ConfigMean, config_means
from .model import (
    HETERO_P,
    HETERO_RATIO,
    HETERO_SIMS,
    Model,
    Observations,
    baseline_specs,
    default_resolution,
    effect_specs,
    factor_levels,
    fit,
)
from .words import caveats, format_percent, interval_text, verdict

__all__ = [
    "ALPHA",
    "HETERO_P",
    "HETERO_RATIO",
    "HETERO_SIMS",
    "MC_BINS",
    "MC_POINTS",
    "MC_SEED",
    "POWER",
    "SD_CONFIDENCE",
    "SMALL_ALPHA",
    "Array",
    "ConfigMean",
    "Contrast",
    "Family",
    "Level",
    "Model",
    "Observations",
    "baseline_family",
    "baseline_specs",
    "caveats",
    "config_means",
    "corr_key",
    "default_resolution",
    "effect_specs",
    "effects_family",
    "factor_levels",
    "fit",
    "format_percent",
    "interval_text",
    "max_t_quantile",
    "max_t_sf",
    "noncentrality",
    "pair_contrast",
    "report_families",
    "round_up",
    "sd_upper",
    "verdict",
]
