"""Before anything runs: start a scratch server once with each configuration's server
settings, as a trial will, and read back what every setting shows.

`postgres -C NAME -c NAME=VALUE` parses one value, but it does not start a server: a level
that only fails at start (`wal_level = minimal` beside the default `max_wal_senders`, an
unknown library in `shared_preload_libraries`, two settings that only clash together) and
a value the server derives or formats when it runs (`wal_buffers = -1` runs as 1/32 of
shared_buffers; `log_file_mode` reads back in octal; `archive_command` as "(disabled)")
are only seen by a real start. A scratch cluster (once per set of initdb options) is
started with each distinct set of settings (about a quarter of a second each) on a private
socket and stopped again; nothing else is touched. On this machine its data directory is a
copy of a template kept in the build cache (`scratch-clusters/`, one per binaries, initdb
options and server user, made by a `run` whose checks passed): a copy costs about a tenth
of an initdb's CPU, and every `plan` and `run` with server settings makes one.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path

from ..errors import PgsweepError
from ..host.api import Host, scratch_path
from ..host.local import LOCAL
from ..host.proc import RunAs
from ..host.workarea import fallback_base
from .access import ServerError
from .binaries import Binaries
from .cluster import Cluster

# The value pg_settings shows when the server replaced the level it was given by one it
# derived (source 'override' or 'default' for a name the configuration file sets): any
# value is the level in force, and the trial records it. pg_settings never holds a NUL.
DERIVED = "\x00derived"
# pg_settings.source of a value the server computed itself after reading the file
DERIVED_SOURCES = {"override", "default"}
# the build cache's folder of scratch data directories (host/builds.entries skips it;
# `pgsweep builds --prune` removes it, and the next check makes what it needs again)
TEMPLATES = "scratch-clusters"


@dataclass(frozen=True)
class StartFailure:
    """A configuration's settings with which the server would not start."""

    settings: Mapping[str, str]
    messages: list[str]  # the server's FATAL/ERROR/DETAIL/HINT lines

    def names(self) -> list[str]:
        """The settings (of this configuration) the server's message names."""
        text = " ".join(self.messages).lower()
        return [n for n in self.settings if re.search(rf"\b{re.escape(n)}\b", text)]


class StartChecker:
    """Scratch clusters, one per set of initdb options, started with each set of settings
    asked about. Sets that differ only in settings a reload applies share one start (the
    file is rewritten and the server reloaded). Use as a context manager: everything is
    stopped and removed on exit."""

    def __init__(self, binaries: Binaries, user: RunAs | None, host: Host) -> None:
        self.host = host
        self.binaries = binaries
        self.user = user
        self._dir: Path | None = None  # the scratch clusters
        self._sockets: Path | None = None  # their sockets: a short path under /tmp
        self._clusters: dict[tuple[str, ...], Cluster] = {}
        self._seen: dict[tuple[tuple[str, ...], tuple[tuple[str, str], ...]], dict[str, str]] = {}
        self._running: tuple[Cluster, tuple[tuple[str, str], ...]] | None = None

    def __enter__(self) -> StartChecker:
        # here, the clusters go where runs make their work areas (PGSWEEP_WORK_BASE, or
        # /var/tmp), not among /tmp's small files: an initdb is about a thousand of them
        base = fallback_base() if self.host is LOCAL else Path("/tmp")
        self._dir = self.host.private_dir(scratch_path("pgsweep-start-", base), 0o711)
        try:
            self._sockets = self.host.private_dir(scratch_path("pgsweep-start-"), 0o711)
        except BaseException:
            self.host.remove_tree(self._dir)
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        for cluster in self._clusters.values():
            cluster.destroy()
        for tree in (self._dir, self._sockets):
            if tree is not None:
                self.host.remove_tree(tree)

    def _cluster(self, initdb_options: tuple[str, ...]) -> Cluster:
        assert self._dir and self._sockets, "StartChecker outside `with`"
        if initdb_options not in self._clusters:
            n = len(self._clusters) + 1
            cluster = Cluster(self.binaries, self.user, self._dir / f"c{n}",
                              self._sockets / f"s{n}", host=self.host)  # fmt: skip
            self._clusters[initdb_options] = cluster
            template = self._template(initdb_options)
            try:
                if template is not None:
                    try:
                        cluster.create_from(template)
                    except ServerError:  # pruned while copied: the check goes on without
                        self.host.remove_tree(cluster.root)
                        template = None
                if template is None:
                    cluster.create(["--no-sync", *initdb_options])
            except ServerError as exc:
                raise PgsweepError(f"a scratch initdb {' '.join(initdb_options)} failed: {exc}",
                                   fix="check the cluster.* keys") from None  # fmt: skip
        return self._clusters[initdb_options]

    def _template(self, initdb_options: tuple[str, ...]) -> Path | None:
        return kept_template(self.binaries, self.user, initdb_options, self.host)

    def shown(
        self,
        settings: Mapping[str, str],
        initdb_options: tuple[str, ...] = (),
        restart: Collection[str] = (),
    ) -> dict[str, str] | StartFailure:
        """What pg_settings shows for each of `settings` on a server started with all of
        them (DERIVED where the server replaced the level by a value it computed), or why
        the server would not start. `restart`: the names a reload cannot change (settings
        that differ only in others share the running server)."""
        key = (initdb_options, tuple(sorted(settings.items())))
        if key in self._seen:
            return self._seen[key]
        cluster = self._cluster(initdb_options)
        fixed = tuple(sorted((k, v) for k, v in settings.items() if k in restart))
        cluster.write_settings(dict(settings))
        if self._running == (cluster, fixed):
            _reload(cluster)
        else:
            self._stop()
            try:
                cluster.start()
            except ServerError as exc:
                return StartFailure(dict(settings), _server_messages(str(exc)))
            self._running = (cluster, fixed)
        self._seen[key] = _read_shown(cluster, list(settings))
        return self._seen[key]

    def _stop(self) -> None:
        if self._running is not None:
            self._running[0].stop()
            self._running = None


def keep_templates(binaries: Binaries, user: RunAs | None,
                   initdb_options: Collection[tuple[str, ...]], host: Host) -> None:  # fmt: skip
    """The data directories later start checks and runs' clusters (layers/cluster) copy,
    made once per binaries, initdb options and server user in the build cache: by `run`,
    once its checks passed (never by `plan`, which leaves the machine as it was, nor for a
    file refused). Only on this machine; nothing is made where one is kept or being made,
    or where the cache is not usable."""
    for options in initdb_options:
        home = _template_home(binaries, user, options, host, True)
        if home is None or host.lstat(home) is not None:
            continue  # made, or another run is making it (or died doing so: --prune)
        made = Cluster(binaries, user, home, home / "socket", host=host)
        try:
            host.private_dir_once(home.parent, 0o711)
            made.make_dirs()  # claims it: a folder that exists is refused
        except (OSError, PgsweepError):
            continue
        try:
            made.initdb(["--no-sync", *options])
        except ServerError:
            host.remove_tree(home)  # the run's own clusters will say why
            continue
        host.write_file(home / "ready", "", 0o644)


def kept_template(binaries: Binaries, user: RunAs | None, initdb_options: tuple[str, ...],
                  host: Host) -> Path | None:  # fmt: skip
    """The kept data directory initdb made with these binaries, options and server user
    (keep_templates), or None (none kept): the caller then runs initdb itself."""
    home = _template_home(binaries, user, initdb_options, host, False)
    if home is None or host.lstat(home / "ready") is None:
        return None
    return home / "data"


def _template_home(binaries: Binaries, user: RunAs | None, initdb_options: tuple[str, ...],
                   host: Host, create: bool) -> Path | None:  # fmt: skip
    """The template's folder in the build cache (`create`: the cache made if missing), or
    None: another host (and the recording one: `plan --commands` shows an initdb), or no
    usable cache (a HOME the user cannot write, one the server user cannot reach)."""
    if host is not LOCAL:
        return None
    uid = host.ids(user)[0]
    try:
        cache = host.build_cache(uid, create=create)
    except (OSError, PgsweepError):
        return None
    if cache is None:
        return None
    return cache / TEMPLATES / template_key(binaries, initdb_options, uid, host)


def template_key(binaries: Binaries, initdb_options: tuple[str, ...], uid: int,
                 host: Host) -> str:
    """Names what a template's data directory depends on: the binaries (their folder,
    version and postgres file's size), the initdb options and the server user who owns
    it."""
    st = host.lstat(Path(binaries.path("postgres")))
    ident = (str(binaries.bindir), binaries.version, st and st.size, initdb_options, uid)
    return hashlib.sha256(repr(ident).encode()).hexdigest()[:16]


def _reload(cluster: Cluster) -> None:
    with cluster.connect() as conn:
        before = conn.execute("SELECT pg_conf_load_time()").fetchone()
        cluster.reload()
        deadline = time.monotonic() + 5
        while conn.execute("SELECT pg_conf_load_time()").fetchone() == before:
            if time.monotonic() > deadline:
                raise ServerError("a scratch server did not re-read its configuration in 5 s")
            time.sleep(0.01)


def _read_shown(cluster: Cluster, names: list[str]) -> dict[str, str]:
    with cluster.connect() as conn:
        rows = conn.execute(
            "SELECT lower(name), setting, source FROM pg_settings WHERE lower(name) = ANY(%s)",
            (names,),
        ).fetchall()
    # a value our own connection set (client_encoding) says nothing of the server's
    return {name: DERIVED if source in DERIVED_SOURCES else setting
            for name, setting, source in rows if source != "client"}  # fmt: skip


def _server_messages(text: str) -> list[str]:
    found = re.findall(r"(?:FATAL|PANIC|ERROR|DETAIL|HINT):\s+(.*)", text)
    return found or [line for line in text.splitlines() if line.strip()][-3:]

