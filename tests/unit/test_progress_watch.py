"""`pgsweep progress` counts a run only as a process of the user asking (another user's
process naming the folder is no run of it), and a fleet refuses inventory groups whose
names could be read as paths or templates; the explain table prints a workload's
statement text as text, never as terminal markup. The real progress of a run is in
tests/integration/test_run.py, a fleet's in tests/integration/test_fleet_hosts.py."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from rich.console import Console

from conftest import SERVER_USER, write_experiment
from pgsweep import spec
from pgsweep.engine import fleet, watch
from pgsweep.errors import PgsweepError
from pgsweep.host.proc import RunAs
from pgsweep.outputs import explain

ROOT = Path(__file__).resolve().parents[2]


def _pretend(results: Path, user: RunAs | None) -> subprocess.Popen[bytes]:
    """A process whose command line names `results` as a run's would."""
    extra = {"user": user.uid, "group": user.gid, "extra_groups": []} if user else {}
    p = subprocess.Popen(["/usr/bin/python3", "-c", "import time; time.sleep(60)", "run",
                          "--results", str(results)], **extra)  # type: ignore[call-overload]
    time.sleep(0.3)  # exec'd: /proc shows the new command line
    return p


@pytest.mark.skipif(os.geteuid() != 0, reason="another user's process needs root")
def test_a_run_is_a_process_of_this_user_naming_the_folder(tmp_path: Path) -> None:
    results = tmp_path / "res"
    assert watch.progress(results)["running"] is False
    theirs = _pretend(results, RunAs(SERVER_USER))
    try:
        assert watch.progress(results)["running"] is False  # not this user's
        mine = _pretend(results, None)
        try:
            assert watch.progress(results)["running"] is True
        finally:
            mine.send_signal(signal.SIGKILL)
            mine.wait()
    finally:
        theirs.send_signal(signal.SIGKILL)
        theirs.wait()
    assert watch.line(watch.progress(results)) == "0/? trials, not running"


@pytest.mark.skipif(not (ROOT / ".venv" / "bin" / "ansible-inventory").exists(),
                    reason="needs the fleet extra (scripts/setup.sh --dev)")
@pytest.mark.parametrize("name", ["web-1", "_ok_", "9lives"])
def test_groups_whose_names_are_no_ansible_names_are_refused(tmp_path: Path, name: str) -> None:
    exp = spec.load(write_experiment(tmp_path, "[experiment]\nname = 'g'\n[repeat]\nrounds = 4\n"))
    inv = tmp_path / "hosts.ini"
    inv.write_text(f"[{name}]\nh1 ansible_host=127.0.0.1\n[beta]\nh2 ansible_host=127.0.0.2\n")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    if name == "_ok_":  # a valid name: both groups come back
        tops = fleet.groups(exp, inv, [], scratch)
        assert {g: t.server for g, t in tops.items()} == {"_ok_": "h1", "beta": "h2"}
        assert {g: t.copies for g, t in tops.items()} == {"_ok_": {}, "beta": {}}
        return
    with pytest.raises(PgsweepError, match=f"group {name!r} cannot be a fleet's group"):
        fleet.groups(exp, inv, [], scratch)


def test_a_statement_text_is_printed_as_text_never_markup() -> None:
    hostile = "`/* [/x] [link=https://evil.example]y[/link] */ SELECT 1`: ms / call"
    row = {"name": hostile, "unit": "ms", "before": "1.0", "after": "2.0",
           "change": "+100% [+50, +150]", "verdict": "higher"}  # fmt: skip
    panel = {"config": "c02", "against": "c01", "rounds": 3, "sentence": "TPS no change",
             "settings": [], "rows": [row], "family": 1, "alpha": 0.05}  # fmt: skip
    out = io.StringIO()
    console = Console(file=out, width=200, force_terminal=True, color_system=None)
    explain.render(panel, {}, console, every=True)
    text = out.getvalue()
    assert "[/x] [link=https://evil.example]y[/link]" in text, text
    assert "\x1b]8;" not in text  # no hyperlink escape
