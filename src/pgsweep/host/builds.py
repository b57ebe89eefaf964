"""PostgreSQL built from source, cached per option set.

A build is keyed by a hash of its pinned source (host/sources.py), its configure options,
CFLAGS and the compiler's version. It lives in the cache (`/var/cache/pgsweep/builds` as
root, the XDG cache otherwise, `$PGSWEEP_CACHE_DIR` to override), installed with `make
install` into its own prefix. It is compiled in a fresh private folder of the cache and
renamed into place once `meta.json` is written, so an interrupted build is never taken
for a finished one; a second run with the same options compiles nothing.

The cache is root's (or the invoking user's): its folder must be one no other user can
change (no link of theirs on the way, no folder of theirs or writable by them), and
every folder in it is made by pgsweep, never adopted."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import secrets
import shutil
import stat
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from ..errors import PgsweepError
from . import proc, safefs, sources

MAKE_TIMEOUT = 3 * 3600


class BuildError(Exception):
    """A build failed; the message says which step, `log` keeps the rest."""

    def __init__(self, what: str, log: Path | None) -> None:
        super().__init__(what)
        self.log = log

    def tail(self, lines: int = 20) -> str:
        if self.log is None or not self.log.is_file():
            return ""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


@dataclass(frozen=True)
class BuildSpec:
    source: str  # "apt:PACKAGE", a tarball path, or a git work tree
    ref: str | None  # with a git work tree: the commit, tag or branch to build
    configure: tuple[str, ...]  # validated options; pgsweep adds --prefix
    cflags: str

    def describe(self) -> str:
        what = self.source + (f"@{self.ref}" if self.ref else "")
        flags = [f"CFLAGS='{self.cflags}'"] if self.cflags else []
        return " ".join([what, *self.configure, *flags])


@dataclass(frozen=True)
class Build:
    key: str
    home: Path  # the cache entry: prefix/, build.log, meta.json
    spec: BuildSpec
    source: str  # the pinned source, described (a version, a commit)
    version: str  # `postgres --version`
    configure_line: str  # `pg_config --configure`
    seconds: float  # how long compiling it took
    cached: bool  # found in the cache: nothing was compiled in this run

    @property
    def bindir(self) -> Path:
        return self.home / "prefix" / "bin"

    @property
    def log(self) -> Path:
        return self.home / "build.log"


def cache_root() -> Path:
    base = os.environ.get("PGSWEEP_CACHE_DIR")
    if base:
        return Path(base)
    if os.geteuid() == 0:
        return Path("/var/cache/pgsweep/builds")
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "pgsweep" / "builds"


def open_cache(create: bool = True) -> Path | None:
    """The cache folder, resolved once: made (0755) if missing, refused (exit 2) when
    another user could change it or it is not ours. None when it does not exist and
    `create` is false (plan, builds list)."""
    root = cache_root()
    if not root.is_absolute():
        raise PgsweepError(f"PGSWEEP_CACHE_DIR={root} is not an absolute path",
                           fix="name the cache folder by an absolute path")  # fmt: skip
    where = "PGSWEEP_CACHE_DIR" if os.environ.get("PGSWEEP_CACHE_DIR") else None
    why = safefs.untrusted_link(root)
    if why:
        raise PgsweepError(f"the build cache {root} is not safe for root to use: {why}",
                           where=where, fix="point PGSWEEP_CACHE_DIR elsewhere")  # fmt: skip
    if not os.path.lexists(root):
        if not create:
            return None
        umask = os.umask(0o022)  # the server user passes through (an agent runs at 077)
        try:
            os.makedirs(root, 0o755)  # mkdir never follows a link planted at the last name
        finally:
            os.umask(umask)
    real = safefs.trusted_dir(root, "the build cache", where)
    st = os.lstat(real)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
        raise PgsweepError(f"the build cache {real} is not a folder of yours", where=where,
                           fix="remove it, or point PGSWEEP_CACHE_DIR elsewhere")  # fmt: skip
    return real


def ccache_dir(root: Path) -> Path:
    """Where builds keep ccache's cache: `$PGSWEEP_CCACHE_DIR` (a folder that outlives the
    build cache, as the test suite's does: a tmpfs cache made and removed each time), else
    the build cache's ccache/. Refused (exit 2) when another user could swap a part of it."""
    named = os.environ.get("PGSWEEP_CCACHE_DIR")
    if not named:
        return root / "ccache"
    if not Path(named).is_absolute():
        raise PgsweepError(f"PGSWEEP_CCACHE_DIR={named} is not an absolute path",
                           where="PGSWEEP_CCACHE_DIR",
                           fix="name ccache's folder by an absolute path")  # fmt: skip
    why = safefs.untrusted_link(Path(named))
    if why:  # before making anything: a folder made through another user's link is theirs
        raise PgsweepError(f"ccache's folder {named} is not safe for root to write in: {why}",
                           where="PGSWEEP_CCACHE_DIR", fix="point PGSWEEP_CCACHE_DIR elsewhere")
    if not os.path.lexists(named):
        os.makedirs(named, 0o755)  # mkdir never follows a link planted at the last name
    return safefs.trusted_dir(Path(named), "ccache's folder", "PGSWEEP_CCACHE_DIR")


def compiler_version(scratch: Path) -> str:
    res = proc.run(["cc", "--version"], out=scratch / "cc.out", timeout=30)
    return res.stdout.splitlines()[0].strip() if res.ok and res.stdout else "unknown"


def build_key(pinned: sources.Pinned, spec: BuildSpec, compiler: str) -> str:
    text = json.dumps({"source": pinned.digest, "configure": list(spec.configure),
                       "cflags": spec.cflags, "cc": compiler}, sort_keys=True)  # fmt: skip
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def lookup(root: Path, key: str) -> Build | None:
    """The finished build with this key, if the cache holds one of ours."""
    home = root / key
    try:
        fd = os.open(home / "meta.json", os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        with os.fdopen(fd) as f:
            if os.fstat(f.fileno()).st_uid != os.geteuid():
                return None
            data = json.loads(f.read())
        home_st = os.lstat(home)
        if not stat.S_ISDIR(home_st.st_mode) or home_st.st_uid != os.geteuid():
            return None
        s = data["spec"]
        spec = BuildSpec(s["source"], s["ref"], tuple(s["configure"]), s["cflags"])
        return Build(key, home, spec, data["source"], data["version"],
                     data["configure_line"], float(data["seconds"]), True)  # fmt: skip
    except (OSError, ValueError, KeyError, TypeError):  # damaged: not a build (prunable)
        return None


def entries(root: Path) -> list[tuple[str, Build | None, dict[str, object]]]:
    """Every entry of the cache: (name, the finished build or None, facts: size, age)."""
    out: list[tuple[str, Build | None, dict[str, object]]] = []
    for d in sorted(root.iterdir()):
        # logs: prune; scratch-clusters: the start check's templates (postgres/startcheck)
        if d.name in ("sources", "ccache", "scratch-clusters") or d.is_symlink() \
                or not d.is_dir():  # fmt: skip
            continue
        build = lookup(root, d.name)
        size = sum(p.lstat().st_size for p in d.rglob("*") if not p.is_symlink())
        out.append((d.name, build, {"bytes": size, "mtime": d.lstat().st_mtime}))
    return out


def prune(root: Path, keys: list[str], leftovers: bool, unused_days: float | None) -> list[str]:
    """Remove the named builds; with `leftovers` also unfinished builds and failed builds'
    logs, and with `unused_days` builds no run used for that long. Returns what went."""
    names = {name: build for name, build, _ in entries(root)}
    unknown = [k for k in keys if k not in names]
    if unknown:
        raise PgsweepError(f"not in the build cache {root}: {', '.join(unknown)}",
                           fix="`pgsweep builds` lists the cache's keys")  # fmt: skip
    if unused_days is not None and not leftovers:
        raise PgsweepError("--unused-days goes with --prune", fix="pgsweep builds --prune "
                           "--unused-days N")  # fmt: skip
    if unused_days is not None and not unused_days >= 0:
        raise PgsweepError(f"--unused-days {unused_days}: a number of days, 0 or more")
    gone = list(keys)
    if leftovers:
        cutoff = time.time() - 86400 * unused_days if unused_days is not None else None
        gone += [n for n, b in names.items() if b is None and n not in gone]
        if cutoff is not None:
            gone += [n for n, b in names.items()
                     if b and n not in gone and _last_used(root / n) < cutoff]  # fmt: skip
        gone += [p.name for p in root.glob("*.failed.log") if not p.is_symlink()]
        templates = root / "scratch-clusters"  # remade by the next start check that needs one
        if templates.is_dir() and not templates.is_symlink():
            gone.append(templates.name)
    removed = []
    for name in gone:
        key = name.removeprefix(".building-").removeprefix(".incoming-").split("-")[0]
        key = key.removesuffix(".failed.log")  # a copy being unpacked: its key's lock
        with locked(root, key, wait=False) as free:
            if not free:  # a run is building or using it: left alone
                continue
            path = root / name
            if path.is_dir() and not path.is_symlink():
                safefs.remove_tree(path)
            else:
                os.unlink(path)
            removed.append(name)
    return removed


def _last_used(home: Path) -> float:
    return os.lstat(home).st_mtime


def check_reachable(root: Path, uid: int) -> None:
    """The server user (`uid`) runs the builds' binaries: every folder above them must let
    it pass (exit 2 naming the folder otherwise)."""
    if uid == 0:
        return
    for d in [root, *root.parents]:
        st = os.stat(d)
        if st.st_uid != uid and not st.st_mode & stat.S_IXOTH:
            raise PgsweepError(
                f"the build cache {root} is out of the server user's reach: {d} is "
                f"{stat.filemode(st.st_mode)}, and the server runs the builds' binaries",
                where="PGSWEEP_CACHE_DIR" if os.environ.get("PGSWEEP_CACHE_DIR") else None,
                fix="choose a cache folder every folder above which others may pass (0755)",
            )  # fmt: skip


def find(root: Path, spec: BuildSpec, scratch: Path) -> tuple[str | None, Build | None]:
    """Read only, nothing fetched: the build's key when its source is pinned already (an
    apt source is pinned once fetched), and the finished build the cache holds under it."""
    try:
        pinned = sources.resolve(spec.source, spec.ref, root, scratch, fetch=False)
    except sources.SourceError:
        return None, None
    key = build_key(pinned, spec, compiler_version(scratch))
    return key, lookup(root, key)


def find_or_make(root: Path, spec: BuildSpec, scratch: Path,
                 say: Callable[[str], None]) -> tuple[Build, int, bool]:  # fmt: skip
    """The build of `spec`: its source pinned (an apt source fetched once), then found in
    the cache or compiled. Returns (build, a descriptor holding a shared lock on its entry
    while the run keeps it open, found in the cache). BuildError or SourceError."""
    with locked(root, "source-" + hashlib.sha256(spec.source.encode()).hexdigest()[:12]):
        try:
            pinned = sources.resolve(spec.source, spec.ref, root, scratch, fetch=False)
        except sources.SourceError:
            if sources.kind_of(spec.source) != "apt":
                raise
            say(f"fetching the source of {spec.source[4:]} with apt-get")
            pinned = sources.resolve(spec.source, spec.ref, root, scratch)  # fetched once
    key = build_key(pinned, spec, compiler_version(scratch))

    def make() -> Build:
        say(f"{spec.describe()}: compiling into {root / key}")
        return compile_build(root, key, spec, pinned, say)

    # the shared lock stays held while this process lives: prune leaves the build alone
    build, fd, cached = acquire(root, key, make)
    if cached:
        touch(build)
    return build, fd, cached


def touch(build: Build) -> None:
    """Mark a build as used now (`builds --prune --unused-days`)."""
    os.utime(build.home, follow_symlinks=False)


def _lock_file(root: Path, key: str) -> int:
    return os.open(root / f"{key}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                   0o600)  # fmt: skip


@contextmanager
def locked(root: Path, key: str, wait: bool = True) -> Iterator[bool]:
    """One process at a time builds, uses or removes a key: a second run waits, then finds
    it built. Without `wait`, yields False at once when another holds it."""
    fd = _lock_file(root, key)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)


def acquire(root: Path, key: str, make: Callable[[], Build]) -> tuple[Build, int, bool]:
    """The build `key`, made by `make` when the cache lacks it, and a descriptor holding a
    shared lock on it for as long as the run keeps it open (prune, which takes the lock
    alone, skips builds in use). The shared lock is taken first and never let go or
    changed (Linux converts a flock by letting it go first: a prune could slip in); runs
    that must build take turns on a second lock, and the second finds it built. Returns
    (build, descriptor, found in the cache)."""
    fd = _lock_file(root, key)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        found = lookup(root, key)
        if found is not None:
            return found, fd, True
        with locked(root, f"{key}.build"):  # another run may be building it: wait, look again
            found = lookup(root, key)
            build = found if found is not None else make()
        return build, fd, found is not None
    except BaseException:
        os.close(fd)
        raise


def compile_build(
    root: Path, key: str, spec: BuildSpec, pinned: sources.Pinned,
    step: Callable[[str], None] = lambda s: None,
) -> Build:  # fmt: skip
    """Unpack, configure, make and make install into the cache entry `key`. Everything
    happens in a fresh private folder renamed into place at the end; on failure that
    folder goes and its log is kept as `KEY.failed.log` (BuildError names it)."""
    work = safefs.private_dir(root / f".building-{key}-{secrets.token_hex(4)}")
    failed_log = root / f"{key}.failed.log"
    umask = os.umask(0o022)  # the binaries: the server user runs them, never changes them
    try:
        build = _compile(root, work, key, spec, pinned, step)
    except (BuildError, sources.SourceError, OSError) as exc:
        log = work / "build.log"
        if log.is_file():
            safefs.write_file(failed_log, log.read_bytes(), 0o644)
        safefs.remove_tree(work)
        raise BuildError(str(exc), failed_log if failed_log.is_file() else None) from None
    except BaseException:
        safefs.remove_tree(work)
        raise
    finally:
        os.umask(umask)
    if failed_log.exists():
        os.unlink(failed_log)
    return build


def compile_steps(spec: BuildSpec, final: Path,
                  stage: Path) -> list[tuple[str, list[str], float]]:  # fmt: skip
    """configure, make and make install, as `_compile` runs them in the unpacked source (and
    `plan --commands` shows them): (name, argv, timeout)."""
    jobs = str(len(os.sched_getaffinity(0)))
    return [
        ("configure", ["./configure", f"--prefix={final / 'prefix'}", *spec.configure], 900),
        # autodepend=yes: the compiler writes each object's dependencies (-MMD), which
        # lets ccache hash them instead of preprocessing every file a second time
        # (CCACHE_DEPEND): the backend's first compile 200 -> 140 CPU-s, stop 45
        ("make", ["make", f"-j{jobs}", "-s", "autodepend=yes"], MAKE_TIMEOUT),
        ("make install", ["make", "-s", "install", f"DESTDIR={stage}"], 900),
    ]


def compile_env(root: Path) -> dict[str, str]:
    """The compile's environment: cc, the compiler whose version the key holds, through
    ccache when it is installed, with a cache of pgsweep's own, no configuration of
    anyone's (HOME may be a sudo user's) and its depend mode (with `make autodepend=yes`,
    compile_steps: no second preprocessing of each file to hash it)."""
    if not shutil.which("ccache"):
        return {"CC": "cc"}
    safefs.write_file(root / "ccache.conf", "", 0o644)
    return {"CC": "ccache cc", "CCACHE_DIR": str(ccache_dir(root)),
            "CCACHE_CONFIGPATH": str(root / "ccache.conf"), "CCACHE_DEPEND": "1"}  # fmt: skip


def _compile(root: Path, work: Path, key: str, spec: BuildSpec, pinned: sources.Pinned,
             step: Callable[[str], None]) -> Build:  # fmt: skip
    began = time.monotonic()
    final, log = root / key, work / "build.log"
    (work / "src").mkdir(mode=0o700)
    (work / "out").mkdir(mode=0o700)
    step("unpack")
    tree = sources.unpack(pinned, work / "src", work / "out")
    env = {**compile_env(root), **({"CFLAGS": spec.cflags} if spec.cflags else {})}
    stage = work / "stage"
    for name, argv, timeout in compile_steps(spec, final, stage):
        step(" ".join(argv[:2]) if name == "make" else name)
        res = proc.run(argv, out=work / "out" / f"{name.replace(' ', '-')}.out",
                       timeout=timeout, cwd=tree, env=env)  # fmt: skip
        _append_log(log, name, res)
        if not res.ok:
            raise BuildError(f"{name} failed for {spec.describe()}: {res.last_line()}", log)
    os.rename(stage / str(final / "prefix").lstrip("/"), work / "prefix")
    version, line = _installed_facts(work, key)
    seconds = time.monotonic() - began
    meta = {"key": key, "spec": asdict(spec), "source": _pinned_text(pinned),
            "version": version, "configure_line": line, "seconds": seconds,
            "built_at": time.time()}  # fmt: skip
    for d in ("src", "out", "stage"):
        safefs.remove_tree(work / d)
    safefs.write_file(work / "meta.json", json.dumps(meta, indent=1), 0o644)
    os.chmod(work, 0o755)
    os.sync()  # the binaries on disk before the entry looks finished (a power loss)
    os.rename(work, final)
    return Build(key, final, spec, meta["source"], version, line, seconds, False)  # type: ignore[arg-type]


def _installed_facts(work: Path, key: str) -> tuple[str, str]:
    """`postgres --version` and `pg_config --configure` of the staged build."""
    bindir = work / "prefix" / "bin"
    facts = []
    for prog, arg in (("postgres", "--version"), ("pg_config", "--configure")):
        res = proc.run([str(bindir / prog), arg], out=work / "out" / f"{prog}.out", timeout=60)
        if not res.ok:
            raise BuildError(f"the build {key} does not run {prog} {arg}: {res.last_line()}",
                             work / "build.log")  # fmt: skip
        facts.append(res.stdout.strip())
    return facts[0], facts[1]


def _pinned_text(pinned: sources.Pinned) -> str:
    if pinned.kind == "apt":
        return f"{pinned.text} {pinned.version} (sha256 {pinned.digest[:12]})"
    if pinned.kind == "git":
        return pinned.text
    return f"{pinned.text} (sha256 {pinned.digest[:12]})"


def _append_log(log: Path, name: str, res: proc.Result) -> None:
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "a") as f:
        f.write(f"==== {name}: {' '.join(res.argv)} (exit {res.returncode}, "
                f"{res.seconds:.0f} s)\n{res.stdout}{res.stderr}\n")  # fmt: skip
