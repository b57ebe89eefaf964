"""PostgreSQL built from source, cached per option set.

A build is keyed by a hash of its source (the tarball's digest; a git commit, plus the
diff of the work tree when building it as it is), its configure options, CFLAGS and the
compiler's version. It lives in the cache (`/var/cache/pgsweep/builds` as root, the XDG
cache otherwise, `$PGSWEEP_CACHE_DIR` to override), installed with `make install` into its
own prefix; `meta.json`, written last, marks it complete, so an interrupted build is never
taken for a finished one. A second run with the same options compiles nothing.

The cache is root's (or the invoking user's): its folder must be one no other user can
change, and every directory in it is made fresh by pgsweep, never adopted. Debian's
source package is fetched with apt through a private sources list and lists directory, so
the machine's apt configuration is not touched."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from ..errors import PgsweepError
from . import proc, safefs

DEBIAN_SOURCES = "http://deb.debian.org/debian"
KEYRING = Path("/usr/share/keyrings/debian-archive-keyring.gpg")


class BuildError(Exception):
    """A build failed; the message says which step, the log keeps the rest."""

    def __init__(self, what: str, log: Path) -> None:
        super().__init__(what)
        self.log = log


@dataclass(frozen=True)
class BuildSpec:
    source: str  # "apt:PACKAGE", a tarball path, or a git work tree
    ref: str | None  # with a git work tree: the commit, tag or branch to build
    configure: tuple[str, ...]  # validated; no --prefix (pgsweep sets it)
    cflags: str

    def describe(self) -> str:
        what = self.source + (f"@{self.ref}" if self.ref else "")
        flags = [f"CFLAGS={self.cflags}"] if self.cflags else []
        return " ".join([what, *self.configure, *flags])


@dataclass(frozen=True)
class Build:
    key: str
    prefix: Path  # bin/, lib/, share/ of the installed build
    log: Path
    spec: BuildSpec
    seconds: float
    cached: bool

    @property
    def bindir(self) -> Path:
        return self.prefix / "bin"


def cache_root() -> Path:
    base = os.environ.get("PGSWEEP_CACHE_DIR")
    if base:
        return Path(base)
    if os.geteuid() == 0:
        return Path("/var/cache/pgsweep/builds")
    xdg = os.environ.get("XDG_CACHE_HOME", str(Path.home() / ".cache"))
    return Path(xdg) / "pgsweep" / "builds"


def compiler_version(scratch: Path) -> str:
    res = proc.run([os.environ.get("CC", "cc"), "--version"], out=scratch / "cc.out", timeout=30)
    return res.stdout.splitlines()[0].strip() if res.ok and res.stdout else "unknown"


def lookup(key: str) -> Build | None:
    """The finished build with this key, if the cache holds one."""
    meta = cache_root() / key / "meta.json"
    try:
        data = json.loads(meta.read_text())
    except (OSError, ValueError):
        return None
    spec = BuildSpec(data["spec"]["source"], data["spec"]["ref"],
                     tuple(data["spec"]["configure"]), data["spec"]["cflags"])  # fmt: skip
    return Build(key, meta.parent / "prefix", meta.parent / "build.log", spec,
                 float(data["seconds"]), True)  # fmt: skip


def entries() -> list[tuple[Build | None, Path]]:
    """Every entry of the cache: finished builds, and leftovers of interrupted ones."""
    root = cache_root()
    if not root.is_dir():
        return []
    return [(lookup(d.name), d) for d in sorted(root.iterdir()) if d.is_dir()]


def prune(keep: set[str]) -> list[str]:
    """Remove every cache entry whose key is not in `keep` (and unfinished ones)."""
    removed = []
    for build, path in entries():
        if build is None or build.key not in keep:
            safefs.remove_tree(path)
            removed.append(str(path))
    return removed


def ensure_root() -> Path:
    """The cache folder: made if missing, refused when another user could change it."""
    root = cache_root()
    root.mkdir(mode=0o755, parents=True, exist_ok=True)
    return safefs.trusted_dir(root, "the build cache")


def build_key(source_id: str, spec: BuildSpec, compiler: str) -> str:
    text = json.dumps({"source": source_id, "spec": asdict(spec), "cc": compiler},
                      sort_keys=True)  # fmt: skip
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def fetch_apt_source(package: str, into: Path) -> Path:
    """Debian's source package (orig tarball) through a private sources list: the
    machine's apt configuration and lists stay as they are. Returns the orig tarball."""
    if not KEYRING.exists():
        raise BuildError(f"no Debian archive keyring at {KEYRING} to verify {package}", into)
    state = into / "apt"
    for d in ("lists/partial", "cache/archives/partial"):
        (state / d).mkdir(parents=True, exist_ok=True)
    sources = state / "sources.list"
    sources.write_text(f"deb-src [signed-by={KEYRING}] {DEBIAN_SOURCES} bookworm main\n")
    opts = [f"-o{k}={v}" for k, v in (
        ("Dir::Etc::SourceList", sources), ("Dir::Etc::SourceParts", "/nonexistent"),
        ("Dir::State::Lists", state / "lists"), ("Dir::Cache", state / "cache"),
        ("APT::Sandbox::User", "root"),
    )]  # fmt: skip
    for argv, name in ((["apt-get", "-q", *opts, "update"], "apt-update"),
                       (["apt-get", "-q", *opts, "source", "--download-only", package],
                        "apt-source")):  # fmt: skip
        res = proc.run(argv, out=into / f"{name}.out", timeout=900, cwd=into)
        if not res.ok:
            raise BuildError(f"apt-get could not fetch the source of {package}: "
                             f"{res.last_line()}", into / f"{name}.out")  # fmt: skip
    found = sorted(into.glob("*.orig.tar.*"))
    if not found:
        raise BuildError(f"apt-get fetched no orig tarball for {package}", into / "apt-source.out")
    return found[0]


def compile_build(spec: BuildSpec, key: str, source_tree: Path, scratch: Path) -> Build:
    """configure, make and make install into the cache entry `key` (made fresh); meta.json
    last. The build tree is `source_tree`, root's, thrown away afterwards."""
    import time

    root = ensure_root()
    entry = root / key
    if entry.exists():
        safefs.remove_tree(entry)  # an interrupted build of this key (no meta.json)
    safefs.private_dir(entry, 0o755)
    log = entry / "build.log"
    began = time.monotonic()
    env = {"CFLAGS": spec.cflags} if spec.cflags else {}
    if shutil.which("ccache"):
        env["CC"] = "ccache gcc"
    jobs = str(len(os.sched_getaffinity(0)))
    steps = [
        ("configure", ["./configure", f"--prefix={entry / 'prefix'}", *spec.configure], 900),
        ("make", ["make", f"-j{jobs}", "-s"], 7200),
        ("make install", ["make", "-s", "install"], 900),
    ]
    for name, argv, timeout in steps:
        res = proc.run(argv, out=scratch / f"{name.replace(' ', '-')}.out", timeout=timeout,
                       cwd=source_tree, env=env)  # fmt: skip
        _append_log(log, name, res)
        if not res.ok:
            raise BuildError(f"{name} failed for {spec.describe()}: {res.last_line()}", log)
    seconds = time.monotonic() - began
    meta = {"spec": asdict(spec), "seconds": seconds, "key": key}
    safefs.write_file(entry / "meta.json", json.dumps(meta, indent=1), 0o644)
    return Build(key, entry / "prefix", log, spec, seconds, False)


def _append_log(log: Path, name: str, res: proc.Result) -> None:
    with open(log, "a") as f:
        f.write(f"==== {name}: {' '.join(res.argv)} (exit {res.returncode}, "
                f"{res.seconds:.0f} s)\n{res.stdout}{res.stderr}\n")  # fmt: skip


def unpack(tarball: Path, into: Path) -> Path:
    """Extract a source tarball into `into` (root's); returns the source tree (the one top
    directory holding `configure`)."""
    res = proc.run(["tar", "-x", "--no-same-owner", "-f", str(tarball), "-C", str(into)],
                   out=into.parent / "tar.out", timeout=600)  # fmt: skip
    if not res.ok:
        raise BuildError(f"tar could not unpack {tarball}: {res.last_line()}", into.parent)
    tops = [d for d in into.iterdir() if (d / "configure").is_file()]
    if len(tops) != 1:
        raise BuildError(f"{tarball} does not unpack to one PostgreSQL source tree", into.parent)
    return tops[0]


def scratch_dir() -> Path:
    """A root-owned temporary folder for one build's sources and command output."""
    return Path(tempfile.mkdtemp(prefix="pgsweep-build-", dir="/var/tmp"))


def refuse_outside(path: str, where: str) -> Path:
    p = Path(path)
    if not p.exists():
        raise PgsweepError(f"build.source {path} does not exist", where=where,
                           fix="name a tarball, a git work tree, or apt:postgresql-15")  # fmt: skip
    return p
