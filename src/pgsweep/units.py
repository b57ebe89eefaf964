"""Durations and sizes as people write them in an experiment file."""

from __future__ import annotations

import math
import re

# the forms of a duration and a size; spec/schema.py gives them to TOML editors too
DURATION_PATTERN = r"^\s*(\d+(?:\.\d+)?)\s*(us|ms|s|sec|min|h|d)?\s*$"
_DURATION = re.compile(DURATION_PATTERN)
MAX_SECONDS = 30 * 86400  # beyond a month a duration is a mistake (pgbench -T is an int)
_FACTORS = {"us": 1e-6, "ms": 0.001, "s": 1.0, "sec": 1.0, "min": 60.0, "h": 3600.0,
            "d": 86400.0, None: 1.0}  # PostgreSQL's time units (recovery_min_apply_delay)


def parse_duration(value: object, *, default_unit: str = "s") -> float:
    """Seconds from 30, "30s", "2min", "1h", "500ms". ValueError with the accepted forms."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError('a duration such as 30, "30s", "2min" or "1h"')
    if isinstance(value, int | float):
        seconds = float(value) * _FACTORS[default_unit]
    else:
        m = _DURATION.match(value)
        if not m:
            raise ValueError('a duration such as 30, "30s", "2min" or "1h"')
        seconds = float(m.group(1)) * _FACTORS[m.group(2) or default_unit]
    if not math.isfinite(seconds) or seconds > MAX_SECONDS:
        raise ValueError(f"a finite duration, at most {MAX_SECONDS // 86400} days")
    if seconds < 0:
        raise ValueError("a duration that is not negative")
    return seconds


def human_seconds(seconds: float) -> str:
    seconds = round(seconds)
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    if h:
        return f"{h}h{m:02d}m"
    if m:
        return f"{m}m{s:02d}s"
    return f"{s}s"


SIZE_PATTERN = r"^\s*(\d+(?:\.\d+)?)\s*(B|kB|KiB|K|MB|MiB|M|GB|GiB|G|TB|TiB|T)?\s*$"
_SIZE = re.compile(SIZE_PATTERN)
_SIZES = {None: 1, "B": 1, "kB": 1024, "KiB": 1024, "MB": 1024**2, "MiB": 1024**2,
          "GB": 1024**3, "GiB": 1024**3, "TB": 1024**4, "TiB": 1024**4,
          "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}  # zfs writes "8K"  # fmt: skip
_RAM_SHARE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*%\s*of\s+RAM\s*$", re.IGNORECASE)


def parse_size(value: object) -> int:
    """Bytes from 1048576, "512MB", "4GiB" (kB/MB/GB mean 1024-based, as in PostgreSQL)."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError('a size such as "512MB" or "4GiB"')
    if isinstance(value, int):
        return value
    m = _SIZE.match(value)
    if not m:
        raise ValueError('a size such as "512MB" or "4GiB"')
    return int(float(m.group(1)) * _SIZES[m.group(2)])


def ram_share(value: object) -> float | None:
    """0.5 for "50% of RAM"; None for anything else."""
    m = _RAM_SHARE.match(value) if isinstance(value, str) else None
    return float(m.group(1)) / 100 if m else None


def memory_total() -> int:
    """Bytes of RAM (MemTotal)."""
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    raise OSError("/proc/meminfo has no MemTotal")
