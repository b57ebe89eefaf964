"""Root next to trees the server user owns: every primitive refuses a link or a file the
server user planted (planted for real, as the postgres user, through runuser), and the
target stays unchanged. Also the one mountinfo reader, sysctl names and the journal."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import SERVER_USER
from pgsweep.errors import PgsweepError
from pgsweep.host import journal, mounts, safefs, workarea
from pgsweep.host.local import LOCAL
from pgsweep.host.proc import RunAs
from pgsweep.layers.oslayer import sysctl_file, sysctl_refusal

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="needs root and the postgres user")


def as_server_user(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["runuser", "-u", SERVER_USER, "--", *argv], capture_output=True,
                          text=True, timeout=30)  # fmt: skip


@pytest.fixture
def canary(tmp_path: Path) -> Path:
    """A root-only file an attacker wants root to overwrite, chown or read out."""
    path = tmp_path / "canary"
    path.write_text("root secret\n")
    path.chmod(0o600)
    return path


@pytest.fixture
def arena() -> Iterator[Path]:
    """A root-owned directory the server user can pass through, as pgsweep's work area
    (pytest's own temporary folders are closed to other users)."""
    area = Path(tempfile.mkdtemp(prefix="pgsweep-test-arena-", dir="/tmp"))
    area.chmod(0o711)
    yield area
    shutil.rmtree(area)


def untouched(canary: Path) -> bool:
    st = canary.stat()
    return canary.read_text() == "root secret\n" and st.st_uid == 0 and st.st_mode & 0o777 == 0o600


@root_only
def test_a_leaf_is_the_server_users_and_never_an_existing_path(arena: Path) -> None:
    user = RunAs(SERVER_USER)
    leaf = safefs.leaf_dir(arena / "data", user)
    assert (leaf.stat().st_uid, leaf.stat().st_mode & 0o777) == (user.uid, 0o700)
    with pytest.raises(FileExistsError):
        safefs.leaf_dir(leaf, user)  # never adopt what exists
    with pytest.raises(FileExistsError):
        safefs.private_dir(leaf)


@root_only
def test_write_file_replaces_a_planted_link_instead_of_following_it(
    arena: Path, canary: Path
) -> None:
    user = RunAs(SERVER_USER)
    leaf = safefs.leaf_dir(arena / "data", user)
    assert as_server_user("ln", "-s", str(canary), str(leaf / "pgsweep.conf")).returncode == 0
    safefs.write_file(leaf / "pgsweep.conf", "work_mem = '4MB'\n", 0o600, (user.uid, user.gid))
    assert untouched(canary)
    st = os.lstat(leaf / "pgsweep.conf")
    assert not (leaf / "pgsweep.conf").is_symlink() and st.st_uid == user.uid


@root_only
def test_read_owned_refuses_links_and_hard_links_to_another_users_file(
    arena: Path, canary: Path
) -> None:
    user = RunAs(SERVER_USER)
    leaf = safefs.leaf_dir(arena / "log", user)
    assert as_server_user("ln", "-s", str(canary), str(leaf / "server.log")).returncode == 0
    with pytest.raises(safefs.UnsafePath, match="symbolic link"):
        safefs.read_owned(leaf / "server.log", user.uid)
    os.link(canary, leaf / "hard.log")  # the kernel stops postgres doing this; root can
    with pytest.raises(safefs.UnsafePath, match="not a regular file owned by"):
        safefs.read_owned(leaf / "hard.log", user.uid)
    with pytest.raises(safefs.UnsafePath):
        safefs.open_owned_in(leaf, "server.log", user.uid)
    assert as_server_user("sh", "-c", f"printf 'a\\nb\\nc\\n' > {leaf / 'own.log'}").returncode == 0
    assert safefs.read_owned(leaf / "own.log", user.uid, limit=4, tail=True) == b"b\nc\n"


@root_only
def test_output_files_refuse_a_planted_link(tmp_path: Path, canary: Path) -> None:
    (tmp_path / "out").symlink_to(canary)
    with pytest.raises(OSError):
        safefs.open_output(tmp_path / "out")
    assert untouched(canary)


@root_only
def test_mount_points_must_be_real_root_owned_directories(arena: Path, tmp_path: Path) -> None:
    point = safefs.private_dir(arena / "mnt", 0o711)
    safefs.check_mountpoint(point)
    (arena / "swapped").symlink_to("/etc")
    with pytest.raises(safefs.UnsafePath):
        safefs.check_mountpoint(arena / "swapped")
    leaf = safefs.leaf_dir(arena / "leaf", RunAs(SERVER_USER))
    with pytest.raises(safefs.UnsafePath):
        safefs.check_mountpoint(leaf)  # the server user's directory
    inner = leaf / "inner"
    assert as_server_user("mkdir", str(inner)).returncode == 0
    with pytest.raises(safefs.UnsafePath):
        safefs.check_mountpoint(inner)


@root_only
def test_a_folder_the_server_user_can_change_is_not_trusted(arena: Path) -> None:
    assert safefs.untrusted_component(arena) is None
    leaf = safefs.leaf_dir(arena / "pg", RunAs(SERVER_USER))
    assert "belongs to uid" in str(safefs.untrusted_component(leaf / "results"))
    open_dir = arena / "open"
    open_dir.mkdir(mode=0o777)
    open_dir.chmod(0o777)
    assert "writable by other users" in str(safefs.untrusted_component(open_dir))
    assert safefs.untrusted_component(Path("/tmp/anything")) is None  # sticky: fine


@root_only
def test_server_user_cannot_plant_anything_in_root_directories(arena: Path) -> None:
    private = safefs.private_dir(arena / "private")
    for d in (arena, private):
        res = as_server_user("ln", "-s", "/etc/shadow", str(d / "planted"))
        assert res.returncode != 0 and "Permission denied" in res.stderr
        assert not (d / "planted").is_symlink()


@root_only
def test_remove_tree_outruns_a_server_user_refilling_it(arena: Path, canary: Path) -> None:
    """A server-user process keeps creating files (and links to the canary) in its leaf
    while root deletes it: the leaf is taken from its owner first, so the deletion ends,
    the writer is locked out, and the canary is neither followed nor removed."""
    leaf = safefs.leaf_dir(arena / "leaf", RunAs(SERVER_USER))
    deep = leaf / "a" / "b"
    as_server_user("mkdir", "-p", str(deep))
    loop = (f"i=0; while [ $i -lt 100000 ]; do i=$((i+1)); : > {deep}/f$i 2>/dev/null; "
            f"ln -s {canary} {leaf}/l$i 2>/dev/null; done")  # fmt: skip
    writer = subprocess.Popen(["runuser", "-u", SERVER_USER, "--", "sh", "-c", loop])
    try:
        while len(list(deep.iterdir())) < 50:  # the writer is busy
            pass
        safefs.remove_tree(leaf)
        assert not leaf.exists() and untouched(canary)
    finally:
        writer.kill()
        writer.wait()


@root_only
def test_remove_tree_handles_depth_links_and_refuses_a_mount_inside(
    arena: Path, canary: Path
) -> None:
    tree = arena / "tree"
    deep = tree.joinpath(*["d"] * (safefs.MAX_DEPTH + 20))  # past the descriptor walk
    deep.mkdir(parents=True)
    (deep / "link").symlink_to(canary)
    (tree / "dir-link").symlink_to(canary.parent, target_is_directory=True)
    safefs.remove_tree(tree)
    assert not tree.exists() and untouched(canary)
    safefs.remove_tree(tree)  # missing is fine
    inner = arena / "outer" / "mnt"
    inner.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "pgsweep-test", str(inner)],
                   check=True)  # fmt: skip
    try:
        (inner / "keep").write_text("data on another filesystem")
        with pytest.raises(PgsweepError, match="another filesystem"):
            safefs.remove_tree(arena / "outer")
        assert (inner / "keep").read_text() == "data on another filesystem"
    finally:
        subprocess.run(["umount", str(inner)], check=True)


def test_mountinfo_is_unescaped() -> None:
    line = (r"36 35 98:0 / /mnt/with\040space\011tab rw,noatime master:1 - ext4 "
            r"/dev/loop0 rw,errors=continue")  # fmt: skip
    (m,) = mounts.parse(line)
    assert m.point == "/mnt/with space\ttab" and m.fstype == "ext4" and m.source == "/dev/loop0"
    assert m.options == "rw,noatime,errors=continue" and m.device == "98:0"
    assert m.contains("/mnt/with space\ttab/data") and not m.contains("/mnt/with")


@pytest.mark.parametrize("name", ["../../../etc/passwd", ".etc.shadow", "/etc/hosts", "vm..x",
                                  "vm.swappiness/../../../etc/x", "vm.a b"])  # fmt: skip
def test_sysctl_names_cannot_escape_proc_sys(name: str) -> None:
    with pytest.raises(ValueError):
        sysctl_file(name)


def test_sysctls_that_run_programs_as_root_are_refused() -> None:
    assert sysctl_file("vm.swappiness") == Path("/proc/sys/vm/swappiness")
    assert sysctl_refusal("vm.swappiness") is None
    for name in ("kernel.core_pattern", "kernel.modprobe", "fs.protected_symlinks",
                 "vm.drop_caches", "kernel.randomize_va_space"):  # fmt: skip
        assert sysctl_refusal(name), name


def _journal(tmp_path: Path, entries: list[dict[str, str]]) -> Path:
    path = tmp_path / "x.undo"
    path.write_text("".join(json.dumps(e) + "\n" for e in entries))
    return path


def test_replay_writes_only_files_pgsweep_changes(tmp_path: Path, canary: Path) -> None:
    planted = _journal(
        tmp_path,
        [
            {"file": str(canary), "original": "pwned"},
            {"file": "/proc/sys/vm/../../../etc/passwd", "original": "x"},
        ],
    )
    done, owed = journal.restore_journal(planted, None, LOCAL)
    assert untouched(canary)
    assert len(owed) == 2 and all("refused" in line for line in done)
    assert planted.exists()  # kept: what it asks for was not done


def test_replay_deletes_only_namespaces_and_links_pgsweep_makes(tmp_path: Path) -> None:
    """A planted journal must not make root delete the machine's own network: eth0, lo, or
    a namespace someone else made, by name or by a name with a path in it."""
    links = sorted(p.name for p in Path("/sys/class/net").iterdir())
    planted = _journal(tmp_path, [
        {"netns": "eth0"}, {"netns": "lo"}, {"netns": "../../etc"}, {"netns": "other"},
        {"netns": "pgsweep-1-2-3-p/../../x"}, {"netns": "pgsweep-1-2-3-x"},
    ])  # fmt: skip
    done, _ = journal.restore_journal(planted, None, LOCAL)
    assert len(done) == 6 and all("refused" in line for line in done), done
    assert sorted(p.name for p in Path("/sys/class/net").iterdir()) == links


@root_only
def test_a_failed_restore_keeps_only_what_is_owed_and_the_oldest_original(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    swappiness = Path("/proc/sys/vm/swappiness")
    before = swappiness.read_text().strip()
    entries = [
        {"file": str(swappiness), "original": before},
        {"file": str(swappiness), "original": "77"},  # a later, wrong "original"
        {"dir": "/sys/fs/cgroup/memory/pgsweep-1-2-not-there-but-busy"},
    ]
    path = _journal(tmp_path, entries)
    swappiness.write_text("33")
    real_rmdir = Path.rmdir

    def busy(self: Path) -> None:
        if "pgsweep-1-2" in str(self):
            raise OSError(16, "Device or resource busy")
        real_rmdir(self)

    monkeypatch.setattr(Path, "rmdir", busy)
    try:
        done, owed = journal.restore_journal(path, None, LOCAL)
    finally:
        swappiness.write_text(before)
    assert f"restored {swappiness} = {before}" in done  # the oldest original won
    kept = [json.loads(line) for line in path.read_text().splitlines()]
    assert kept == [entries[2]]  # only what is still owed stays in the journal
    assert owed == set()


def test_a_live_run_is_never_treated_as_dead(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.setenv("PGSWEEP_STATE_DIR", str(tmp_path))
    holder = subprocess.Popen(
        ["python3", "-c", "import fcntl,os,sys,time; fd=os.open(sys.argv[1], os.O_RDWR|"
         "os.O_CREAT); fcntl.flock(fd, fcntl.LOCK_EX); print('locked', flush=True); "
         "time.sleep(60)", str(tmp_path / "4242-99.lock")],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        with workarea.dead_run("4242-99") as dead:
            assert dead is False  # its lock is held: alive, whatever its PID says
    finally:
        holder.kill()
        holder.wait()
    with workarea.dead_run("4242-99") as dead:
        assert dead is True  # the holder died: its lock is free
    # PID reuse: a run id naming this very (live) process, but with another start time
    with workarea.dead_run(f"{os.getpid()}-1") as dead:
        assert dead is True


def _sysfs(root: Path, layout: dict[str, list[str]]) -> Path:
    """A sysfs block tree: disk -> partitions (this kernel has no partition tables, so
    the layouts that matter are built as the kernel would show them)."""
    n = 0
    (root / "class").mkdir()
    for disk, parts in layout.items():
        (root / "devices" / disk).mkdir(parents=True)
        (root / "devices" / disk / "dev").write_text(f"8:{n}\n")
        (root / "devices" / disk / "holders").mkdir()
        (root / "class" / disk).symlink_to(root / "devices" / disk)
        for part in parts:
            n += 1
            d = root / "devices" / disk / part
            d.mkdir()
            (d / "partition").write_text(f"{n}\n")
            (d / "dev").write_text(f"8:{n}\n")
            (d / "holders").mkdir()
            (root / "class" / part).symlink_to(d)
        n += 16
    return root / "class"


def test_a_partition_next_to_a_mounted_one_is_refused(tmp_path: Path) -> None:
    from pgsweep.host.blockdev import BlockView

    sysfs = _sysfs(tmp_path, {"sda": ["sda1", "sda2"], "sdb": []})
    root_fs = mounts.Mount("/", "ext4", "rw", "/dev/sda1", "8:1")
    view = BlockView(sysfs, (root_fs,), "Filename Type Size Used Priority\n")
    assert "sda1 is mounted at / (the root filesystem)" in view.neighbours_in_use("sda2")
    assert "it has partitions: sda1, sda2" in view.neighbours_in_use("sda")
    assert view.neighbours_in_use("sdb") == []
    (sysfs / "sdb" / "holders" / "md0").mkdir()
    assert view.neighbours_in_use("sdb") == ["sdb is held by md0 (RAID, LVM or device-mapper)"]
    swap = BlockView(sysfs, (), "Filename Type\n/dev/sda2 partition\n")
    assert swap.neighbours_in_use("sda1") == ["sda2 is in use as swap"]


def test_work_base_from_the_environment_must_be_safe_for_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PGSWEEP_WORK_BASE moves work areas (e.g. to tmpfs); a relative or missing path, or a
    folder others can write to without the sticky bit (they could move the work area away
    and put their own in its place), is refused with exit 2."""
    from pgsweep.errors import PgsweepError
    from pgsweep.host import workarea

    open_ = tmp_path / "open"
    open_.mkdir()
    open_.chmod(0o777)
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    sticky.chmod(0o1777)
    for bad in ("relative/dir", str(tmp_path / "missing"), str(open_)):
        monkeypatch.setenv("PGSWEEP_WORK_BASE", bad)
        with pytest.raises(PgsweepError) as err:
            workarea.fallback_base()
        assert err.value.exit_code == 2 and "PGSWEEP_WORK_BASE" in err.value.what
    monkeypatch.setenv("PGSWEEP_WORK_BASE", str(sticky))
    assert workarea.fallback_base() == sticky.resolve()
    monkeypatch.delenv("PGSWEEP_WORK_BASE")
    assert workarea.fallback_base() == Path("/var/tmp")
