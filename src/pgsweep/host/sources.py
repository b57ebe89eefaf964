"""Where a build's source comes from, pinned to a digest, and unpacked for root to compile.

Three kinds (`build.source`):
- `apt:postgresql-15`: Debian's source package, fetched once through a private sources
  list and lists directory (the machine's apt configuration is not touched) by apt's
  sandbox user, checked against apt's signed index and kept in the build cache
  (host/aptsource.py); the orig tarball is built as it is (Debian's patches are not
  applied);
- a release tarball (`.tar.gz`, `.tar.bz2`, `.tar.xz`, `.tgz`), read once by descriptor;
- a git work tree, with `build.ref` (commit, tag, branch) or, without it, HEAD plus the
  work tree's uncommitted changes to tracked files. git runs as the tree's owner (root
  running git in another user's repository would run that user's hooks and config), with
  no system or global configuration (host/gitsource.py), its output goes to root's
  files, and the tree is never written; the git directories and every tracked file must
  be ones no other user can change.

`resolve` pins a source to a digest (the build key hashes it); `unpack` puts it into a
root-owned folder as a tree holding `configure`."""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from . import aptsource, gitsource, proc, safefs

APT_PACKAGE = re.compile(r"^postgresql-[0-9]{1,3}$")
TARBALL = re.compile(r"\.(tar\.gz|tgz|tar\.bz2|tar\.xz)$")
GIT_REF = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/@{}^~-]{0,199}$")


class SourceError(Exception):
    """The source could not be fetched, pinned or unpacked; `log` holds the details."""

    def __init__(self, what: str, log: Path | None = None) -> None:
        super().__init__(what)
        self.log = log


@dataclass(frozen=True)
class Pinned:
    text: str  # as written: apt:postgresql-15, a path, a path@ref
    kind: str  # apt | tarball | git
    digest: str  # what the build key hashes
    path: Path  # the tarball (apt, tarball) or the work tree (git)
    commit: str = ""  # git: the commit built
    diff: bytes = b""  # git without a ref: the work tree's changes to tracked files
    version: str = ""  # apt: the package version


def kind_of(source: str) -> str:
    """apt | tarball | git | "" (unknown), from the text alone (validation)."""
    if source.startswith("apt:"):
        return "apt" if APT_PACKAGE.fullmatch(source[4:]) else ""
    if not source.startswith("/"):
        return ""
    return "tarball" if TARBALL.search(source) else "git"


def check_path(source: str) -> str | None:
    """Why a tarball or work tree named in the file cannot be used, or None. Read-only.
    Root compiles and runs what it holds: the tarball, the work tree and its .git must be
    root's or yours (the sudo user's), on a path no other user can change."""
    path = Path(source)
    if not path.is_absolute() or ".." in path.parts:
        return "a path must be absolute, without '..'"
    why = safefs.untrusted_link(path) or safefs.untrusted_component(path)
    if why:
        return f"another user could change what root would compile and run: {why}"
    try:
        st = os.stat(path)
    except OSError as exc:
        return f"cannot be read: {exc.strerror}"
    if kind_of(source) == "tarball" and not stat.S_ISREG(st.st_mode):
        return "not a regular file"
    if kind_of(source) == "git":
        if not (stat.S_ISDIR(st.st_mode) and os.path.lexists(path / ".git")):
            return "not a git work tree (no .git in it)"
        why = gitsource.untrusted(path)
        if why:
            return f"another user could change what root would compile and run: {why}"
    return None


def resolve(source: str, ref: str | None, cache: Path, scratch: Path, fetch: bool = True) -> Pinned:
    """Pin the source to the bytes that will be built: an apt source fetched into the
    cache once (without `fetch`: SourceError when it is not there, for `plan`); a tarball
    copied into root's `scratch` while hashed; git's archive of the commit (replace refs
    ignored) into `scratch`, plus the work tree's diff without a ref. `unpack` unpacks
    exactly these bytes, so the key is the content's."""
    why = check_path(source) if source.startswith("/") else None
    if why:
        raise SourceError(f"{source}: {why}")
    kind = kind_of(source)
    if kind == "apt":
        return _apt(source[4:], cache / "sources" / source[4:], scratch, fetch)
    if kind == "tarball":
        copy = scratch / ("source" + TARBALL.search(source).group(0))  # type: ignore[union-attr]
        return Pinned(source, kind, _copy_hashed(Path(source), copy), copy)
    return _git(Path(source), ref, scratch)


def unpack(pinned: Pinned, into: Path, scratch: Path) -> Path:
    """The source tree (holding `configure`) inside `into`, a root-owned empty folder."""
    argv = ["tar", "-x", "--no-same-owner", "--no-same-permissions", "-f", str(pinned.path),
            "-C", str(into)]  # fmt: skip
    res = proc.run(argv, out=scratch / "tar.out", timeout=600)
    if not res.ok:
        raise SourceError(f"tar could not unpack {pinned.text}: {res.last_line()}",
                          scratch / "tar.out.err")  # fmt: skip
    tops = [d for d in into.iterdir() if (d / "configure").is_file() and not d.is_symlink()]
    if len(tops) != 1:
        raise SourceError(f"{pinned.text} does not unpack to one tree holding configure")
    if pinned.diff:
        patch = scratch / "worktree.diff"
        safefs.write_file(patch, pinned.diff)
        res = proc.run([*gitsource.GIT, "apply", "--whitespace=nowarn", str(patch)],
                       out=scratch / "apply.out", cwd=tops[0], timeout=120,
                       env=gitsource.env(tops[0]))  # fmt: skip
        if not res.ok:
            raise SourceError(f"the work tree's changes do not apply: {res.last_line()}")
    return tops[0]


def _digest(path: Path) -> str:
    return _copy_hashed(path, None)


def _copy_hashed(path: Path, copy: Path | None) -> str:
    """sha256 of a regular file read once by descriptor, copied on the way when asked."""
    h = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    out = safefs.open_output(copy) if copy is not None else None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise SourceError(f"{path} is not a regular file")
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
            if out is not None:
                os.write(out, chunk)
    if out is not None:
        os.close(out)
    return h.hexdigest()


def _apt(package: str, home: Path, scratch: Path, fetch: bool) -> Pinned:
    """The orig tarball of Debian's source package, fetched once into `home` (root's)."""
    record = home / "source.json"
    try:
        data = json.loads(record.read_text()) if not record.is_symlink() else {}
        tarball = home / str(data["tarball"])
        if tarball.is_file() and _digest(tarball) == data["sha256"]:
            return Pinned(f"apt:{package}", "apt", data["sha256"], tarball,
                          version=data["version"])  # fmt: skip
    except (OSError, ValueError, KeyError, TypeError):
        pass
    if not fetch:
        raise SourceError(f"the source of {package} is not fetched yet")
    if home.exists():
        safefs.remove_tree(home)
    home.parent.mkdir(mode=0o755, exist_ok=True)
    safefs.private_dir(home, 0o755)
    try:
        got = aptsource.fetch(package, home, scratch)
    except aptsource.AptError as exc:
        raise SourceError(str(exc), exc.log) from None
    safefs.write_file(record, json.dumps({"tarball": got.tarball.name, "sha256": got.sha256,
                                          "version": got.version}), 0o644)  # fmt: skip
    return Pinned(f"apt:{package}", "apt", got.sha256, got.tarball, version=got.version)


def _git(tree: Path, ref: str | None, scratch: Path) -> Pinned:
    want = f"{ref}^{{commit}}" if ref else "HEAD^{commit}"
    commit = _git_run(tree, ["rev-parse", "--verify", "--end-of-options", want],
                      scratch / "rev-parse.out", "git rev-parse").decode().strip()  # fmt: skip
    archive = scratch / "source.tar"
    _git_run(tree, ["archive", "--format=tar", "--prefix=src/", commit], archive, "git archive")
    diff = b""
    if ref is None:
        diff = _git_run(tree, ["diff", "--binary", "--no-ext-diff", "--no-textconv", commit],
                        scratch / "diff.out", "git diff")  # fmt: skip
    digest = hashlib.sha256(_digest(archive).encode() + b"\0" + diff).hexdigest()
    text = f"{tree}@{ref}" if ref else f"{tree} (HEAD {commit[:12]}{' + changes' if diff else ''})"
    return Pinned(text, "git", digest, archive, commit=commit, diff=diff)


def _git_run(tree: Path, args: list[str], out: Path, what: str) -> bytes:
    try:
        return gitsource.run(tree, args, out, what)
    except gitsource.GitError as exc:
        raise SourceError(str(exc), exc.log) from None


_RELEASE = re.compile(r"postgresql-([0-9]{2,3})(?:[.][0-9]+|beta[0-9]*|rc[0-9]*|devel)?")
_AC_INIT = re.compile(rb"AC_INIT\(\[PostgreSQL\], \[([0-9]{2,3})")


def major_version(source: str, ref: str | None) -> int | None:
    """The PostgreSQL major version a source builds, when it can be told without
    unpacking it (None otherwise): apt's package name, the top folder inside a release
    tarball, a git tree's configure.ac at the ref (read by gitsource's git). For `plan`:
    a build of the installed major version has the installed catalog of settings."""
    kind = kind_of(source)
    try:
        if kind == "apt":
            return int(source.removeprefix("apt:postgresql-"))
        if kind == "tarball":
            with tarfile.open(source, "r:*") as tar:
                first = tar.next()
            m = _RELEASE.fullmatch(first.name.split("/")[0]) if first else None
            return int(m.group(1)) if m else None
        with tempfile.TemporaryDirectory(prefix="pgsweep-version-") as tmp:
            text = gitsource.run(Path(source), ["show", f"{ref or 'HEAD'}:configure.ac"],
                                 Path(tmp) / "show.out", "git show")  # fmt: skip
        found = _AC_INIT.search(text)
        return int(found.group(1)) if found else None
    except (OSError, ValueError, EOFError, tarfile.TarError, gitsource.GitError):
        return None
