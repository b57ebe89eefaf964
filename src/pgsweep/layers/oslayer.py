"""The `os` layer: Transparent Huge Pages, the I/O scheduler and read-ahead of the devices
under PGDATA and pg_wal, any sysctl, dropping the page cache before a trial, and a memory
limit (the server in a cgroup v1 memory group). Every kernel value and the cgroup go
through the undo journal, so they are put back at the end of the run, on Ctrl-C or error,
and after kill -9 by the next run or `pgsweep restore`. Huge pages are in hugepages.py."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..collect import devices
from ..core import Cost, Value
from ..errors import PgsweepError
from ..host.journal import UndoJournal, read_setting
from ..trialenv import TrialEnv, TrialFailure
from ..units import parse_size
from . import hugepages
from .base import Layer, ValidationContext, check_table
from .server import as_pg_value

THP = Path("/sys/kernel/mm/transparent_hugepage")
THP_FILES = {
    "thp": THP / "enabled",
    "thp_defrag": THP / "defrag",
    "thp_shmem": THP / "shmem_enabled",
}
SYSCTL = Path("/proc/sys")
DROP_CACHES = SYSCTL / "vm" / "drop_caches"
CGROUP_V1_MEMORY = Path("/sys/fs/cgroup/memory")


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


# Sysctls an experiment may set: the ones that shape performance. Never those that name a
# program or path the kernel runs or writes as root (core_pattern, modprobe), switch off a
# protection, stop the machine, or that pgsweep manages itself.
SYSCTL_PREFIXES = ("vm.", "kernel.sched_", "kernel.numa_balancing", "kernel.shm", "kernel.sem",
                   "kernel.msg", "fs.", "net.")  # fmt: skip
SYSCTL_REFUSED = re.compile(
    r"^(vm\.(drop_caches|nr_hugepages|nr_overcommit_hugepages|panic_on_oom|mmap_min_addr"
    r"|nr_hugepages_mempolicy)|fs\.(suid_dumpable|protected_\w+|binfmt_misc\..*)"
    r"|kernel\.(core_pattern|modprobe|hotplug|poweroff_cmd|usermodehelper\..*))$"
)
_SYSCTL_NAME = re.compile(r"^[a-z][a-z0-9_]*(\.[A-Za-z0-9_-]+)+$")


def sysctl_file(name: str) -> Path:
    """/proc/sys/NAME with dots as slashes; ValueError when the name is not a sysctl's, or
    the file it names is not under /proc/sys."""
    if not _SYSCTL_NAME.match(name):
        raise ValueError("letters, digits, _ and -, joined by dots (e.g. vm.swappiness)")
    path = SYSCTL / name.replace(".", "/")
    if not str(path.resolve()).startswith(f"{SYSCTL}/"):
        raise ValueError(f"{path} resolves outside {SYSCTL}")
    return path


def sysctl_refusal(name: str) -> str | None:
    """Why an experiment may not set this sysctl, or None."""
    if SYSCTL_REFUSED.match(name):
        return "it names a program or file the kernel uses as root, weakens a protection, " \
               "or is one pgsweep manages (os.drop_caches, os.huge_pages)"
    if not name.startswith(SYSCTL_PREFIXES):
        return f"pgsweep sets only sysctls under {', '.join(SYSCTL_PREFIXES)}"
    return None


def menu(path: Path) -> list[str]:
    """The choices a menu file offers: "always madvise [never]" -> all three."""
    return path.read_text().replace("[", "").replace("]", "").split()


class OsLayer(Layer):
    name = "os"

    def __init__(self) -> None:
        self.journal: UndoJournal | None = None
        self.limit: int | None = None  # bytes of the memory limit in force
        self.used: set[str] = set()  # keys set in the file, base or factor
        self.huge = hugepages.HugePages()
        self.huge_key: str | None = None  # level and restart settings the pools are sized for
        self.huge_pages = 0  # pages reserved for the server now
        self.restart_settings: set[str] = set()  # server settings only a restart changes
        self.factor_keys: set[str] = set()

    def validate(
        self, base: dict[str, Any], factors: dict[str, list[Any]], ctx: ValidationContext
    ) -> dict[str, Value]:
        sysctl_base = base.get("sysctl", {})
        plain = {k: v for k, v in factors.items() if not k.startswith("sysctl.")}
        table = check_table(OsTable, self.name, base, plain, ctx.source)
        values: dict[str, Value] = {k: v for k, v in table.model_dump().items() if k != "sysctl"}
        values.update({f"sysctl.{k}": v for k, v in sysctl_base.items()})
        self.used = {k for k, v in values.items() if v is not None and k != "drop_caches"}
        self.used |= set(factors)
        self.factor_keys = set(factors)
        if values["drop_caches"] != "never" or "drop_caches" in factors:
            self.used.add("drop_caches")
        if self.used and os.geteuid() != 0:
            names = ", ".join(f"os.{k}" for k in sorted(self.used))
            raise ctx.source.error(
                ("os",) if base else ("factors", "os"),
                f"these os factors change the kernel and need root: {names}",
                fix="run pgsweep as root, or remove the os settings",
            )
        limits = [values.get("memory_limit"), *factors.get("memory_limit", [])]
        if (
            any(v is not None for v in limits)
            and not (CGROUP_V1_MEMORY / "memory.limit_in_bytes").exists()
        ):
            raise ctx.source.error(
                ("factors", "os", "memory_limit")
                if "memory_limit" in factors
                else ("os", "memory_limit"),
                "os.memory_limit needs the cgroup v1 memory controller at "
                f"{CGROUP_V1_MEMORY}, which this machine does not have mounted",
                fix="mount it (mount -t cgroup -o memory cgroup /sys/fs/cgroup/memory) or "
                "remove os.memory_limit; `pgsweep doctor` shows the cgroups here",
            )
        for level in [values.get("huge_pages"), *factors.get("huge_pages", [])]:
            if level is not None and level not in hugepages.offered():
                raise ctx.source.error(
                    ("factors", "os", "huge_pages") if "huge_pages" in factors
                    else ("os", "huge_pages"),
                    f"this kernel has no pool of {level} huge pages "
                    f"(no {hugepages.pool(hugepages.LEVELS[level])})",
                    expected=f"one of {', '.join(hugepages.offered())}",
                    fix="pick a size `pgsweep doctor` lists",
                )  # fmt: skip
        self.restart_settings = {
            name for name, s in ctx.binaries.settings.items()
            if s.context in ("postmaster", "internal")
        }  # fmt: skip
        for key, path in THP_FILES.items():
            for level in [values.get(key), *factors.get(key, [])]:
                if level is not None and level not in menu(path):
                    raise ctx.source.error(
                        ("factors", "os", key) if key in factors else ("os", key),
                        f"{path} offers no {level!r}",
                        expected=f"one of {', '.join(menu(path))}",
                    )
        for key in [k for k in values if k.startswith("sysctl.")] + [
            k for k in factors if k.startswith("sysctl.")
        ]:
            self._check_sysctl(key, ctx, in_factors=key in factors)
        return values

    def _check_sysctl(self, key: str, ctx: ValidationContext, in_factors: bool) -> None:
        name = key.split(".", 1)[1]
        where = ("factors", "os", "sysctl", name) if in_factors else ("os", "sysctl", name)
        try:
            path = sysctl_file(name)
        except ValueError as exc:
            raise ctx.source.error(where, f"{name!r} is not a sysctl name: {exc}",
                                   expected="a name such as vm.swappiness") from None  # fmt: skip
        refusal = sysctl_refusal(name)
        if refusal:
            raise ctx.source.error(where, f"sysctl {name} cannot be set here: {refusal}",
                                   fix="remove it from the experiment file")  # fmt: skip
        if not path.is_file():
            raise ctx.source.error(where, f"there is no sysctl {name!r} ({path} does not exist)",
                                   fix="check the name with `sysctl -a`")  # fmt: skip
        if not path.stat().st_mode & 0o200:
            raise ctx.source.error(where, f"sysctl {name} is read-only",
                                   fix="remove it from the experiment file")  # fmt: skip

    def check_configurations(
        self, configs: list[dict[str, dict[str, Value]]], ctx: ValidationContext
    ) -> None:
        """os.huge_pages owns the server's huge_pages settings; shared memory (charged to the
        cgroup unless it is in huge pages) must fit under os.memory_limit."""
        checked: dict[str, int] = {}
        for values in configs:
            mine, server = values[self.name], values["server"]
            if mine.get("huge_pages") is not None:
                for name in ("huge_pages", "huge_page_size"):
                    if name in server:
                        raise ctx.source.error(
                            ctx.where.get(f"server.{name}", ("server", name)),
                            f"os.huge_pages sets the server's {name} itself",
                            fix=f"remove server.{name}, or remove os.huge_pages",
                        )  # fmt: skip
            limit = mine.get("memory_limit")
            if limit is None or mine.get("huge_pages") in ("2MB", "1GB"):
                continue
            settings = {k: as_pg_value(v) for k, v in server.items()}
            key = repr(sorted(settings.items()))
            if key not in checked:
                checked[key] = ctx.checker.shared_memory_mb(settings)
            if checked[key] * 1024**2 >= parse_size(limit):
                shown = ", ".join(f"{k}={v}" for k, v in sorted(settings.items())) or "defaults"
                raise ctx.source.error(
                    ("factors", "os", "memory_limit") if "memory_limit" in self.factor_keys
                    else ("os", "memory_limit"),
                    f"os.memory_limit={limit} cannot hold the server's shared memory alone: "
                    f"{checked[key]} MB (postgres -C shared_memory_size, with {shown})",
                    fix="raise the limit or lower shared_buffers in that configuration",
                )  # fmt: skip

    def check_host(self, workdir: Path, values: list[dict[str, Value]]) -> None:
        """Before anything runs: every scheduler level must be offered by the devices the
        clusters will live on."""
        queues = _queues(workdir)
        for v in values:
            level = v.get("io_scheduler")
            for dev, queue in queues.items():
                if level is not None and level not in menu(queue / "scheduler"):
                    raise PgsweepError(
                        f"os.io_scheduler {level!r} is not offered by {dev}, which holds {workdir}",
                        where=str(queue / "scheduler"),
                        expected=f"one of {', '.join(menu(queue / 'scheduler'))}",
                        fix="pick a scheduler the device lists (`modprobe` may add bfq/kyber)",
                    )

    def level_identity(self, key: str, level: Value) -> object:
        return parse_size(level) if key == "memory_limit" else repr(level)

    def cost(self, key: str) -> Cost:
        if key == "huge_pages":
            return Cost.RESERVE
        return Cost.RESTART if key in THP_FILES or key == "memory_limit" else Cost.NOTHING

    def apply(self, values: dict[str, Value], env: TrialEnv) -> None:
        if not self.used:
            return
        self.journal = self.journal or UndoJournal.for_this_run()
        cluster = env.require_cluster()
        thp_change = any(
            values.get(k) is not None and read_setting(p) != values[k] for k, p in THP_FILES.items()
        )
        limit = values.get("memory_limit")
        limit_change = (parse_size(limit) if limit is not None else None) != self.limit
        drop = values.get("drop_caches") == "before_trial" or (limit_change and limit is not None)
        huge_key = self._huge_key(values.get("huge_pages"), env)
        huge_change = huge_key != self.huge_key
        if (thp_change or drop or limit_change or huge_change) and cluster.postmaster_pid():
            cluster.stop()  # shared memory is mapped at start: THP applies to a new server
            env.server_settings = None
        targets: list[tuple[str, Path, Value]] = [
            (k, p, values[k]) for k, p in THP_FILES.items() if values.get(k) is not None
        ]
        targets += [(k, sysctl_file(k.split(".", 1)[1]), v) for k, v in values.items()
                    if k.startswith("sysctl.")]  # fmt: skip
        for dev, queue in _queues(cluster).items():
            for key, file in (("io_scheduler", "scheduler"), ("read_ahead_kb", "read_ahead_kb")):
                if values.get(key) is not None:
                    targets.append((f"{key}.{dev}", queue / file, values[key]))
        for key, path, value in targets:
            self._set(key, path, str(value), env)
        self._memory_limit(limit, cluster, env)
        if huge_change:
            self._huge_pages(values.get("huge_pages"), huge_key, env)
        if self.huge_pages:
            env.effective["os.huge_pages.reserved"] = str(self.huge_pages)
        if drop:  # page cache is charged to its first reader: start the limited server cold
            os.sync()
            DROP_CACHES.write_text("3")
            env.events.append("drop-caches")

    def _huge_key(self, level: Value | None, env: TrialEnv) -> str | None:
        """What the pools are sized for: the level and the settings only a restart changes
        (a reload cannot change shared memory, so it needs no new reservation)."""
        if level is None:
            return None
        server = env.values.get("server", {})
        fixed = {k: as_pg_value(v) for k, v in server.items()
                 if k in self.restart_settings or k not in env.binaries.settings}  # fmt: skip
        return repr((level, sorted(fixed.items())))

    def _huge_pages(self, level: Value | None, key: str | None, env: TrialEnv) -> None:
        """Size the huge page pools for this trial's server (stopped by now)."""
        assert self.journal is not None
        self.huge_key, self.huge_pages = None, 0  # until the reservation succeeded
        if level is None:
            self.huge.release(self.journal)
            env.server_overrides = {}
            return
        server = {k: as_pg_value(v) for k, v in env.values.get("server", {}).items()}
        env.server_settings = None
        env.server_overrides = {}
        self.huge_pages = self.huge.reserve(str(level), server, env.require_cluster(),
                                            self.journal)  # fmt: skip
        env.server_overrides = self.huge.server_settings(str(level))
        env.events.append(f"huge-pages-{level}")
        self.huge_key = key

    def verify(self, values: dict[str, Value], env: TrialEnv) -> None:
        if values.get("huge_pages") is not None:
            hugepages.verify(str(values["huge_pages"]), env)

    def _memory_limit(self, limit: Value | None, cluster: Any, env: TrialEnv) -> None:
        """The server of a limited configuration starts in a cgroup pgsweep made, with
        memory.limit_in_bytes set; peak and failures are reset for each trial."""
        assert self.journal is not None
        if limit is None:
            cluster.cgroup = env.cgroup = None
            self.limit = None
            return
        group = CGROUP_V1_MEMORY / f"pgsweep-{os.getpid()}"
        if not group.exists():
            self.journal.made_dir(group)
            if env.user is not None:
                os.chown(group / "cgroup.procs", env.user.uid, env.user.gid)
        self.limit = parse_size(limit)
        (group / "memory.limit_in_bytes").write_text(str(self.limit))
        for counter in ("memory.max_usage_in_bytes", "memory.failcnt"):
            (group / counter).write_text("0")
        cluster.cgroup = env.cgroup = group
        env.effective["os.memory_limit"] = read_setting(group / "memory.limit_in_bytes")

    def _set(self, key: str, path: Path, value: str, env: TrialEnv) -> None:
        assert self.journal is not None
        try:
            if read_setting(path) != value:
                self.journal.set(path, value)
        except OSError as exc:
            raise TrialFailure(f"os.{key}: the kernel refused {value!r} for {path}: {exc}") from exc
        now = read_setting(path)
        if now != value:
            raise TrialFailure(f"os.{key}: wrote {value!r} to {path}, it reads {now!r}")
        env.effective[f"os.{key}"] = now

    def undo(self, env: TrialEnv) -> None:
        if (env.cgroup is not None or self.huge.original) and env.cluster is not None:
            env.cluster.stop()  # the cgroup and the pages can only go once the server has
        if self.journal is not None:
            self.journal.restore()


def _queues(where: Any) -> dict[str, Path]:
    """Block devices under a cluster (or, before any exists, a path on the filesystem the
    work area will be on) that have a request queue (disks, loop, dm; not partitions), with
    their queue directory."""
    found = devices.devices_for(where) if isinstance(where, Path) else devices.for_cluster(where)[0]
    out = {}
    for dev in found:
        queue = devices.SYS_BLOCK / dev / "queue"
        if (queue / "scheduler").exists():
            out[dev] = queue
    return out
