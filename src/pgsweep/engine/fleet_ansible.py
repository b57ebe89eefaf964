"""The Ansible plumbing of a fleet (engine/fleet.py): Ansible's commands found beside this
pgsweep, the environment they need, an ansible-runner project folder holding one playbook
and the frozen file, one ansible-runner run, and its job events read back. Every process
starts through the local Host."""

from __future__ import annotations

import base64
import json
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .. import __version__
from ..errors import PgsweepError
from ..host.local import LOCAL
from ..spec import Experiment
from . import fleet_progress

SHARD_TIMEOUT = 7 * 24 * 3600.0  # a shard runs for hours or days; Ctrl-C ends it sooner


def ansible_tool(name: str) -> str:
    """Ansible's commands beside this pgsweep (its venv, where the extra installs them),
    else on PATH."""
    here = Path(sys.executable).parent / name
    path = str(here) if here.is_file() else shutil.which(name)
    if path is None:
        raise PgsweepError(f"{name} is not installed: the fleet extra is needed",
                           fix="pip install 'pgsweep[fleet]' (scripts/setup.sh --dev)")  # fmt: skip
    return path


# Ansible's own ssh_args, and keepalives: a host whose network dies mid-run is given up
# by ssh after 15 s of silence. Without them, after a task timed out, Ansible's cleanup of
# the task's remote folder waits on the dead connection until TCP gives up (15 minutes or
# more), and the whole fleet with it.
SSH_ARGS = ("-C -o ControlMaster=auto -o ControlPersist=60s -o ServerAliveInterval=5 "
            "-o ServerAliveCountMax=3")  # fmt: skip


def ansible_env() -> dict[str, str]:
    """What Ansible needs beyond the small environment processes get (host.proc): a UTF-8
    locale (it refuses any other), this venv's commands first, the user's SSH agent and
    ANSIBLE_* settings (ANSIBLE_SSH_ARGS defaults to SSH_ARGS, and ANSIBLE_PIPELINING to on:
    a module runs in one SSH exchange instead of a temporary file's four; set it off for a
    `become` whose sudoers requires a tty). Host keys are always
    checked: ansible-runner turns Ansible's host key checking off unless told, so an
    unknown or changed key would be accepted, and pgsweep tells it, whatever the user's
    environment says."""
    env = {"LC_ALL": "C.UTF-8", "LANG": "C.UTF-8",
           "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}",
           "ANSIBLE_SSH_ARGS": SSH_ARGS, "ANSIBLE_PIPELINING": "True"}  # fmt: skip
    env |= {k: v for k, v in os.environ.items()
            if k.startswith("ANSIBLE_") or k == "SSH_AUTH_SOCK"}  # fmt: skip
    env["ANSIBLE_HOST_KEY_CHECKING"] = "True"
    return env


BIN = "{{ pgsweep_bin | default('pgsweep') }}"


def same_pgsweep() -> list[dict[str, Any]]:
    """The host's pgsweep is this version."""
    return [
        {"name": "pgsweep version", "command": {"argv": [BIN, "--version"]},
         "register": "version", "changed_when": False},
        {"name": "the same pgsweep", "assert": {
            "that": [f"version.stdout == 'pgsweep {__version__}'"],
            "fail_msg": f"this host runs {{{{ version.stdout }}}}, not pgsweep {__version__}"}},
    ]  # fmt: skip


def frozen_file_on_stdin(text: str) -> str:
    """The frozen file as a command task's `stdin`: base64 inside the expression, so no
    character of the file is ever read by Ansible's templating as one of its own."""
    return "{{ '" + base64.b64encode(text.encode()).decode() + "' | b64decode }}"


def prologue() -> list[dict[str, Any]]:
    """The same pgsweep as here, and a work folder holding the frozen file."""
    return [
        *same_pgsweep(),
        {"name": "work folder", "tempfile": {"state": "directory", "prefix": "pgsweep-fleet-"},
         "register": "work"},
        {"name": "the frozen file", "copy": {"src": "experiment.toml",
                                             "dest": "{{ work.path }}/experiment.toml",
                                             "mode": "0600"}},
    ]  # fmt: skip


def new_project(folder: Path, exp: Experiment, name: str, playbook: list[dict[str, Any]]) -> Path:
    """An ansible-runner project folder: the frozen file and one playbook."""
    project = LOCAL.private_dir(folder)
    LOCAL.private_dir(project / "project")
    LOCAL.write_file(project / "project" / "experiment.toml", exp.source.text)
    LOCAL.write_file(project / "project" / name, json.dumps(playbook))
    return project


def run_playbook(project: Path, playbook: str, inventory: Path, scratch: Path, hosts: int,
                 watch: fleet_progress.EventWatcher | None = None,
                 timeout: float = SHARD_TIMEOUT) -> int:  # fmt: skip
    """ansible-runner with a fork per host (Ansible's 5 would hold the sixth group's
    shard, and its progress, until another's ended)."""
    ident = playbook.removesuffix(".json")
    if watch is not None:
        watch.start()
    try:
        res = LOCAL.run([ansible_tool("ansible-runner"), "run", str(project), "-p", playbook,
                         "--inventory", str(inventory.absolute()), "--ident", ident,
                         "--forks", str(max(5, hosts))],
                        out=scratch / f"{ident}.out", timeout=timeout,
                        env=ansible_env() | {"ANSIBLE_SSH_CONTROL_PATH_DIR":
                                             str(control_dir(scratch))})  # fmt: skip
    finally:
        if watch is not None:
            watch.stop()
        stop_leftovers(project)
    return res.returncode


def stop_leftovers(project: Path) -> list[str]:
    """ansible-runner starts ansible-playbook in a session of its own: when ansible-runner
    is killed (Ctrl-C, it took more than the grace to stop, a timeout), the playbook and
    its workers live on, and its strategy loop spins without its workers (seen after a
    Ctrl-C beside a busy loop: an hour later, still there). They are ours: processes of
    this user working in the project's folder, root's private scratch. Stopped by PID."""
    from ..host import areaprocs

    return areaprocs.kill(areaprocs.users_of(project, os.getuid()), "left by ansible-runner")


def control_dir(scratch: Path) -> Path:
    """Where this fleet's SSH connections to its hosts are kept open between plays
    (ControlPersist): its own folder, so `close_connections` ends them all at the end."""
    return scratch / "cp"


def close_connections(scratch: Path) -> None:
    """End the fleet's kept-open SSH connections (`ssh -O exit`): what a play cut short
    (Ctrl-C) left running on a host through one of them, Ansible's module interpreter
    waiting on its input, ends with it, instead of a minute later."""
    folder = control_dir(scratch)
    for sock in sorted(folder.iterdir()) if folder.is_dir() else []:
        if sock.is_socket():
            LOCAL.run(["ssh", "-o", f"ControlPath={sock}", "-O", "exit", "pgsweep-fleet-host"],
                      out=scratch / "ssh-exit.out", timeout=15)  # fmt: skip


def job_events(project: Path, ident: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """ansible-runner's job events of one run, in order: (event, event_data)."""
    events = project / "artifacts" / ident / "job_events"
    for path in sorted(events.glob("*.json")) if events.is_dir() else []:
        ev = json.loads(LOCAL.output(path))
        yield ev.get("event", ""), ev.get("event_data", {})


def failure(data: dict[str, Any], event: str) -> str:
    result = data.get("res", {})
    msg = result.get("msg") or result.get("stderr") or event
    return f"{data.get('task', '?')}: {str(msg).strip()[-300:]}"


def failures(project: Path, ident: str) -> dict[str, str]:
    """Host -> the first failure Ansible reported for it in one run (job events)."""
    out: dict[str, str] = {}
    for event, data in job_events(project, ident):
        host = str(data.get("host"))
        if event in ("runner_on_failed", "runner_on_unreachable") and host not in out:
            out[host] = failure(data, event)
    return out
