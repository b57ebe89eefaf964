"""The build cache and build sources against another user's links and folders, with real
git, tar and files (nothing is compiled here; tests/integration/test_build.py compiles):
the cache refuses a folder another user could change or a link they planted; a tarball
with a link member cannot make root write outside the build; git runs as the work tree's
owner (git refuses root in another user's repository), and the work tree's uncommitted
changes are part of what is built and of its key. One file is compiled, through ccache
in the compile's own environment, to see its depend mode at work."""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import SERVER_USER
from pgsweep.errors import PgsweepError
from pgsweep.host import builds, sources

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="another user's files need root")


def _uid() -> tuple[int, int]:
    pw = pwd.getpwnam(SERVER_USER)
    return pw.pw_uid, pw.pw_gid


def _as_server(argv: list[str], cwd: Path) -> None:
    env = {"PATH": os.environ["PATH"], "HOME": str(cwd)}
    subprocess.run(["runuser", "-u", SERVER_USER, "--", *argv], cwd=cwd, check=True,
                   capture_output=True, env=env)  # fmt: skip


@pytest.fixture
def sticky() -> Iterator[Path]:
    """A fresh folder under /tmp: sticky, where any user may plant a name."""
    d = Path(tempfile.mkdtemp(prefix="pgsweep-test-cache-", dir="/tmp"))
    d.chmod(0o1777)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_cache_refuses_a_link_another_user_planted(sticky: Path, monkeypatch: pytest.MonkeyPatch,
                                                   tmp_path: Path) -> None:  # fmt: skip
    target = tmp_path / "roots-own"
    target.mkdir()
    link = sticky / "cache"
    os.symlink(target, link)
    os.lchown(link, *_uid())
    monkeypatch.setenv("PGSWEEP_CACHE_DIR", str(link))
    with pytest.raises(PgsweepError, match="is a link owned by uid"):
        builds.open_cache()
    assert list(target.iterdir()) == []


def test_cache_refuses_a_folder_of_another_user_or_open_to_others(
    sticky: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    theirs = sticky / "theirs"
    theirs.mkdir()
    os.chown(theirs, *_uid())
    monkeypatch.setenv("PGSWEEP_CACHE_DIR", str(theirs))
    with pytest.raises(PgsweepError, match="belongs to uid"):
        builds.open_cache()
    opened = sticky / "open"
    opened.mkdir()
    opened.chmod(0o777)
    monkeypatch.setenv("PGSWEEP_CACHE_DIR", str(opened))
    with pytest.raises(PgsweepError, match="writable by other users"):
        builds.open_cache()
    fresh = sticky / "fresh" / "builds"
    monkeypatch.setenv("PGSWEEP_CACHE_DIR", str(fresh))
    assert builds.open_cache(create=False) is None  # plan and `builds` make nothing
    assert not fresh.parent.exists()
    assert builds.open_cache() == fresh and oct(fresh.stat().st_mode & 0o777) == "0o755"


def test_ccache_folder_named_apart_is_checked_like_the_cache(
    sticky: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PGSWEEP_CCACHE_DIR: absolute, made 0755 when missing, never through another user's
    link or folder; unset, it is the build cache's ccache/."""
    monkeypatch.delenv("PGSWEEP_CCACHE_DIR", raising=False)  # scripts/test.sh sets one
    assert builds.ccache_dir(tmp_path) == tmp_path / "ccache"
    monkeypatch.setenv("PGSWEEP_CCACHE_DIR", "relative/ccache")
    with pytest.raises(PgsweepError, match="not an absolute path"):
        builds.ccache_dir(tmp_path)
    target = sticky / "target"
    target.mkdir()
    link = sticky / "ccache"
    os.symlink(target, link)
    os.lchown(link, *_uid())
    monkeypatch.setenv("PGSWEEP_CCACHE_DIR", str(link / "cc"))
    with pytest.raises(PgsweepError, match="not safe for root to write in"):
        builds.ccache_dir(tmp_path)
    assert list(target.iterdir()) == []
    fresh = tmp_path / "kept" / "ccache"
    monkeypatch.setenv("PGSWEEP_CCACHE_DIR", str(fresh))
    assert builds.ccache_dir(tmp_path) == fresh and oct(fresh.stat().st_mode & 0o777) == "0o755"


@pytest.mark.skipif(not shutil.which("ccache"), reason="ccache is not installed")
def test_the_compile_runs_ccache_in_its_depend_mode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file compiled as PostgreSQL's Makefile compiles it with `make autodepend=yes`
    (the compiler writes its dependencies: -MMD -MP -MF), in the compile's environment:
    ccache looks it up by the dependencies, and never runs the preprocessor to hash it (a
    first compile's extra cost: src/backend 200 -> 140 CPU-s, stop 45). Without the
    depend mode, the same compile is one preprocessed lookup."""
    monkeypatch.delenv("PGSWEEP_CCACHE_DIR", raising=False)  # scripts/test.sh sets one
    make = dict((n, argv) for n, argv, _ in builds.compile_steps(
        builds.BuildSpec("apt:postgresql-15", None, (), ""), tmp_path / "final",
        tmp_path / "stage"))["make"]  # fmt: skip
    assert "autodepend=yes" in make
    env = builds.compile_env(tmp_path)
    assert env["CC"] == "ccache cc" and builds.ccache_dir(tmp_path) == tmp_path / "ccache"
    (tmp_path / "a.c").write_text("#include <stdio.h>\nint f(void) { return puts(\"a\"); }\n")
    (tmp_path / ".deps").mkdir()
    base = {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}

    def compiled(extra: dict[str, str], obj: str) -> dict[str, int]:
        rule = f"$CC -c -o {obj} a.c -MMD -MP -MF .deps/{obj}.Po"  # Makefile.global's
        subprocess.run(["sh", "-c", rule], cwd=tmp_path, check=True, env=base | extra)
        stats = subprocess.run(["ccache", "--print-stats"], capture_output=True, text=True,
                               check=True, env=base | extra).stdout  # fmt: skip
        subprocess.run(["ccache", "--zero-stats"], check=True, capture_output=True,
                       env=base | extra)  # fmt: skip
        return {k: int(v) for k, v in (ln.split("\t") for ln in stats.splitlines())}

    depend = compiled(env, "a.o")
    assert (depend["direct_cache_miss"], depend["preprocessed_cache_miss"]) == (1, 0), depend
    again = compiled(env, "a.o")
    assert again["direct_cache_hit"] == 1, again
    # a cache of its own: this one's manifest would answer it by the direct mode
    plain = {k: v for k, v in env.items() if k != "CCACHE_DEPEND"}
    plain["CCACHE_DIR"] = str(tmp_path / "plain")
    cold = compiled(plain, "b.o")
    assert (cold["direct_cache_miss"], cold["preprocessed_cache_miss"]) == (1, 1), cold


def test_a_cache_entry_not_ours_is_not_a_build(tmp_path: Path) -> None:
    entry = tmp_path / "0123456789abcdef"
    (entry / "prefix" / "bin").mkdir(parents=True)
    meta = {"key": entry.name, "spec": {"source": "apt:postgresql-15", "ref": None,
            "configure": [], "cflags": ""}, "source": "s", "version": "v",
            "configure_line": "", "seconds": 1.0}  # fmt: skip
    (entry / "meta.json").write_text(__import__("json").dumps(meta))
    assert builds.lookup(tmp_path, entry.name) is not None
    os.chown(entry / "meta.json", *_uid())
    assert builds.lookup(tmp_path, entry.name) is None


def test_a_tarball_link_member_cannot_make_root_write_outside(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    evil = tmp_path / "postgresql-99.0.tar.gz"
    with tarfile.open(evil, "w:gz") as tar:
        link = tarfile.TarInfo("postgresql-99.0/escape")
        link.type, link.linkname = tarfile.SYMTYPE, str(outside)
        tar.addfile(link)
        for name in ("postgresql-99.0/configure", "postgresql-99.0/escape/planted"):
            data = b"#!/bin/sh\n"
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, __import__("io").BytesIO(data))
    into, scratch = tmp_path / "src", tmp_path / "out"
    into.mkdir()
    scratch.mkdir()
    pinned = sources.resolve(str(evil), None, tmp_path, scratch)
    with contextlib.suppress(sources.SourceError):  # tar may refuse the member: fine too
        sources.unpack(pinned, into, scratch)
    assert list(outside.iterdir()) == []


def _repo(open_dir: Path) -> Path:
    """A git work tree of the server user's with two commits (v1, v2) of `configure`."""
    home = open_dir / "home"  # the server user must reach it
    home.mkdir()
    os.chown(home, *_uid())
    tree = home / "postgres"
    tree.mkdir()
    os.chown(tree, *_uid())
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    _as_server([*git, "init", "-q"], tree)
    for n in ("one", "two"):
        _as_server(["sh", "-c", f"printf '#!/bin/sh\\necho {n}\\n' > configure"], tree)
        _as_server([*git, "add", "configure"], tree)
        _as_server([*git, "commit", "-qm", n], tree)
        _as_server([*git, "tag", f"v{1 if n == 'one' else 2}"], tree)
    return tree


def test_a_work_tree_of_another_user_is_refused(open_dir: Path, tmp_path: Path) -> None:
    tree = _repo(open_dir)
    why = sources.check_path(str(tree))
    assert why is not None and "another user could change what root would compile" in why
    with pytest.raises(sources.SourceError, match="another user could change"):
        sources.resolve(str(tree), "v1", tmp_path, tmp_path)


def test_git_runs_as_the_tree_owner_and_pins_what_is_built(
    tmp_path: Path, open_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tree = _repo(open_dir)
    refused = subprocess.run(["git", "-C", str(tree), "rev-parse", "HEAD"], capture_output=True)
    assert refused.returncode != 0 and b"dubious ownership" in refused.stderr  # root's git
    # the invoking user's own tree (root through sudo): trusted, read by git as its owner
    monkeypatch.setenv("SUDO_UID", str(_uid()[0]))
    scratch = tmp_path / "out"
    scratch.mkdir()
    clean = sources.resolve(str(tree), None, tmp_path, scratch)
    tagged = sources.resolve(str(tree), "v2", tmp_path, scratch)
    assert clean.commit == tagged.commit and len(clean.commit) == 40 and not clean.diff
    assert clean.digest == tagged.digest
    (tree / "configure").write_text("#!/bin/sh\necho three\n")
    changed = sources.resolve(str(tree), None, tmp_path, scratch)
    assert changed.commit == clean.commit and changed.digest != clean.digest
    into = tmp_path / "src"
    into.mkdir()
    built = sources.unpack(changed, into, scratch)
    assert (built / "configure").read_text() == "#!/bin/sh\necho three\n"  # what is built
    # a replace ref cannot make the key's commit and the archived content differ
    one = sources.resolve(str(tree), "v1", tmp_path, scratch)
    _as_server(["git", "replace", one.commit, clean.commit], tree)
    replaced = sources.resolve(str(tree), "v1", tmp_path, scratch)
    assert replaced.digest == one.digest
    again = tmp_path / "src2"
    again.mkdir()
    assert (sources.unpack(replaced, again, scratch) / "configure").read_text() == (
        "#!/bin/sh\necho one\n"
    )
    with pytest.raises(sources.SourceError, match="rev-parse"):
        sources.resolve(str(tree), "no-such-tag", tmp_path, scratch)


def test_a_source_another_user_could_change_is_refused(tmp_path: Path) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, *_uid())
    (theirs / "postgresql-15.5.tar.gz").write_bytes(b"")
    why = sources.check_path(str(theirs / "postgresql-15.5.tar.gz"))
    assert why is not None and "another user could change" in why
    mine = tmp_path / "postgresql-15.6.tar.gz"  # in root's folder, but the file is theirs
    mine.write_bytes(b"")
    os.chown(mine, *_uid())
    why = sources.check_path(str(mine))
    assert why is not None and "belongs to uid" in why


def test_prune_leaves_a_build_in_use_and_a_damaged_entry_is_no_build(tmp_path: Path) -> None:
    import fcntl

    entry = tmp_path / "0123456789abcdef"
    entry.mkdir()
    (entry / "meta.json").write_text("{not json")
    assert builds.lookup(tmp_path, entry.name) is None  # damaged: not a build, no crash
    assert [name for name, build, _ in builds.entries(tmp_path)] == [entry.name]
    fd = os.open(tmp_path / f"{entry.name}.lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_SH)  # a run using it
    assert builds.prune(tmp_path, [entry.name], True, None) == []
    assert entry.exists()
    os.close(fd)
    assert builds.prune(tmp_path, [entry.name], True, None) == [entry.name]
    assert not entry.exists()
    with pytest.raises(PgsweepError, match="0 or more"):
        builds.prune(tmp_path, [], True, -1.0)


def test_a_cache_the_server_user_cannot_reach_is_refused_before_building(
    tmp_path: Path, open_dir: Path
) -> None:
    """The server user runs the builds' binaries: a cache below a 0700 folder (pytest's own
    tmp_path) is exit 2 before anything is fetched or compiled, not a crash after."""
    import pwd

    from pgsweep.host.builds import check_reachable

    uid = pwd.getpwnam(SERVER_USER).pw_uid
    (tmp_path / "builds").mkdir(mode=0o755)
    with pytest.raises(PgsweepError, match="out of the server user's reach") as err:
        check_reachable(tmp_path / "builds", uid)
    assert err.value.exit_code == 2 and "drwx------" in err.value.what
    (open_dir / "builds").mkdir(mode=0o755)
    check_reachable(open_dir / "builds", uid)


def _hostile_gitdir(open_dir: Path) -> tuple[Path, Path, Path]:
    """A root-owned work tree whose `.git` is a file naming a repository the server user
    owns, with a clean filter that would write a canary as whoever runs it; and a HOME for
    root whose git configuration trusts every repository (safe.directory = *, common in CI
    images). Returns (tree, canary, home)."""
    theirs = open_dir / "theirs"
    theirs.mkdir()
    os.chown(theirs, *_uid())
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    _as_server([*git, "init", "-q", "repo"], theirs)
    repo = theirs / "repo"
    canary = open_dir / "canary"
    _as_server(["sh", "-c", "printf '#!/bin/sh\\necho configure\\n' > configure; "
                "echo '* filter=evil' > .gitattributes"], repo)  # fmt: skip
    _as_server([*git, "add", "configure", ".gitattributes"], repo)
    _as_server([*git, "commit", "-qm", "one"], repo)
    _as_server([*git, "config", "filter.evil.clean", f"sh -c 'id -u > {canary}; cat'"], repo)
    tree = open_dir / "tree"  # root's, with root's copies of the files
    tree.mkdir()
    shutil.copy(repo / "configure", tree / "configure")
    shutil.copy(repo / ".gitattributes", tree / ".gitattributes")
    (tree / ".git").write_text(f"gitdir: {repo / '.git'}\n")
    (tree / "configure").write_text("#!/bin/sh\necho changed\n")  # stat-dirty: diff cleans it
    home = open_dir / "roothome"
    home.mkdir(mode=0o700)
    (home / ".gitconfig").write_text("[safe]\n\tdirectory = *\n")
    return tree, canary, home


def test_a_git_file_naming_another_users_repository_runs_none_of_its_config(
    open_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tree, canary, home = _hostile_gitdir(open_dir)
    monkeypatch.setenv("HOME", str(home))  # root's git trusts every repository
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(home / ".gitconfig"))
    trusting = subprocess.run(["git", "-C", str(tree), "diff", "--stat"], capture_output=True)
    assert trusting.returncode == 0 and canary.exists()  # the attack is real with root's git
    canary.unlink()
    why = sources.check_path(str(tree))
    assert why is not None and "another user could change" in why and "theirs" in why, why
    scratch = tmp_path / "out"
    scratch.mkdir()
    with pytest.raises(sources.SourceError, match="another user could change"):
        sources.resolve(str(tree), None, tmp_path, scratch)
    with pytest.raises(sources.SourceError):
        sources._git_run(tree, ["diff", "--stat"], scratch / "d.out", "git diff")
    assert not canary.exists()


def _root_repo(where: Path) -> Path:
    tree = where / "rootrepo"
    tree.mkdir()
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(tree)]
    (tree / "configure").write_text("#!/bin/sh\necho one\n")
    (tree / "src").mkdir()
    (tree / "src" / "main.c").write_text("int main(void) { return 0; }\n")
    (tree / ".gitattributes").write_text("* filter=evil\n")
    for args in (["init", "-q"], ["add", "."], ["commit", "-qm", "one"]):
        subprocess.run([*git, *args], check=True, capture_output=True,
                       env={"PATH": os.environ["PATH"], "HOME": "/nonexistent"})  # fmt: skip
    return tree


def test_git_reads_no_global_or_system_configuration(
    open_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Root's own tree: git runs as root, and root's global configuration (here a clean
    filter the tree's attributes name) is not read."""
    tree = _root_repo(open_dir)
    canary = open_dir / "canary"
    home = open_dir / "roothome"
    home.mkdir(mode=0o700)
    clean = f"sh -c 'touch {canary}; cat'"
    (home / ".gitconfig").write_text(f'[filter "evil"]\n\tclean = "{clean}"\n')
    monkeypatch.setenv("HOME", str(home))
    (tree / "configure").write_text("#!/bin/sh\necho two\n")
    subprocess.run(["git", "-C", str(tree), "diff", "--stat"], check=True, capture_output=True)
    assert canary.exists()  # root's own git runs it
    canary.unlink()
    scratch = tmp_path / "out"
    scratch.mkdir()
    pinned = sources.resolve(str(tree), None, tmp_path, scratch)
    assert b"echo two" in pinned.diff
    assert not canary.exists()


def test_tracked_files_another_user_can_write_are_refused(open_dir: Path) -> None:
    tree = _root_repo(open_dir)
    assert sources.check_path(str(tree)) is None
    os.chown(tree / "src" / "main.c", *_uid())  # a tracked file of theirs
    why = sources.check_path(str(tree))
    assert why is not None and "tracked file" in why and "main.c" in why, why
    os.chown(tree / "src" / "main.c", 0, 0)
    (tree / "src").chmod(0o777)  # they could replace a tracked file
    why = sources.check_path(str(tree))
    assert why is not None and str(tree / "src") in why, why
    (tree / "src").chmod(0o755)
    (tree / "configure").chmod(0o666)
    why = sources.check_path(str(tree))
    assert why is not None and "configure" in why, why
    (tree / "configure").chmod(0o755)
    (tree / "untracked.o").write_text("")  # untracked: never compiled
    os.chown(tree / "untracked.o", *_uid())
    assert sources.check_path(str(tree)) is None
    os.chown(tree / ".git" / "config", *_uid())  # their file in the git directory
    why = sources.check_path(str(tree))
    assert why is not None and "config" in why, why


def test_the_major_version_is_known_before_anything_is_unpacked(open_dir: Path) -> None:
    """plan checks setting names against the installed catalog when every build is of its
    major version: apt's name, a tarball's top folder, a git tree's configure.ac."""
    assert sources.major_version("apt:postgresql-15", None) == 15
    tarball = open_dir / "renamed.tar.gz"  # the file's name says nothing; its content does
    with tarfile.open(tarball, "w:gz") as tar:
        info = tarfile.TarInfo("postgresql-16.4/configure")
        info.size = 0
        tar.addfile(info, __import__("io").BytesIO(b""))
    assert sources.major_version(str(tarball), None) == 16
    tree = _root_repo(open_dir)
    (tree / "configure.ac").write_text("AC_INIT([PostgreSQL], [18devel], [bugs@x])\n")
    subprocess.run(["git", "-C", str(tree), "add", "configure.ac"], check=True)
    subprocess.run(["git", "-C", str(tree), "-c", "user.name=t", "-c", "user.email=t@t",
                    "commit", "-qm", "version"], check=True, env={"PATH": os.environ["PATH"],
                   "HOME": "/nonexistent"})  # fmt: skip
    assert sources.major_version(str(tree), None) == 18
    assert sources.major_version(str(tree), "HEAD~1") is None  # no configure.ac there


def test_a_macro_that_adds_settings_leaves_names_to_the_builds(tmp_path: Path) -> None:
    """-DLOCK_DEBUG adds trace_locks: a build with a macro has settings the installed
    catalog lacks, so plan leaves the name to its catalog; without one it is refused."""
    from pgsweep import spec

    body = ('[experiment]\nname = "m"\n[build]\nsource = "apt:postgresql-15"\n'
            'cflags = "{}"\n[server]\ntrace_locks = "on"\n')  # fmt: skip
    (tmp_path / "macro.toml").write_text(body.format("-O2 -DLOCK_DEBUG"))
    spec.load(tmp_path / "macro.toml")  # deferred: the build's catalog decides
    (tmp_path / "plain.toml").write_text(body.format("-O2"))
    with pytest.raises(PgsweepError, match="no setting named 'trace_locks'") as err:
        spec.load(tmp_path / "plain.toml")
    assert "plain.toml:7: server.trace_locks" in str(err.value)
