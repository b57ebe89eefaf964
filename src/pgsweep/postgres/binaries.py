"""Find a PostgreSQL installation and read its own catalog of settings.

Values are checked by PostgreSQL's own parser: `postgres -C NAME -c NAME=VALUE` against an
empty configuration directory prints the value in base units, or fails with the server's
own message (type, unit, range, enum). That canonical value is compared, at trial time,
with `pg_settings.setting` of the running server.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import PgsweepError, internal
from ..host import proc, safefs

REQUIRED = ("postgres", "initdb", "pg_ctl", "pgbench")
DEBIAN_ROOT = Path("/usr/lib/postgresql")


@dataclass(frozen=True)
class Setting:
    name: str
    context: str  # postmaster | sighup | superuser | user | internal | backend | ...
    vartype: str  # BOOLEAN | INTEGER | REAL | STRING | ENUM
    min: str
    max: str
    short_desc: str


@dataclass
class Binaries:
    bindir: Path
    version: str  # e.g. "15.18"
    settings: dict[str, Setting] = field(default_factory=dict)

    @property
    def major(self) -> int:
        return int(self.version.split(".")[0])

    def path(self, program: str) -> str:
        return str(self.bindir / program)


def _has_all(bindir: Path) -> bool:
    return all((bindir / p).is_file() and os.access(bindir / p, os.X_OK) for p in REQUIRED)


def locate(bin_setting: str, *, where: str) -> Path:
    """`auto`: the newest /usr/lib/postgresql/N/bin, else pg_config on PATH; or a directory."""
    if bin_setting != "auto":
        bindir = Path(bin_setting)
        why = safefs.untrusted_component(bindir)
        if why:
            raise PgsweepError(
                f"{bindir} is not a PostgreSQL installation pgsweep can trust: {why}",
                where=where,
                expected="a directory owned by root (or you), on a path no other user can "
                "change: its programs run for every trial",
                fix="install PostgreSQL as root (e.g. make install into /usr/local/pgsql)",
            )
        if not _has_all(bindir):
            missing = [p for p in REQUIRED if not (bindir / p).is_file()]
            raise PgsweepError(
                f"{bindir} does not hold {', '.join(missing)}",
                where=where,
                expected="a directory with postgres, initdb, pg_ctl and pgbench",
                fix='set [postgres] bin = "auto" or point it at e.g. /usr/lib/postgresql/15/bin '
                "(Debian's postgresql-15 package holds all four)",
            )
        return bindir
    candidates = sorted(
        (d / "bin" for d in DEBIAN_ROOT.glob("*") if d.name.isdigit()),
        key=lambda p: int(p.parent.name),
        reverse=True,
    )
    pg_config = shutil.which("pg_config")
    if pg_config:
        candidates.append(Path(pg_config).resolve().parent)
    for bindir in candidates:
        if _has_all(bindir):
            return bindir
    raise PgsweepError(
        "no PostgreSQL installation with postgres, initdb, pg_ctl and pgbench was found",
        where=where,
        fix="install the server (apt-get install postgresql postgresql-contrib, or run "
        'scripts/setup.sh as root), or set [postgres] bin = "/path/to/bin"',
    )


def _parse_catalog(text: str) -> dict[str, Setting]:
    catalog: dict[str, Setting] = {}
    for line in text.splitlines():
        cols = line.split("\t")
        if len(cols) < 8:
            continue
        catalog[cols[0]] = Setting(cols[0], cols[1], cols[3], cols[5], cols[6], cols[7])
    return catalog


# what `inspect` learned, by installation: a server binary that is still the same file
# (device, inode, size, change time) has the same version and catalog; asked again, this
# process answers from here (a fleet's shard, a test's many plans in one process)
_Identity = tuple[str, str | None, tuple[int, ...]]
_INSPECTED: dict[_Identity, Binaries] = {}


def inspect(bindir: Path, scratch: Path, user: proc.RunAs | None = None) -> Binaries:
    """Version and the full settings catalog of this installation, asked as the server
    user (root never runs the programs of a PostgreSQL installation)."""
    key = _identity(bindir, user)
    if key is not None and key in _INSPECTED:
        known = _INSPECTED[key]
        return Binaries(known.bindir, known.version, dict(known.settings))
    found = _inspect(bindir, scratch, user)
    if key is not None and _identity(bindir, user) == key:  # not swapped while it ran
        _INSPECTED[key] = Binaries(found.bindir, found.version, dict(found.settings))
    return found


def _identity(bindir: Path, user: proc.RunAs | None) -> _Identity | None:
    try:
        st = os.stat(bindir / "postgres")
    except OSError:
        return None
    return (str(bindir), user.name if user else None,
            (st.st_dev, st.st_ino, st.st_size, st.st_ctime_ns))  # fmt: skip


def _inspect(bindir: Path, scratch: Path, user: proc.RunAs | None) -> Binaries:
    res = proc.run([str(bindir / "postgres"), "--version"], out=scratch / "version.out",
                   user=user)  # fmt: skip
    m = re.search(r"\(PostgreSQL\) (\d+(?:\.\d+)?)", res.stdout)
    if not res.ok or not m:
        raise internal(f"cannot read the PostgreSQL version: {res.describe_failure()}")
    res = proc.run(
        [str(bindir / "postgres"), "--describe-config"], out=scratch / "describe-config.out",
        user=user,
    )  # fmt: skip
    if not res.ok:
        raise internal(f"postgres --describe-config failed: {res.describe_failure()}")
    return Binaries(bindir, m.group(1), _parse_catalog(res.stdout))


class ValueChecker:
    """Asks `postgres -C` what a value means, caching answers. Use as a context manager.

    Its scratch directory is root's (0711): the server user reads the empty
    postgresql.conf there but cannot plant anything; command output goes to a 0700
    directory inside it, and the one scratch data directory the server user must own (for
    `shared_memory_size`) is a leaf of its own."""

    def __init__(self, binaries: Binaries, user: proc.RunAs | None) -> None:
        self.binaries = binaries
        self.user = user
        self._cache: dict[tuple[str, str], str] = {}
        self._runtime: dict[tuple[str, tuple[tuple[str, str], ...], tuple[str, ...]], str] = {}
        self._dir: Path | None = None
        self._out: Path | None = None

    def __enter__(self) -> ValueChecker:
        self._dir = Path(tempfile.mkdtemp(prefix="pgsweep-check-"))
        os.chmod(self._dir, 0o711)
        self._out = safefs.private_dir(self._dir / "out")
        safefs.write_file(self._dir / "postgresql.conf", "", 0o644)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._dir:
            safefs.remove_tree(self._dir)

    def _postgres(self, *args: str) -> proc.Result:
        assert self._dir is not None and self._out is not None, "ValueChecker outside `with`"
        argv = [self.binaries.path("postgres"), "-D", str(self._dir), *args]
        return proc.run(argv, out=self._out / "postgres.out", timeout=30, user=self.user)

    def canonical(self, name: str, value: str) -> str:
        """The value in PostgreSQL's base units, or PgsweepError(what=server's message)."""
        key = (name, value)
        if key not in self._cache:
            res = self._postgres("-C", name, "-c", f"{name}={value}")
            if not res.ok:
                msgs = re.findall(r"(?:FATAL|ERROR|HINT):\s+(.*)", res.stderr)
                raise PgsweepError("; ".join(msgs) or res.tail(3))
            self._cache[key] = res.stdout.strip()
        return self._cache[key]

    def hidden(self, name: str) -> str | None:
        """For a name missing from --describe-config: None when the server does not know it,
        "read-only" for settings fixed at build or initdb time (block_size), "settable" for
        the few settable ones --describe-config leaves out (application_name)."""
        res = self._postgres("-C", name)
        if not res.ok:
            return None
        again = self._postgres("-C", name, "-c", f"{name}={res.stdout.strip()}")
        return "read-only" if "cannot be changed" in again.stderr else "settable"

    def answers(self) -> dict[tuple[str, str], str]:
        return dict(self._cache)

    def shared_memory_mb(
        self, settings: dict[str, str], initdb_options: tuple[str, ...] = ()
    ) -> int:
        """MB of shared memory a server with `settings` allocates, as the server computes
        it (`postgres -C shared_memory_size` needs a real, stopped data directory, so the
        first call per initdb option set runs a scratch initdb, about half a second)."""
        return int(self.runtime("shared_memory_size", settings, initdb_options))

    def runtime(
        self, name: str, settings: dict[str, str], initdb_options: tuple[str, ...] = ()
    ) -> str:
        """A runtime-computed setting (shared_memory_size[_in_huge_pages]) for `settings`,
        on a scratch cluster made by initdb with `initdb_options` (the WAL segment size
        changes wal_buffers' default, so the shared memory)."""
        assert self._dir is not None and self._out is not None, "ValueChecker outside `with`"
        key = (name, tuple(sorted(settings.items())), initdb_options)
        if key not in self._runtime:
            data = self._dir / f"shm-data-{abs(hash(initdb_options)) % 10**8}"
            if not data.exists():
                safefs.leaf_dir(data, self.user)
                argv = [self.binaries.path("initdb"), "-N", "-D", str(data), "--no-instructions",
                        *initdb_options]  # fmt: skip
                res = proc.run(argv, out=self._out / "initdb.out", timeout=120, user=self.user)
                if not res.ok:
                    raise internal(f"scratch initdb failed: {res.describe_failure()}")
            self._runtime[key] = runtime_value(self.binaries, data, name, settings, self.user,
                                               self._out)  # fmt: skip
        return self._runtime[key]


def runtime_value(
    binaries: Binaries,
    datadir: Path,
    name: str,
    settings: dict[str, str],
    user: proc.RunAs | None,
    scratch: Path,
) -> str:
    """A runtime-computed setting (shared_memory_size, shared_memory_size_in_huge_pages)
    of a stopped data directory under `settings`, from `postgres -C`. PostgreSQL 15+."""
    if binaries.major < 15:
        raise PgsweepError(
            f"PostgreSQL {binaries.version} cannot report {name} (it needs 15 or later)",
            fix="use PostgreSQL 15 or later for os.huge_pages and os.memory_limit checks",
        )
    argv = [binaries.path("postgres"), "-D", str(datadir), "-C", name]
    for key, value in sorted(settings.items()):
        argv += ["-c", f"{key}={value}"]
    res = proc.run(argv, out=scratch / f"{name}.out", timeout=30, user=user)
    if not res.ok:
        msgs = re.findall(r"(?:FATAL|ERROR):\s+(.*)", res.stderr)
        raise PgsweepError(f"postgres -C {name} failed: {'; '.join(msgs) or res.tail(3)}")
    return res.stdout.strip()
