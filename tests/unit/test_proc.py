"""The one subprocess helper: exit codes come back, a timeout stops the whole group (the
grandchild too). Both go through the pidfd wait."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from pgsweep.errors import PgsweepError
from pgsweep.host import proc


def test_exit_code_and_output_come_back(tmp_path: Path) -> None:
    res = proc.run(["sh", "-c", "echo out; echo err >&2; exit 3"], out=tmp_path / "o")
    assert res.returncode == 3 and not res.ok and not res.timed_out
    assert res.stdout == "out\n" and res.stderr == "err\n"


def test_a_timeout_stops_the_whole_group(tmp_path: Path) -> None:
    pidfile = tmp_path / "grandchild"
    script = f"sleep 60 & echo $! > {pidfile}; wait"
    res = proc.run(["sh", "-c", script], out=tmp_path / "o", timeout=0.5)
    assert res.timed_out and not res.ok
    grandchild = int(pidfile.read_text())
    for _ in range(50):  # SIGTERM to the group: the backgrounded sleep goes too
        if proc.gone(grandchild):
            break
        time.sleep(0.1)
    assert proc.gone(grandchild)


def _as_user_test(tmp_path: Path) -> tuple[proc.RunAs, Path]:
    if os.geteuid() != 0:
        pytest.skip("runs a command as another user: root only")
    tmp_path.chmod(0o755)  # the output files are root's; the command only reads /proc
    return proc.RunAs("nobody"), tmp_path


def test_a_command_as_the_server_user_has_its_ids_no_groups_and_a_session_of_its_own(
    tmp_path: Path,
) -> None:
    """Through setpriv (a vfork of pgsweep, not a fork), as Python's user= would: real and
    effective ids, no supplementary group (root's 0 would stay otherwise), its own session
    and process group, and the argv given (the setpriv before it is gone by exec)."""
    user, folder = _as_user_test(tmp_path)
    script = ("grep -E '^(Uid|Gid|Groups):' /proc/self/status; "
              "ps -o sid=,pgid= -p $$; cat /proc/$$/cmdline | tr '\\0' ' '")  # fmt: skip
    was = os.getgroups()
    os.setgroups([0, 4])  # root with groups of its own: none may reach the command
    try:
        popen = proc.start(["sh", "-c", script], out=folder / "o", user=user)
    finally:
        os.setgroups(was)
    popen.wait()
    lines = (folder / "o").read_text().splitlines()
    uid, gid = user.uid, user.gid
    assert lines[0].split()[1:] == [str(uid)] * 4, lines
    assert lines[1].split()[1:] == [str(gid)] * 4, lines
    assert lines[2].split() == ["Groups:"], lines  # none, not root's
    assert lines[3].split() == [str(popen.pid)] * 2, lines  # session and group leader
    assert lines[4].startswith("sh -c grep"), lines  # setpriv exec'd the command itself
    assert proc._setpriv() is not None  # the fast path is the one tested (Debian has it)


def test_a_missing_program_as_the_server_user_is_the_same_error_as_root_s(
    tmp_path: Path,
) -> None:
    user, folder = _as_user_test(tmp_path)
    for who in (None, user):
        with pytest.raises(PgsweepError, match="cannot run no-such-program-here"):
            proc.run(["no-such-program-here"], out=folder / "o", user=who)
    with pytest.raises(PgsweepError, match="cannot run /nonexistent/prog"):
        proc.run(["/nonexistent/prog"], out=folder / "o", user=user)
