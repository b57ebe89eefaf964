"""Huge pages for the server's shared memory (`os.huge_pages = "off" | "2MB" | "1GB"`).

For "2MB"/"1GB" the server is asked how many pages its shared memory needs with the
trial's settings (`postgres -C shared_memory_size_in_huge_pages`, server stopped), exactly
that many pages are added to the kernel's pool through the undo journal, and the server is
started with `huge_pages = on` and the matching `huge_page_size`; after start the
postmaster's /proc/PID/smaps must show the mapping in pages of that size. "off" starts the
server with `huge_pages = off` and gives pgsweep's pages back."""

from __future__ import annotations

import resource
from pathlib import Path

from ..host.api import Host
from ..host.journal import UndoJournal
from ..host.kernelfiles import (
    COMPACT_MEMORY,
    DROP_CACHES,
    HUGEPAGE_LEVELS,
    hugepage_levels,
    hugepage_pool,
)
from .context import TrialContext, TrialFailure

LEVELS = HUGEPAGE_LEVELS  # level -> page size in kB
MEMINFO = Path("/proc/meminfo")
KEEP_FREE_KB = 512 * 1024  # never reserve the machine's last half GiB


pool = hugepage_pool
offered = hugepage_levels


def _mem_available_kb(host: Host) -> int:
    for line in host.read_text(MEMINFO).splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1])
    return 0


def _boot_hint(level: str, pages: int) -> str:
    size = "1G" if level == "1GB" else "2M"
    return (
        f"Free memory (stop what holds it), or reserve them at boot with the kernel "
        f"command line 'hugepagesz={size} hugepages={pages}'"
    )


def _make_room(host: Host, drop_cache: bool, events: list[str]) -> None:
    """What a DBA does before asking again: write back and drop the page cache (when the
    trial does not depend on it), then compact memory. Neither changes a setting, so
    neither needs putting back."""
    if drop_cache:
        host.sync()
        host.write_kernel(DROP_CACHES, "3")
        events.append("drop-caches")
    host.write_kernel(COMPACT_MEMORY, "1")
    events.append("compact-memory")


def server_settings(level: str) -> dict[str, str]:
    """What the server starts with at a level of os.huge_pages."""
    if level == "off":
        return {"huge_pages": "off"}
    return {"huge_pages": "on", "huge_page_size": level}


class HugePages:
    """The pool sizes pgsweep set on one host in one run, and what they were before it
    touched them (kept in the run's context: layers/oslayer.py's OsRun)."""

    def __init__(self) -> None:
        self.original: dict[int, int] = {}  # page size kB -> nr_hugepages before pgsweep

    def reserve(self, level: str, pages: int, journal: UndoJournal, events: list[str],
                may_drop_cache: bool) -> int:  # fmt: skip
        """Size the pools for a server (stopped) about to start at `level` needing `pages`
        pages (computed when the file was validated, on a scratch cluster: never from the
        running cluster's directory, whose postgresql.auto.conf the server user writes);
        return the pages reserved. A reservation that comes up short is retried once after
        compacting memory (and dropping the page cache first when `may_drop_cache`: the
        trial warms up before its window, or starts cold anyway), as a DBA would. Fails the
        trial, pools unchanged, when the kernel still cannot provide them."""
        wanted = LEVELS.get(level)
        for kb in list(self.original):
            if kb != wanted:
                self._set(kb, self.original[kb], journal)  # give back what the last level took
        if wanted is None:
            return 0
        host = journal.host
        nr = pool(wanted) / "nr_hugepages"
        before = int(host.read_setting(nr))
        base = self.original.setdefault(wanted, before)
        target = base + pages
        extra_kb = (target - before) * wanted
        available = _mem_available_kb(host)
        if extra_kb > 0 and extra_kb > available - KEEP_FREE_KB:
            raise TrialFailure(
                f"os.huge_pages={level}: the server's shared memory needs {pages} pages of "
                f"{level} ({pages * wanted // 1024} MiB) but only {available // 1024} MiB of "
                f"memory is available (pgsweep leaves {KEEP_FREE_KB // 1024} MiB free); "
                f"nothing was reserved. Lower shared_buffers or free memory."
            )
        self._set(wanted, target, journal)
        tries = [f"{int(host.read_setting(nr)) - base}"]
        if int(host.read_setting(nr)) < target:
            remedy = "dropping the page cache and compacting memory" if may_drop_cache \
                else "compacting memory"  # fmt: skip
            _make_room(host, may_drop_cache, events)
            self._set(wanted, target, journal)
            tries.append(f"{int(host.read_setting(nr)) - base} after {remedy}")
        got = int(host.read_setting(nr))
        if got < target:
            self._set(wanted, before, journal)  # give back the partial reservation
            raise TrialFailure(
                f"os.huge_pages={level}: the server needs {pages} pages of {level}; the kernel "
                f"reserved {', then '.join(tries)} (memory too fragmented, or {level} pages "
                f"not allowed at runtime); the pages were given back. " + _boot_hint(level, pages)
            )
        return pages

    def _set(self, kb: int, count: int, journal: UndoJournal) -> None:
        nr = pool(kb) / "nr_hugepages"
        if int(journal.host.read_setting(nr)) != count:
            journal.set(nr, str(count))

    def release(self, journal: UndoJournal) -> None:
        for kb, count in self.original.items():
            self._set(kb, count, journal)
        self.original.clear()


def verify(level: str, trial: TrialContext) -> None:
    """After start: the postmaster's shared memory is (or, for "off", is not) mapped in
    pages of the level's size. PostgreSQL 15 logs nothing either way, so look."""
    cluster = trial.cluster
    pid = cluster.postmaster_pid()
    if pid is None:
        raise TrialFailure("os.huge_pages: the server is not running after start")
    mapped = hugetlb_mappings(trial.run.host.read_text(Path(f"/proc/{pid}/smaps")))
    wanted = LEVELS.get(level)
    if wanted is None:
        if mapped:
            raise TrialFailure(f"os.huge_pages=off, but the server maps huge pages: {mapped}")
        trial.effective["os.huge_pages"] = "off (no huge page mappings)"
        return
    size = mapped.get(wanted, 0)
    if size == 0:
        raise TrialFailure(
            f"os.huge_pages={level}: the server started but maps no {level} pages "
            f"(its hugetlb mappings: {mapped or 'none'})",
            cluster.log_tail(),
        )
    trial.effective["os.huge_pages"] = f"{level}: {size // wanted} pages mapped ({size} kB)"


def hugetlb_mappings(smaps: str) -> dict[int, int]:
    """kB mapped per huge page size (KernelPageSize above the base page: hugetlb, not THP,
    which smaps shows with base kernel pages and AnonHugePages)."""
    base_kb = resource.getpagesize() // 1024
    out: dict[int, int] = {}
    size = 0
    for line in smaps.splitlines():
        if line.startswith("Size:"):
            size = int(line.split()[1])
        elif line.startswith("KernelPageSize:"):
            kb = int(line.split()[1])
            if kb > base_kb:
                out[kb] = out.get(kb, 0) + size
    return out
