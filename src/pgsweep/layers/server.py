"""The `server` layer: any postgresql.conf setting, checked against the server binary's own
catalog and parser, written to a file pgsweep owns, applied by reload or restart as the
setting's context requires, and read back from pg_settings before the trial may run."""

from __future__ import annotations

import difflib
import re
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..core import Cost, Value, printable
from ..errors import PgsweepError
from ..postgres.access import ServerError
from ..postgres.cluster import Cluster
from ..postgres.startcheck import DERIVED
from . import server_include
from .base import Layer, ValidationContext
from .context import TrialContext, TrialFailure
from .server_start import RESTART_CONTEXTS, config_error, start_each

if TYPE_CHECKING:
    from ..postgres.binaries import Binaries

# pgsweep sets these itself: the private socket, no TCP, its own hba file and log. Names
# are compared after normalising to the catalog's (lower-case) spelling: PostgreSQL's
# setting names are case-insensitive, so "LISTEN_ADDRESSES" is listen_addresses.
MANAGED = {
    "listen_addresses",
    "port",
    "unix_socket_directories",
    "unix_socket_permissions",
    "unix_socket_group",
    "data_directory",
    "config_file",
    "hba_file",
    "ident_file",
    "external_pid_file",
    "logging_collector",
}
# pgsweep's servers are reached over a private Unix socket (and standbys over a private
# link), never with SSL: a stock postgresql.conf's certificate paths stay unused.
SSL = {"ssl", "ssl_cert_file", "ssl_key_file", "ssl_ca_file", "ssl_crl_file", "ssl_crl_dir",
       "ssl_dh_params_file", "ssl_passphrase_command", "ssl_passphrase_command_supports_reload"}
# postgresql.conf's directives (not settings): pgsweep reads no other configuration file
DIRECTIVES = {"include", "include_dir", "include_if_exists"}
# A production postgresql.conf's archiving and recovery commands run programs (and would
# ship the throwaway clusters' WAL to its backups): not used from server.include
ARCHIVING = {"archive_mode", "archive_command", "archive_library", "restore_command",
             "archive_cleanup_command", "recovery_end_command", "primary_conninfo",
             "primary_slot_name"}
# Settings that load code from a path the file names: refused. Libraries to preload must
# be named as installed (`pg_stat_statements`), never by path.
LOADS_CODE = {"dynamic_library_path"}
PRELOADS = {"shared_preload_libraries", "session_preload_libraries", "local_preload_libraries"}
# An extension's setting (pg_prewarm.autoprewarm): identifiers joined by dots, nothing else.
_CUSTOM = re.compile(r"^[a-z_][a-z0-9_$]*(\.[a-z_][a-z0-9_$]*)+$")
_FIXES = {
    "ENUM": "use one of the values the server lists",
    "BOOLEAN": 'use true or false (or "on"/"off")',
    "INTEGER": "use a number in range, with a unit the server knows (kB, MB, GB; ms, s, min, h)",
    "REAL": "use a number in range",
}


def as_pg_value(value: Value) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


class ServerLayer(Layer):
    name = "server"

    def __init__(self) -> None:
        # what the file says, for the planner: the installed catalog's context of each
        # setting (a trial asks the catalog of the binaries its server runs)
        self._contexts: dict[str, str] = {}
        self.renames: dict[str, str] = {}  # as written -> the catalog's spelling

    def validate(
        self, base: dict[str, Any], factors: dict[str, list[Any]], ctx: ValidationContext
    ) -> dict[str, Value]:
        catalog = ctx.binaries.settings
        self._contexts = {name: s.context for name, s in catalog.items()}
        base = dict(base)
        included = server_include.merge(base, factors, ctx, _unused_why)
        base = _drop_overridden(base, ctx)
        checks: list[tuple[tuple[str, ...] | str, str, list[Any]]]
        checks = [(where, name, [value]) for name, (value, where) in included.items()]
        checks += [(("server", k), k, [v]) for k, v in base.items()]
        checks += [(("factors", "server", k), k, levels) for k, levels in factors.items()]
        seen: dict[str, tuple[str, ...] | str] = {}
        for path, raw, values in checks:
            name = raw.lower()
            if name in seen and seen[name] != path:
                raise config_error(
                    ctx, path, f"{raw} names the setting {name} again (setting names ignore case)",
                    fix=f"set {name} once: in [server], or as a factor",
                )  # fmt: skip
            seen[name] = path
            if isinstance(path, str):
                ctx.origins[f"server.{name}"] = path
            else:
                ctx.where[f"server.{name}"] = path
            self.renames[raw] = name
            self._check_name(path, name, ctx)
            if ctx.catalog_deferred and name not in ctx.binaries.settings:
                continue  # only the builds know it: checked against their catalogs
            meanings: dict[str, Any] = {}
            for value in values:
                meaning = self.check_value(path, name, value, ctx)
                if meaning in meanings:
                    raise config_error(
                        ctx, path, f"the levels {meanings[meaning]!r} and {value!r} mean the same "
                        f"{name} ({meaning!r})", fix="keep one of them",
                    )  # fmt: skip
                meanings[meaning] = value
        return {**{n: v for n, (v, _) in included.items()}, **{k.lower(): base[k] for k in base}}

    def canonical_key(self, key: str) -> str:
        return self.renames.get(key, key)

    def _check_name(self, path: tuple[str, ...] | str, name: str,
                    ctx: ValidationContext) -> None:  # fmt: skip
        catalog = ctx.binaries.settings
        if name in LOADS_CODE:
            raise config_error(
                ctx, path, f"{name} would load code from a path the file names",
                fix=f"remove {name}; install extensions where PostgreSQL looks for them",
            )  # fmt: skip
        if name in MANAGED | SSL | DIRECTIVES:
            raise config_error(
                ctx, path, f"{_overridden_why(name)}: it cannot be a factor",
                fix=f"remove {name} from [factors]",
            )  # fmt: skip
        if name in catalog:
            return
        if "." in name:  # an extension's setting
            if _CUSTOM.match(name):
                return
            raise config_error(
                ctx, path, f"{name!r} is not a setting name",
                expected="letters, digits and underscores, joined by dots for an extension's "
                "setting (e.g. pg_prewarm.autoprewarm)",
            )  # fmt: skip
        if ctx.catalog_deferred:
            return
        hidden = ctx.checker.hidden(name)
        if hidden == "settable":  # context unknown: changes restart the server, the safe way
            return
        if hidden == "read-only":
            raise config_error(
                ctx,                 path,
                f"{name} cannot be changed: it is fixed when PostgreSQL is built or "
                "when initdb runs",
                fix="remove it (build options are a layer of their own)",
            )
        close = difflib.get_close_matches(name, list(catalog), n=3)
        hint = (
            f"did you mean {' or '.join(close)}?" if close else "see `postgres --describe-config`"
        )
        raise config_error(
                ctx,             path,
            f"PostgreSQL {ctx.binaries.version} has no setting named {name!r}",
            expected="a setting from the server's own catalog",
            fix=hint,
        )

    @staticmethod
    def check_value(path: tuple[str, ...] | str, name: str, value: Any,
                    ctx: ValidationContext) -> str:  # fmt: skip
        """The value as the server reads it (base units), or an error naming the key."""
        if name in PRELOADS and any(c in str(value) for c in "/$\\"):
            raise config_error(
                ctx, path, f"{name} names a library by path or variable ({value!r})",
                expected="installed libraries by name, e.g. 'pg_stat_statements'",
                fix="install the library and name it without a path",
            )  # fmt: skip
        if not isinstance(value, str | int | float | bool):
            raise config_error(ctx, path, f"{name} must be a string, number or boolean, not "
                         f"{type(value).__name__}")  # fmt: skip
        text = as_pg_value(value)
        try:
            return ctx.checker.canonical(name, text)
        except PgsweepError as exc:
            setting = ctx.binaries.settings.get(name)
            expected = None
            if setting and setting.vartype in ("INTEGER", "REAL"):
                kind = setting.vartype.lower()
                expected = f"{kind} between {setting.min} and {setting.max} (base units)"
            raise config_error(
                ctx,                 path,
                f"PostgreSQL rejects {name} = {text!r}: {exc.what}",
                expected=expected,
                fix=_FIXES.get(
                    setting.vartype if setting else "", "use a value the server accepts"
                ),
            ) from None

    def check_configurations(
        self, configs: Sequence[Mapping[str, Any]], ctx: ValidationContext
    ) -> None:
        """The configurations that run these binaries (not a build's), each started once."""
        if not ctx.catalog_deferred:
            mine = [c for c in configs if getattr(c.get("build"), "spec", None) is None]
            start_each(mine, ctx)

    def cost(self, key: str) -> Cost:
        return (
            Cost.RESTART
            if self._contexts.get(key, "postmaster") in RESTART_CONTEXTS
            else Cost.RELOAD
        )

    def settings(self, values: dict[str, Value]) -> dict[str, str]:
        """Setting name (the catalog's spelling) -> the text postgresql.conf gets."""
        return {k: as_pg_value(v) for k, v in values.items()}

    def prepare(self, settings: dict[str, str], trial: TrialContext) -> None:
        """Start, restart or reload the server so it runs with the configuration's settings
        and those earlier layers decided, then read every one back."""
        server, cluster = trial.server, trial.cluster
        wanted = settings | trial.demand.server_settings
        try:
            if trial.demand.listen != cluster.listen:  # a new address is a restart
                cluster.listen = trial.demand.listen
                cluster.netns = cluster.listen.netns if cluster.listen else None
                cluster.write_access_files()
                server.stop()
                server.settings = None
            if server.settings is None or not server.running():
                if server.running():  # in an unknown state (an earlier trial broke off)
                    server.stop()
                cluster.cgroup = trial.demand.cgroup
                cluster.write_settings(wanted)
                cluster.start()
                trial.events.append("start")
            elif wanted != server.settings:
                changed = set(wanted.items()) ^ set(server.settings.items())
                cluster.write_settings(wanted)
                if any(_restarts(k, server.binaries) for k, _ in changed):
                    cluster.stop()
                    cluster.start()
                    trial.events.append("restart")
                else:
                    _reload_and_wait(cluster)
                    trial.events.append("reload")
        except ServerError as exc:
            server.settings = None
            first, *rest = str(exc).splitlines() or [""]
            raise TrialFailure(first, "\n".join(rest) or cluster.log_tail()) from exc
        server.settings = wanted
        self._read_back(wanted, trial)

    def _read_back(self, wanted: dict[str, str], trial: TrialContext) -> None:
        """Refuse the trial unless the server runs with exactly the configuration's levels;
        record what each shows (and, where the server derived it, the level too)."""
        cluster = trial.cluster
        canonical = trial.run.canonical_for(trial.server.binaries)
        with cluster.connect() as conn:
            start = conn.execute("SELECT pg_postmaster_start_time()").fetchone()
            trial.server.started_at = start[0] if start else None
            for name, text in wanted.items():
                expected = canonical.get(name, {}).get(text)
                why = _check_level(conn, name, text, expected, trial.effective)
                if why:
                    raise TrialFailure(f"server.{name}: {why}", cluster.log_tail())


def _restarts(name: str, binaries: Binaries) -> bool:
    """Only a restart changes `name` on a server of these binaries (a setting their
    catalog does not know, an extension's, is restarted for: the safe way)."""
    setting = binaries.settings.get(name)
    return setting is None or setting.context in RESTART_CONTEXTS


def _check_level(conn: Any, name: str, text: str, expected: str | None,
                 effective: dict[str, str]) -> str | None:  # fmt: skip
    """Why `name` does not run with the level `text` (None when it does). `expected` is
    what pg_settings showed for it at `plan` (startcheck.DERIVED: whatever the server
    derives), or its base-unit value, or None when unknown."""
    row = conn.execute(
        "SELECT setting, pending_restart, source, current_setting(name) FROM pg_settings "
        "WHERE lower(name) = %s", (name,),  # DateStyle, TimeZone: the catalog's case
    ).fetchone()  # fmt: skip
    if row is None:
        return f"the server does not know the level {text!r}"
    setting, pending, source, shown = row
    effective[name] = shown
    if pending:
        return f"the level {text!r} waits for a restart (the server runs with {setting!r})"
    if source == "client":  # pgsweep's own session set it: ask the configuration file
        line = conn.execute(
            "SELECT setting, applied, error FROM pg_file_settings WHERE lower(name) = %s "
            "ORDER BY seqno DESC LIMIT 1", (name,),
        ).fetchone()  # fmt: skip
        effective[name] = text
        ok = line is not None and line[0] == text and line[1] and line[2] is None
        return None if ok else f"the configuration file's level {text!r} was not applied"
    if expected == DERIVED:  # -1 and its kind: the value the server chose is the level's
        effective[f"{name}.level"] = text
        return None
    if expected is not None and setting != expected:
        return f"the level {text!r} means {expected!r} but the server runs with {setting!r}"
    return None


def _unused_why(name: str) -> str | None:
    """Why a setting of server.include's files is not used (None: it is)."""
    if name in ARCHIVING:
        return "it runs programs and ships WAL elsewhere"
    return _overridden_why(name) if name in MANAGED | SSL | DIRECTIVES else None


def _overridden_why(name: str) -> str:
    if name in SSL:
        return (f"pgsweep's servers are reached over a private socket without SSL, so "
                f"{name} is not used")  # fmt: skip
    if name in DIRECTIVES:
        return f"{name} is a directive, and pgsweep reads no other configuration file"
    return f"pgsweep manages {name} itself (a private Unix socket, its own hba file and log)"


def _drop_overridden(base: dict[str, Any], ctx: ValidationContext) -> dict[str, Any]:
    """[server] as a stock postgresql.conf has it: the settings pgsweep manages are not
    used (never written anywhere), and `plan` and `run` say so, one note each."""
    kept = {}
    for key, value in base.items():
        if key.lower() in MANAGED | SSL | DIRECTIVES:
            where = ctx.source.where("server", key)
            ctx.notes.append(f"{where} = {printable(repr(value))}: not used: "
                             f"{_overridden_why(key.lower())}")  # fmt: skip
        else:
            kept[key] = value
    return kept


def _reload_and_wait(cluster: Cluster) -> None:
    with cluster.connect() as conn:
        before = conn.execute("SELECT pg_conf_load_time()").fetchone()
        cluster.reload()
        for _ in range(100):
            after = conn.execute("SELECT pg_conf_load_time()").fetchone()
            if after != before:
                return
            time.sleep(0.05)
    raise ServerError("the server did not re-read its configuration within 5 s of SIGHUP")
