"""The `os` layer: Transparent Huge Pages, the I/O scheduler and read-ahead of the devices
under PGDATA and pg_wal, any sysctl, dropping the page cache before a trial, and a memory
limit (the server in a cgroup v1 memory group). Every kernel value and the cgroup go
through the undo journal, so they are put back at the end of the run, on Ctrl-C or error,
and after kill -9 by the next run or `pgsweep restore`. Huge pages are in hugepages.py."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..collect import devices
from ..core import Cost, Value
from ..errors import PgsweepError, internal
from ..host import areaprocs
from ..host.api import Host
from ..host.blockdev import Grant
from ..host.journal import UndoJournal
from ..host.kernelfiles import CGROUP_V1_MEMORY, DROP_CACHES, THP_FILES
from ..postgres.binaries import Binaries
from ..units import parse_size
from . import hugepages, sysctls
from .base import Layer, ValidationContext, check_table
from .context import Demand, RunContext, TrialContext, TrialFailure
from .os_tables import OsSettings, OsTable, menu
from .sysctls import refusal as sysctl_refusal  # noqa: F401 - the layer's names
from .sysctls import sysctl_file


class OsLayer(Layer):
    name = "os"
    needs_root = True

    def __init__(self) -> None:
        # what the file says (the same for every host and run); what a run did on its
        # host is in its context (OsRun)
        self.used: set[str] = set()  # keys set in the file, base or factor
        self.factor_keys: set[str] = set()
        self.pages: dict[str, int] = {}  # huge pages each configuration's server needs

    def _state(self, run: RunContext) -> OsRun:
        return run.state_of(self.name, lambda: OsRun(run.journal()))

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
        if self.used and ctx.host.ids(None)[0] != 0:
            names = ", ".join(f"os.{k}" for k in sorted(self.used))
            raise ctx.source.error(
                ("os",) if base else ("factors", "os"),
                f"these os factors change the kernel and need root: {names}",
                fix="run pgsweep as root, or remove the os settings",
            )
        _offered(values, factors, ctx)
        for key in [k for k in values if k.startswith("sysctl.")]:
            sysctls.check_levels(key, [values[key]], ctx, in_factors=False)
        for key in [k for k in factors if k.startswith("sysctl.")]:
            sysctls.check_levels(key, factors[key], ctx, in_factors=True)
        return values

    def settings(self, values: dict[str, Value]) -> OsSettings:
        limit = values.get("memory_limit")
        huge, scheduler, ahead = (values.get(k) for k in ("huge_pages", "io_scheduler",
                                                          "read_ahead_kb"))  # fmt: skip
        return OsSettings(
            used=bool(self.used),
            huge_pages=str(huge) if huge is not None else None,
            thp={k: str(values[k]) for k in THP_FILES if values.get(k) is not None},
            io_scheduler=str(scheduler) if scheduler is not None else None,
            read_ahead_kb=int(ahead) if ahead is not None else None,
            drop_caches=values.get("drop_caches") == "before_trial",
            memory_limit=parse_size(limit) if limit is not None else None,
            sysctl={k.split(".", 1)[1]: str(v) for k, v in values.items()
                    if k.startswith("sysctl.")},
        )  # fmt: skip

    def check_configurations(self, configs: Sequence[Mapping[str, Any]],
                             ctx: ValidationContext) -> None:  # fmt: skip
        """os.huge_pages owns the server's huge_pages settings; shared memory (charged to the
        cgroup unless it is in huge pages) must fit under os.memory_limit."""
        for config in configs:
            mine: OsSettings = config[self.name]
            why = sysctls.check_overcommit(mine.sysctl, ctx.host)
            if why:
                name = "vm.overcommit_memory"
                raise ctx.source.error(
                    ("factors", "os", "sysctl", name) if f"sysctl.{name}" in self.factor_keys
                    else ("os", "sysctl", name), why,
                    fix="raise vm.overcommit_ratio (or _kbytes) with it, or leave "
                    "overcommit_memory alone",
                )  # fmt: skip
            server: dict[str, str] = config["server"]
            initdb = tuple(config["cluster"].initdb_options())
            if mine.huge_pages is not None:
                for name in ("huge_pages", "huge_page_size"):
                    if name in server:
                        raise ctx.source.error(
                            ctx.where.get(f"server.{name}", ("server", name)),
                            f"os.huge_pages sets the server's {name} itself",
                            fix=f"remove server.{name}, or remove os.huge_pages",
                        )  # fmt: skip
            if ctx.catalog_deferred:
                continue  # every configuration runs a build: buildprep asks each build
            if mine.huge_pages in hugepages.LEVELS:
                full = server | hugepages.server_settings(mine.huge_pages)
                pages = ctx.checker.runtime("shared_memory_size_in_huge_pages", full, initdb)
                key = _pages_key(mine.huge_pages, server, initdb, ctx.binaries.bindir)
                self.pages[key] = int(pages)
            if mine.memory_limit is None or mine.huge_pages in ("2MB", "1GB"):
                continue
            shm_mb = ctx.checker.shared_memory_mb(server, initdb)
            if shm_mb * 1024**2 >= mine.memory_limit:
                shown = ", ".join(f"{k}={v}" for k, v in sorted(server.items())) or "defaults"
                raise ctx.source.error(
                    ("factors", "os", "memory_limit") if "memory_limit" in self.factor_keys
                    else ("os", "memory_limit"),
                    f"os.memory_limit={mine.memory_limit // 1024**2}MiB cannot hold the "
                    f"server's shared memory alone: {shm_mb} MB (postgres -C "
                    f"shared_memory_size, with {shown})",
                    fix="raise the limit or lower shared_buffers in that configuration",
                )  # fmt: skip

    def claim_host(self, host: Host, settings: list[OsSettings], who: str) -> None:
        if any(s.used for s in settings):
            host.hold_kernel_lock(who)

    def check_host(self, host: Host, where: Path, settings: list[OsSettings],
                   grant: Grant | None = None) -> None:  # fmt: skip
        """Before anything runs: every scheduler level must be offered by the devices the
        clusters will live on (on the server's host)."""
        queues = _queues(host, where)
        for s in settings:
            for dev, queue in queues.items():
                offered = menu(host, queue / "scheduler")
                if s.io_scheduler is not None and s.io_scheduler not in offered:
                    raise PgsweepError(
                        f"os.io_scheduler {s.io_scheduler!r} is not offered by {dev}{host.on}, "
                        f"which holds {where}",
                        where=str(queue / "scheduler"),
                        expected=f"one of {', '.join(offered)}",
                        fix="pick a scheduler the device lists (`modprobe` may add bfq/kyber)",
                    )

    def level_identity(self, key: str, level: Value) -> object:
        return parse_size(level) if key == "memory_limit" else repr(level)

    def cost(self, key: str) -> Cost:
        if key == "huge_pages":
            return Cost.RESERVE
        return Cost.RESTART if key in THP_FILES or key == "memory_limit" else Cost.NOTHING

    def prepare(self, settings: OsSettings, trial: TrialContext) -> Demand | None:
        """Kernel values through the journal; the server stopped first when they only take
        effect at its start (THP, huge pages, the memory limit, a cold page cache)."""
        if not settings.used and self.name not in trial.run.state:
            return None  # and when an earlier trial changed something: put it back
        host, state = trial.run.host, self._state(trial.run)
        why = sysctls.recheck(settings.sysctl, host)  # floors move with what the machine uses
        if why:
            raise TrialFailure(why)
        targets = self._targets(settings, trial, state)
        thp_change = any(path in THP_FILES.values() and host.read_setting(path) != str(value)
                         for _, path, value in targets)  # fmt: skip
        limit_change = settings.memory_limit != state.limit
        drop = settings.drop_caches or (limit_change and settings.memory_limit is not None)
        huge_key = self._huge_key(settings.huge_pages, trial)
        huge_change = huge_key != state.huge_key
        if (thp_change or drop or limit_change or huge_change) and trial.server.running():
            trial.server.stop()  # shared memory is mapped at start: THP applies to a new server
        for key, path, value in targets:
            self._set(key, path, str(value), trial)
        cgroup = self._memory_limit(settings.memory_limit, trial)
        if huge_change:
            self._huge_pages(settings.huge_pages, huge_key, trial)
        if state.huge_pages:
            trial.effective["os.huge_pages.reserved"] = str(state.huge_pages)
        if drop:  # page cache is charged to its first reader: start the limited server cold
            host.sync()
            host.write_kernel(DROP_CACHES, "3")
            trial.events.append("drop-caches")
        overrides = hugepages.server_settings(settings.huge_pages) if settings.huge_pages else {}
        return Demand(server_settings=overrides, cgroup=cgroup)

    def _targets(self, settings: OsSettings, trial: TrialContext,
                 state: OsRun) -> list[tuple[str, Path, str | int]]:  # fmt: skip
        """Every kernel file this trial's configuration sets, with its value; and what an
        earlier trial of the run set that this configuration leaves unset (`run --against`
        with [os] in one file only) back at the value it had before the run, so no
        configuration inherits another's (on the devices under this trial's cluster)."""
        targets: list[tuple[str, Path, str | int]] = [
            (k, THP_FILES[k], v) for k, v in settings.thp.items()
        ]
        targets += [(f"sysctl.{k}", sysctl_file(k), v) for k, v in settings.sysctl.items()]
        wanted = settings.io_scheduler is not None or settings.read_ahead_kb is not None
        on_device = [k for k, _ in state.originals.values()
                     if k.startswith(("io_scheduler.", "read_ahead_kb."))]  # fmt: skip
        queues = _queues(trial.run.host, trial.cluster) if wanted or on_device else {}
        for dev, queue in queues.items():
            for key, file, value in (
                ("io_scheduler", "scheduler", settings.io_scheduler),
                ("read_ahead_kb", "read_ahead_kb", settings.read_ahead_kb),
            ):
                if value is not None:
                    targets.append((f"{key}.{dev}", queue / file, value))  # fmt: skip
        device_files = {str(q / f) for q in queues.values() for f in ("scheduler", "read_ahead_kb")}
        mine = {str(path) for _, path, _ in targets}
        for path, (key, original) in state.originals.items():
            if path not in mine and (key not in on_device or path in device_files):
                targets.append((key, Path(path), original))
        return targets

    def _huge_key(self, level: str | None, trial: TrialContext) -> str | None:
        """What the pools are sized for: the level and the settings only a restart changes
        (a reload cannot change shared memory, so it needs no new reservation)."""
        if level is None:
            return None
        server, known = trial.settings["server"], trial.server.binaries.settings
        fixed = {k: v for k, v in server.items()
                 if k not in known or known[k].context in ("postmaster", "internal")}  # fmt: skip
        return repr((level, sorted(fixed.items()), str(trial.server.binaries.bindir)))

    def needed_pages(self, level: str, server: dict[str, str], initdb: tuple[str, ...],
                     binaries: Binaries) -> int:  # fmt: skip
        """The huge pages these binaries' server needs (`postgres -C`, asked when the file
        was validated, or of each build before the first trial)."""
        return self.pages.get(_pages_key(level, server, initdb, binaries.bindir), 0)

    def _huge_pages(self, level: str | None, key: str | None, trial: TrialContext) -> None:
        """Size the huge page pools for this trial's server (stopped by now)."""
        state = self._state(trial.run)
        state.huge_key, state.huge_pages = None, 0  # until the reservation succeeded
        if level is None:
            state.huge.release(state.journal)
            return
        trial.server.settings = None
        initdb = tuple(trial.settings["cluster"].initdb_options())
        pages = self.needed_pages(level, trial.settings["server"], initdb, trial.server.binaries)
        work = trial.settings["workload"]
        may_drop = trial.settings["os"].drop_caches or work.warmup_s > 0 or work.prewarm
        state.huge_pages = state.huge.reserve(level, pages, state.journal, trial.events, may_drop)
        trial.events.append(f"huge-pages-{level}")
        state.huge_key = key

    def verify(self, settings: OsSettings, trial: TrialContext) -> None:
        if settings.huge_pages is not None:
            hugepages.verify(settings.huge_pages, trial)

    def _memory_limit(self, limit: int | None, trial: TrialContext) -> Path | None:
        """The cgroup the server of a limited configuration starts in, with
        memory.limit_in_bytes set; peak and failures are reset for each trial."""
        state = self._state(trial.run)
        state.limit = limit
        if limit is None:
            return None
        host = trial.run.host
        group = _cgroup()
        if host.lstat(group) is None:
            state.journal.made_dir(group)
            uid, gid = host.ids(trial.run.user)
            host.chown(group / "cgroup.procs", uid, gid)  # cgroupfs: root's, no links there
        host.write_kernel(group / "memory.limit_in_bytes", str(limit))
        for counter in ("memory.max_usage_in_bytes", "memory.failcnt"):
            host.write_kernel(group / counter, "0")
        trial.effective["os.memory_limit"] = host.read_setting(group / "memory.limit_in_bytes")
        return group

    def _set(self, key: str, path: Path, value: str, trial: TrialContext) -> None:
        host, state = trial.run.host, self._state(trial.run)
        try:
            if host.read_setting(path) != value:
                state.originals.setdefault(str(path), (key, host.read_setting(path)))
                state.journal.set(path, value)
        except OSError as exc:
            raise TrialFailure(f"os.{key}: the kernel refused {value!r} for {path}: {exc}") from exc
        now = host.read_setting(path)
        if now != value:
            raise TrialFailure(f"os.{key}: wrote {value!r} to {path}, it reads {now!r}")
        trial.effective[f"os.{key}"] = now

    def finish_run(self, run: RunContext) -> None:
        """The journal puts every value back; the engine stopped the servers before (the
        cgroup and the pages can only go once no server uses them). Processes the server
        user moved into the cgroup are killed first; whatever cannot be put back makes
        the run fail (exit 1), the journal keeping it for `pgsweep restore`."""
        state: OsRun | None = run.state.get(self.name)
        if state is None:
            return  # this run changed nothing on its host
        group = _cgroup()
        st = run.host.lstat(group)
        if st is not None and st.is_dir:
            uid = run.host.ids(run.user)[0]
            pids = [int(p) for p in run.host.read_text(group / "cgroup.procs").split()]
            mine = [p for p in pids if (seen := run.host.process(p)) and seen[1] == uid]
            areaprocs.kill(mine, "left in pgsweep's cgroup")
        failed = [line for line in state.journal.restore() if line.startswith("could not")]
        if failed:
            raise internal("could not put back: " + "; ".join(failed),
                           fix="fix the cause, then run `pgsweep restore`")  # fmt: skip


@dataclass
class OsRun:
    """What the os layer did in one run on one host: its journal (every kernel value's
    original, before the first write), the memory limit in force, the huge pages it
    reserved and what they are sized for."""

    journal: UndoJournal
    limit: int | None = None  # bytes of the memory limit in force
    huge: hugepages.HugePages = field(default_factory=hugepages.HugePages)
    huge_key: str | None = None  # level and restart settings the pools are sized for
    huge_pages: int = 0  # pages reserved for the server now
    # kernel file -> (key, value before this run changed it): what a configuration that
    # leaves the key unset runs with
    originals: dict[str, tuple[str, str]] = field(default_factory=dict)


def _offered(values: dict[str, Value], factors: dict[str, list[Any]],
             ctx: ValidationContext) -> None:  # fmt: skip
    """What the server's host must offer for the file's levels: the cgroup v1 memory
    controller, a pool of each huge page size, each THP menu's choice (read on that host:
    this machine, or the server's other host through its agent)."""
    host = ctx.host
    where = f"host {host.name}" if host.on else "this machine"

    def at(key: str) -> tuple[str, ...]:
        return ("factors", "os", key) if key in factors else ("os", key)

    limits = [values.get("memory_limit"), *factors.get("memory_limit", [])]
    if any(v is not None for v in limits) and \
            host.lstat(CGROUP_V1_MEMORY / "memory.limit_in_bytes") is None:
        raise ctx.source.error(at("memory_limit"), "os.memory_limit needs the cgroup v1 memory "
                               f"controller at {CGROUP_V1_MEMORY}, which {where} does not "
                               "have mounted", fix="mount it (mount -t cgroup -o memory cgroup "
                               "/sys/fs/cgroup/memory) or remove os.memory_limit; `pgsweep "
                               "doctor` shows the cgroups there")  # fmt: skip
    offered = hugepages.offered(host)
    for level in [values.get("huge_pages"), *factors.get("huge_pages", [])]:
        if level is not None and level not in offered:
            raise ctx.source.error(at("huge_pages"), f"the kernel of {where} has no pool of "
                                   f"{level} huge pages (no "
                                   f"{hugepages.pool(hugepages.LEVELS[level])})",
                                   expected=f"one of {', '.join(offered)}",
                                   fix="pick a size `pgsweep doctor` lists")  # fmt: skip
    for key, path in THP_FILES.items():
        for level in [values.get(key), *factors.get(key, [])]:
            if level is not None and level not in menu(host, path):
                raise ctx.source.error(at(key), f"{path}{host.on} offers no {level!r}",
                                       expected=f"one of {', '.join(menu(host, path))}")


def _cgroup() -> Path:
    """The memory cgroup of this run's servers (the pgsweep process's PID names it; its
    journal entry puts it away)."""
    return CGROUP_V1_MEMORY / f"pgsweep-{os.getpid()}"


def _pages_key(level: str, server: dict[str, str], initdb: tuple[str, ...], bindir: Path) -> str:
    return repr((level, sorted(server.items()), initdb, str(bindir)))


def _queues(host: Host, where: Any) -> dict[str, Path]:
    """Block devices under a cluster (or, before any exists, a path on the filesystem the
    work area will be on) that have a request queue (disks, loop, dm; not partitions), with
    their queue directory, on `host`."""
    found = (devices.devices_for(host, where) if isinstance(where, Path)
             else devices.for_cluster(where)[0])  # fmt: skip
    out = {}
    for dev in found:
        queue = devices.SYS_BLOCK / dev / "queue"
        if host.lstat(queue / "scheduler") is not None:
            out[dev] = queue
    return out
