"""Counters read before and after a trial's measured window; each source returns a flat
{name: number} snapshot, and a trial stores the differences."""

from . import _numba_cache  # noqa: F401  (sets NUMBA_CACHE_DIR before any module here loads numba)
