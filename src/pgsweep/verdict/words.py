"""The words a report prints for a contrast: percentages (format_percent, interval_text),
the verdict sentence ("faster: +40.2% [+31.0%, +49.9%]", "equivalent within 2.5%: ...",
"no significant difference ...; differences above 8% would have been detected with 80%
power"; never "equal"; for a contrast across levels built once, the difference of those
builds and how to make it a verdict) and the caveats that belong next to it."""

from __future__ import annotations

from .dist import POWER
from .families import DETECT_CAP, Contrast

REPLICATE = 'rebuild = "per_round" or "auto" in [repeat]'


def format_percent(fraction: float) -> str:
    """0.025 -> "2.5%", 0.02 -> "2%": margins and sensitivities as given, never rounded."""
    return f"{round(fraction * 100, 9):g}%"


def _pct(ratio: float, digits: int) -> str:
    value = (ratio - 1) * 100
    return f"{0.0 if round(value, digits) == 0 else value:+.{digits}f}%"  # never "-0.0%"


def interval_text(c: Contrast) -> str:
    """Like "+40.2% [+31.0%, +49.9%]": one decimal, or more where one decimal would print a
    zero-width interval or a decided interval touching 0."""
    for digits in (1, 2, 3, 4):
        lo, hi = _pct(c.low, digits), _pct(c.high, digits)
        zero = f"{0.0:+.{digits}f}%"
        if lo != hi and not (c.decision == "different" and zero in (lo, hi)):
            break
    return f"{_pct(c.ratio, digits)} [{lo}, {hi}]"


def verdict(c: Contrast, higher_is_better: bool) -> str:
    """Words a DBA can forward: "faster: +40.2% [+31.0%, +49.9%]", "lower: ..." for a
    lower-is-better metric, "equivalent within 2.5%: ...", or "no significant difference
    (...); differences above 8% would have been detected with 80% power". Never "equal"."""
    text = interval_text(c)
    if c.decision == "unreplicated":
        return (f"not a verdict: these builds differ by {text} in this run (one build per "
                f"level); to generalise to the configuration, replicate ({REPLICATE})")  # fmt: skip
    if c.decision == "different":
        up = c.ratio > 1
        word = ("faster" if up else "slower") if higher_is_better else ("higher" if up else "lower")
        return f"{word}: {text}"
    if c.decision == "equivalent" and c.margin is not None:
        return f"equivalent within {format_percent(c.margin)}: {text}"
    if c.detectable >= DETECT_CAP:
        return (f"no significant difference ({text}); too few rounds to detect even a "
                f"{format_percent(DETECT_CAP)} difference")  # fmt: skip
    seen = f"{format_percent(c.detectable)} would have been detected with {POWER:.0%} power"
    return f"no significant difference ({text}); differences above {seen}"


def caveats(c: Contrast) -> list[str]:
    """What a report should say next to the verdict."""
    out = []
    if c.error == "within-run only":
        out.append("the interval covers run-to-run noise only: each level ran on one cluster "
                   "build, so build-to-build differences are not in it and no verdict is "
                   f"given ({REPLICATE})")  # fmt: skip
    if c.floored:
        out.append("the values are coarser than the noise: the interval uses the measurement "
                   "resolution instead of the (smaller) observed spread")  # fmt: skip
    if c.replicates < 3:
        out.append(f"rests on {c.replicates} independent replicate(s)")
    return out
