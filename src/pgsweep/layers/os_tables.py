"""The os layer's table ([os] and its factors) and its typed settings (oslayer.py)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..units import parse_size

if TYPE_CHECKING:
    from ..host.api import Host


class OsTable(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    huge_pages: Literal["off", "2MB", "1GB"] | None = Field(None, description="server shm pages")
    thp: str | None = Field(None, description="THP enabled: always | madvise | never")
    thp_defrag: str | None = Field(None, description="THP defrag")
    thp_shmem: str | None = Field(None, description="THP shmem_enabled (governs shared memory)")
    io_scheduler: str | None = Field(None, description="none | mq-deadline | bfq | kyber")
    read_ahead_kb: int | None = Field(None, ge=0, le=1 << 20)
    drop_caches: Literal["never", "before_trial"] = "never"
    memory_limit: int | str | None = Field(None, description='cgroup memory limit, e.g. "4GiB"')
    sysctl: dict[str, int | str] = Field(default_factory=dict)

    @field_validator("memory_limit")
    @classmethod
    def _size(cls, v: Any) -> Any:
        if v is not None and parse_size(v) < 64 * 1024**2:
            raise ValueError('a memory limit of at least 64MiB, e.g. "4GiB"')
        return v


def menu(host: Host, path: Path) -> list[str]:
    """The choices a menu file of the host offers: "always madvise [never]" -> all three."""
    return host.read_text(path).replace("[", "").replace("]", "").split()


@dataclass(frozen=True)
class OsSettings:
    used: bool  # any os setting in the file at all (they need root)
    huge_pages: str | None
    thp: dict[str, str]  # thp / thp_defrag / thp_shmem -> level
    io_scheduler: str | None
    read_ahead_kb: int | None
    drop_caches: bool
    memory_limit: int | None  # bytes
    sysctl: dict[str, str]  # name -> value
