"""A git work tree as a build source, read by a git that trusts nothing it was not shown.

git reads configuration from the system, from HOME and from the repository, and the
repository's configuration can name programs (`filter.*.clean`, `core.fsmonitor`,
`diff.external`) it runs while reading the tree. So:

- git runs with no system or global configuration and an empty home
  (GIT_CONFIG_NOSYSTEM, GIT_CONFIG_GLOBAL=/dev/null, HOME=/nonexistent, ...): a
  `safe.directory = *` in root's configuration (common in CI images) is never seen, and
  `-c safe.directory=` empties the list, so git's own ownership check stays on;
- it runs as the work tree's owner (never root in another user's repository), in an
  environment built from scratch;
- before it runs, the tree, its `.git` and the git directory and common directory a
  `.git` *file* names are checked like the tree (root's or yours, on a path no other
  user can change, every entry in them too), and every tracked file and the folders
  holding it must be ones no other user can write: root compiles them.
"""

from __future__ import annotations

import os
import pwd
import stat
import tempfile
from pathlib import Path

from . import proc, safefs

# an empty home and no configuration but the repository's own (checked to be trusted)
GIT_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_ATTR_NOSYSTEM": "1",
    "HOME": "/nonexistent",
    "XDG_CONFIG_HOME": "/nonexistent",
    "GIT_NO_REPLACE_OBJECTS": "1",
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_OPTIONAL_LOCKS": "0",  # reading never refreshes (writes) the index
}
GIT = ["git", "-c", "safe.directory=", "-c", "core.fsmonitor=false",
       "-c", "core.hooksPath=/dev/null"]  # fmt: skip
MAX_GIT_ENTRIES = 500_000  # files in a git directory we walk; a PostgreSQL clone has ~2,000


class GitError(Exception):
    """git failed, or the tree is not one root may read with it; `log` holds git's output."""

    def __init__(self, what: str, log: Path | None = None) -> None:
        super().__init__(what)
        self.log = log


def trusted_uids() -> set[int]:
    """Who may own what root compiles: root, this user, the user who ran it through sudo."""
    uids = {0, os.geteuid()}
    if os.environ.get("SUDO_UID", "").isdigit():
        uids.add(int(os.environ["SUDO_UID"]))
    return uids


def env(tree: Path) -> dict[str, str]:
    """git's environment for `tree`: nothing configured but the repository, and no looking
    for a repository above the tree."""
    return {**GIT_ENV, "GIT_CEILING_DIRECTORIES": str(tree.parent)}


def run(tree: Path, args: list[str], out: Path, what: str) -> bytes:
    """git in `tree` as the tree's owner (never root in another user's repository); its
    output into root's file `out`."""
    owner = os.stat(tree).st_uid
    try:
        user = None if owner == os.geteuid() else proc.RunAs(pwd.getpwuid(owner).pw_name)
    except KeyError:
        raise GitError(f"{tree} belongs to uid {owner}, which has no account") from None
    res = proc.run([*GIT, "-C", str(tree), *args], out=out, user=user, timeout=600, env=env(tree))
    if not res.ok:
        raise GitError(f"{what} failed in {tree}: {res.last_line()}", out.with_suffix(".out.err"))
    return out.read_bytes()


def untrusted(tree: Path) -> str | None:
    """Why root must not compile this work tree, or None: its git directories (the `.git`
    folder, or the git dir and common dir a `.git` file names) and every tracked file
    must be ones no other user can change. Read-only; runs git (safely) to list files."""
    try:
        dirs = git_dirs(tree)
    except (OSError, ValueError) as exc:
        return f"{tree / '.git'}: {exc}"
    for d in dirs:
        why = safefs.untrusted_link(d) or safefs.untrusted_component(d) or _untrusted_inside(d)
        if why:
            return why
    with tempfile.TemporaryDirectory(prefix="pgsweep-git-") as tmp:
        try:
            listed = run(tree, ["ls-files", "-z", "--cached"], Path(tmp) / "ls-files.out",
                         "git ls-files")  # fmt: skip
        except GitError as exc:
            return str(exc)
    return _untrusted_files(tree, [n for n in listed.decode(errors="replace").split("\0") if n])


def git_dirs(tree: Path) -> list[Path]:
    """The git directory of `tree` and, when it has one, its common directory (a linked
    work tree's, or a `.git` file's), resolved. ValueError for a `.git` file that is not
    one line `gitdir: PATH`."""
    dotgit = tree / ".git"
    st = os.lstat(dotgit)
    if stat.S_ISREG(st.st_mode):
        if st.st_uid not in trusted_uids() or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            raise ValueError(f"the .git file belongs to uid {st.st_uid} or others can write it")
        text = _small(dotgit).strip()
        if not text.startswith("gitdir: ") or "\n" in text:
            raise ValueError("a .git file holds one line, gitdir: PATH")
        gitdir = Path(os.path.realpath(tree / text.removeprefix("gitdir: ")))
    else:
        gitdir = Path(os.path.realpath(dotgit))
    dirs = [gitdir]
    common = gitdir / "commondir"
    if os.path.lexists(common):
        dirs.append(Path(os.path.realpath(gitdir / _small(common).strip())))
    return dirs


def _small(path: Path) -> str:
    fd = os.open(path, os.O_RDONLY | safefs.NOFOLLOW | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError(f"{path} is not a regular file")
        return os.read(fd, 4096).decode(errors="replace")
    finally:
        os.close(fd)


def _bad(st: os.stat_result) -> bool:
    """Owned by someone else, or writable by others (a link's own mode means nothing)."""
    if st.st_uid not in trusted_uids():
        return True
    return not stat.S_ISLNK(st.st_mode) and bool(st.st_mode & (stat.S_IWGRP | stat.S_IWOTH))


def _untrusted_inside(gitdir: Path) -> str | None:
    """Every entry of a git directory (its config, hooks, objects, refs) must be trusted:
    one file of another user's is enough to run their program or change what is built."""
    seen = 0
    for top, dirnames, filenames in os.walk(gitdir, followlinks=False):
        for name in [*dirnames, *filenames]:
            seen += 1
            path = Path(top, name)
            st = os.lstat(path)
            if _bad(st):
                return f"{path} belongs to uid {st.st_uid} or other users can write it"
        if seen > MAX_GIT_ENTRIES:
            return f"{gitdir} holds more than {MAX_GIT_ENTRIES:,} entries"
    return None


def _untrusted_files(tree: Path, names: list[str]) -> str | None:
    """A tracked file, or a folder holding one, that another user owns or can write."""
    folders: set[Path] = set()
    for name in names:
        path = tree / name
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            continue  # deleted in the work tree: nothing of it is read
        if _bad(st):
            return f"the tracked file {path} belongs to uid {st.st_uid} or other users can write it"
        folders.update(p for p in path.parents if p != tree and tree in p.parents)
    for folder in sorted(folders):
        st = os.lstat(folder)
        if _bad(st):
            return f"{folder} belongs to uid {st.st_uid} or other users can write in it"
    return None
