"""Safe as root, tried as an attacker would: a process running as the server user plants
links at every name root might write, read or mount in while a real run goes on; root
writes nothing through them and reads nothing out of them. The results folder is never
one pgsweep did not make; no server listens on TCP even when its own user asks for it; a
killed server is one failed trial; a second signal cannot cut cleanup short.

The tests look at their own run's servers, pgbench and segments (by its results folder's
tag), and the attacker attacks that run only; the TCP watch and the loop devices are the
machine's (scripts/test.sh runs this module in the machine lane, alone)."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import threading
import time
from contextlib import suppress
from pathlib import Path

import pytest

from conftest import (
    ROOT,
    SERVER_USER,
    leftovers,
    pgsweep,
    pgsweep_start,
    postmasters,
    requires_pg,
    trials,
    write_experiment,
)
from pgsweep.host.workarea import run_tag

WORK_ON_DISK = True  # see conftest: planted links on a disk, in a sticky base like /var/tmp

pytestmark = [
    requires_pg,
    pytest.mark.postgres,
    pytest.mark.skipif(os.geteuid() != 0, reason="attacks need root and the postgres user"),
]
ATTACKER = Path(__file__).parent / "attacker.py"
SECRET = "root secret 7f3a"
SYSTEM_PYTHON = "/usr/bin/python3"  # the venv's python lives under /root, closed to postgres


@pytest.fixture
def canary(tmp_path: Path) -> Path:
    path = tmp_path / "canary"
    path.write_text(SECRET + "\n")
    path.chmod(0o600)
    return path


def _untouched(canary: Path) -> bool:
    st = canary.stat()
    return canary.read_text() == SECRET + "\n" and (st.st_uid, st.st_mode & 0o777) == (0, 0o600)


def _experiment(folder: Path, extra: str = "", factors: str = "", rounds: int = 2) -> Path:
    return write_experiment(folder, f"""
        [experiment]
        name = "safety"
        seed = 3
        [cluster]
        scale = 1
        [workload]
        script = "tpcb-like"
        clients = 2
        jobs = 2
        duration = "2s"
        rate = 200  # conftest.MECHANICS
        warmup = "0s"
        {extra}
        [factors]
        server.shared_buffers = ["16MB", "24MB"]
        {factors}
        [repeat]
        rounds = {rounds}
        """)  # fmt: skip


def _attacker_log(folder: Path) -> Path:
    """Where the attacker (the server user) writes its log: a folder of its own."""
    own = folder / "attacker"
    own.mkdir()
    os.chown(own, *_server_ids())
    return own / "attempts.log"


def _tcp_listeners() -> set[str]:
    res = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=True)
    return {line for line in res.stdout.splitlines() if "postgres" in line}


class Watch:
    """Samples TCP listeners while a run goes on."""

    def __init__(self) -> None:
        self.seen: set[str] = set()
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.seen |= _tcp_listeners()
            self.samples += 1
            time.sleep(0.1)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def test_planted_links_are_never_followed_and_no_server_listens_on_tcp(
    open_dir: Path, canary: Path, state_dir: Path
) -> None:
    before = set(os.listdir("/tmp"))
    path = _experiment(open_dir, extra="[replication]\nstandbys = 1")  # standbys too
    results = open_dir / "res"
    log = _attacker_log(open_dir)
    attacker = subprocess.Popen(
        ["runuser", "-u", SERVER_USER, "--", SYSTEM_PYTHON, str(ATTACKER), str(results),
         str(canary), str(log), "--tag", run_tag(results)],
        cwd=ROOT,
    )  # fmt: skip
    watch = Watch()
    try:
        res = pgsweep("run", str(path), "--results", str(results))
    finally:
        watch.stop()
        attacker.send_signal(signal.SIGTERM)
        attacker.wait(timeout=30)
    attempts = log.read_text().splitlines()
    print(res.stdout, res.stderr)
    # the attack ran: it planted links in the server user's leaves and tried root's dirs
    assert any(a.startswith("planted ") and "/data/" in a for a in attempts), attempts[:20]
    assert any(a.startswith("planted ") and "/txlog/" in a for a in attempts), attempts[:20]
    standby = [a for a in attempts if "/standbys/" in a]
    assert any(a.startswith("planted ") and "/data/" in a for a in standby), standby[:20]
    assert any(a.startswith("denied ") and "/conf/" in a for a in standby), standby[:20]
    assert any(a.startswith("denied ") and "/conf/" in a for a in attempts), attempts[:20]
    assert not any(a.startswith("planted ") and ("/conf/" in a or "/private/" in a)
                   for a in attempts)  # fmt: skip
    assert _untouched(canary)
    assert SECRET.encode() not in (results / "results.db").read_bytes()
    assert watch.samples > 10 and watch.seen == set(), watch.seen
    assert res.returncode in (0, 3), res.stderr  # trials may fail; the machine may not
    assert len(trials(results)) == 4
    assert leftovers(before, results) == []


def test_checker_scratch_is_closed_to_the_server_user_during_plan(
    open_dir: Path, canary: Path
) -> None:
    path = _experiment(open_dir, factors='os.memory_limit = ["512MiB", "1GiB"]')
    log = _attacker_log(open_dir)
    attacker = subprocess.Popen(
        ["runuser", "-u", SERVER_USER, "--", SYSTEM_PYTHON, str(ATTACKER), "/tmp",
         str(canary), str(log), "--prefix", "pgsweep-check-"],
        cwd=ROOT,
    )  # fmt: skip
    try:
        time.sleep(0.5)
        for _ in range(3):
            assert pgsweep("plan", str(path)).returncode == 0
    finally:
        attacker.send_signal(signal.SIGTERM)
        attacker.wait(timeout=30)
    attempts = log.read_text().splitlines()
    assert any(a.startswith("denied ") and "pgsweep-check-" in a for a in attempts), attempts
    assert not any(a.startswith("planted ") for a in attempts), attempts
    assert _untouched(canary)


def test_a_results_folder_pgsweep_did_not_make_is_never_adopted(
    open_dir: Path, state_dir: Path
) -> None:
    results = open_dir / "res"
    (results / "work").mkdir(parents=True)
    (results / "work" / "notes.txt").write_text("mine")
    path = _experiment(open_dir, rounds=1)
    res = pgsweep("run", str(path), "--results", str(results))
    assert res.returncode == 2 and "is not empty" in res.stderr
    assert (results / "work" / "notes.txt").read_text() == "mine"
    # a bad file refused after the folder was chosen leaves it alone too
    bad = write_experiment(open_dir, path.read_text().replace('"16MB"', '"16XB"'), "bad.toml")
    assert pgsweep("run", str(bad), "--results", str(results)).returncode == 2
    assert (results / "work" / "notes.txt").read_text() == "mine"
    # a folder the server user owns (or a link to one) is not safe for root to write in
    theirs = open_dir / "theirs"
    theirs.mkdir()
    os.chown(theirs, *_server_ids())
    for target in (theirs, open_dir / "link"):
        if target.name == "link":
            target.symlink_to(theirs)
        res = pgsweep("run", str(path), "--results", str(target / "res"))
        assert res.returncode == 2 and "not safe for root to write in" in res.stderr
    assert list(theirs.iterdir()) == []


def _server_ids() -> tuple[int, int]:
    import pwd

    pw = pwd.getpwnam(SERVER_USER)
    return pw.pw_uid, pw.pw_gid


def test_a_killed_server_is_one_failed_trial_and_the_run_goes_on(
    tmp_path: Path, state_dir: Path
) -> None:
    path = _experiment(tmp_path, factors="", rounds=2).resolve()
    path.write_text(path.read_text().replace('duration = "2s"', 'duration = "4s"'))
    results = tmp_path / "res"
    tag = f"-{run_tag(results)}-"  # this run's, not a server of a test beside this one
    run = pgsweep_start("run", str(path), "--results", str(results), env=dict(os.environ))
    killed, segments = None, set()
    deadline = time.monotonic() + 120
    while killed is None and time.monotonic() < deadline:
        time.sleep(0.2)
        if _pgbench_running(tag) and _done(results) >= 1:
            pms = [p for p, d in postmasters().items() if str(results) in d or tag in d]
            if pms:
                segments = _shared_memory_of(pms[0])
                os.kill(pms[0], signal.SIGKILL)
                killed = pms[0]
    _, err = run.communicate(timeout=300)
    assert killed is not None, "the test never caught a trial in its measured window"
    rows = trials(results)
    failed = [r for r in rows if r["status"] == "failed"]
    assert run.returncode == 3, err
    assert len(rows) == 4 and len(failed) == 1, [(r["id"], r["reason"]) for r in rows]
    assert rows[-1]["status"] == "ok"  # the next trials ran on a restarted server
    # the killed postmaster's System V and /dev/shm segments went with its cluster
    assert any(s.startswith("sysv ") for s in segments), segments
    assert not segments & _shared_memory(), segments & _shared_memory()


def _shared_memory_of(pid: int) -> set[str]:
    """The System V segments a postmaster made, and the /dev/shm segments it maps."""
    lines = Path("/proc/sysvipc/shm").read_text().splitlines()
    shmid, cpid = (lines[0].split().index(k) for k in ("shmid", "cpid"))
    found = {f"sysv {r[shmid]}" for r in map(str.split, lines[1:]) if int(r[cpid]) == pid}
    with suppress(OSError):
        for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
            if "/dev/shm/PostgreSQL." in line:
                found.add(line.rsplit("/", 1)[1].split()[0])
    return found


def _shared_memory() -> set[str]:
    """The server user's System V segments and /dev/shm/PostgreSQL.* segments."""
    uid, _ = _server_ids()
    lines = Path("/proc/sysvipc/shm").read_text().splitlines()
    shmid, owner = (lines[0].split().index(k) for k in ("shmid", "uid"))
    found = {f"sysv {r[shmid]}" for r in map(str.split, lines[1:]) if int(r[owner]) == uid}
    for seg in Path("/dev/shm").glob("PostgreSQL.*"):
        with suppress(OSError):  # one a live server removed meanwhile
            if seg.stat().st_uid == uid:
                found.add(seg.name)
    return found


def _done(results: Path) -> int:
    try:
        db = sqlite3.connect(f"file:{results / 'results.db'}?mode=ro", uri=True)
        (n,) = db.execute("SELECT count(*) FROM trial").fetchone()
        db.close()
        return int(n)
    except sqlite3.Error:
        return 0


def _pgbench_running(tag: str) -> bool:
    """A measuring pgbench (its -T 4) of this run: its socket folder carries the tag."""
    for d in Path("/proc").iterdir():
        try:
            if d.name.isdigit() and (d / "comm").read_text().strip() == "pgbench":
                argv = (d / "cmdline").read_bytes()
                if b"-T\x004\x00" in argv and tag.encode() in argv:
                    return True
        except OSError:
            continue
    return False


def _loops() -> set[str]:
    return {p.parent.name for p in Path("/sys/class/block").glob("loop*/loop/backing_file")}


def test_a_second_sigterm_during_cleanup_still_leaves_nothing(
    tmp_path: Path, state_dir: Path
) -> None:
    """A results path with a space, storage on a loop device: after SIGTERM, and more
    SIGTERMs and SIGINTs while cleanup unmounts and detaches, nothing is left."""
    before, loops = set(os.listdir("/tmp")), _loops()
    folder = tmp_path / "with space"
    folder.mkdir()
    path = _experiment(folder, extra='[storage]\ndevice = "loop:512MiB"\nfilesystem = "ext4"')
    results = folder / "res ults"
    run = pgsweep_start("run", str(path), "--results", str(results), env=dict(os.environ))
    deadline = time.monotonic() + 120
    while _done(results) < 1 and time.monotonic() < deadline:
        time.sleep(0.2)
    run.send_signal(signal.SIGTERM)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGTERM, signal.SIGHUP) * 5:
        time.sleep(0.05)
        if run.poll() is not None:
            break
        run.send_signal(sig)
    _, err = run.communicate(timeout=300)
    assert run.returncode == 130, err
    assert _loops() == loops
    assert str(folder) not in Path("/proc/self/mounts").read_text().replace("\\040", " ")
    assert leftovers(before, results) == []
    assert not list(state_dir.glob("*.undo"))


def test_plan_refuses_a_mounted_device_and_one_with_a_filesystem(tmp_path: Path) -> None:
    image, mnt = tmp_path / "disk.img", tmp_path / "mnt"
    with open(image, "wb") as f:
        f.truncate(64 * 1024**2)
    mnt.mkdir()
    loop = subprocess.run(["losetup", "--find", "--show", str(image)], capture_output=True,
                          text=True, check=True).stdout.strip()  # fmt: skip
    try:
        subprocess.run(["mkfs.ext4", "-q", "-F", loop], check=True)
        for why in ("carries a signature: ext4", f"is mounted at {mnt}"):
            if "mounted" in why:
                subprocess.run(["mount", loop, str(mnt)], check=True)
            path = _experiment(tmp_path, extra=f'[storage]\ndevice = "{loop}"', rounds=1)
            res = pgsweep("plan", str(path), "--allow-device", loop)
            assert res.returncode == 2 and why in res.stderr, res.stderr
            assert "refusing to format" in res.stderr
    finally:
        subprocess.run(["umount", str(mnt)], check=False, capture_output=True)
        subprocess.run(["losetup", "-d", loop], check=False)
