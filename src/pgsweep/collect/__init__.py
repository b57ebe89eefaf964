"""Counters read before and after a trial's measured window; each source returns a flat
{name: number} snapshot, and a trial stores the differences."""
