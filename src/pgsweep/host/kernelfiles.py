"""Where the kernel keeps what the os layer changes and `pgsweep doctor` reads: THP menus,
huge page pools, sysctls, the page cache drop, the cgroup v1 memory controller."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .api import Host

THP = Path("/sys/kernel/mm/transparent_hugepage")
THP_FILES = {
    "thp": THP / "enabled",
    "thp_defrag": THP / "defrag",
    "thp_shmem": THP / "shmem_enabled",
}
SYSCTL = Path("/proc/sys")
DROP_CACHES = SYSCTL / "vm" / "drop_caches"
COMPACT_MEMORY = SYSCTL / "vm" / "compact_memory"  # a trigger: writing 1 compacts, once
CGROUP_V1_MEMORY = Path("/sys/fs/cgroup/memory")
HUGEPAGE_POOLS = Path("/sys/kernel/mm/hugepages")
HUGEPAGE_LEVELS = {"2MB": 2048, "1GB": 1024 * 1024}  # os.huge_pages level -> page size in kB


def hugepage_pool(kb: int) -> Path:
    return HUGEPAGE_POOLS / f"hugepages-{kb}kB"


def hugepage_levels(host: Host) -> list[str]:
    """The os.huge_pages levels the host's kernel has a pool for."""
    return ["off", *(lv for lv, kb in HUGEPAGE_LEVELS.items()
                     if (st := host.lstat(hugepage_pool(kb))) is not None and st.is_dir)]
