"""`run FILE --inventory INV`: one experiment over a fleet, dispatched through Ansible.

The inventory is read by Ansible itself (`ansible-inventory --list`, INI or YAML, its
connection variables honoured); each selected group is one host group, a copy of the
topology (engine/fleet_topology.py): its one host without `pgsweep_host` runs the server and
the shard, which reaches the group's copies of the other roles' hosts itself (`--host`).
ansible-runner (the [fleet] extra) runs one playbook against every group at
once: it checks that the host's pgsweep (`pgsweep_bin`, default `pgsweep` on PATH) is
this version, copies the frozen file, starts the group's shard (`run --shard K/N --group
NAME`) as an async job, waits for it and fetches the shard's folder back. The shards are
then merged (store.merge) into the fleet folder. Before that, a first playbook asks every
group's host for its facts (`pgsweep facts`: kernel, CPU, microcode, usable CPUs, memory,
NUMA nodes, PostgreSQL; collect.hostfacts): groups that differ in a fact the file does
not allow ([experiment] hosts_may_differ) are refused (exit 2) before any shard starts,
and the facts are kept in the fleet folder. No retry: a host that fails or cannot be
reached has its rounds named missing, the others' are kept. Each host's kernel
changes are put back by its own run, as on one machine. Every process starts through
the local Host."""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..collect import hostfacts
from ..core import printable
from ..errors import PgsweepError
from ..host.api import scratch_path
from ..host.local import LOCAL
from ..plan import round_spans, shard_rounds
from ..spec import Experiment
from ..store import merge
from . import fleet_folder, fleet_progress, fleet_topology
from .fleet_ansible import (
    BIN,
    SHARD_TIMEOUT,
    ansible_env,
    ansible_tool,
    close_connections,
    failures,
    frozen_file_on_stdin,
    job_events,
    new_project,
    prologue,
    run_playbook,
    same_pgsweep,
)
from .fleet_folder import work_folder
from .fleet_topology import GroupHosts
from .signals import signals_ignored, stopped_by_signals

RESERVED = ("all", "ungrouped")
STOP_WAIT_S = 600  # a shard stopping puts its host back: a server stopped, kernel restored
# how long one task on a host may take (inventory variable pgsweep_host_timeout), the
# default of every play: Ansible gives up on the task then, and the host's group counts as
# lost; a shard's results coming back and a shard stopping get longer
HOST_TIMEOUT = "{{ pgsweep_host_timeout | default(120) | int }}"
FETCH_TIMEOUT_S = 3600
_SHARD = "pgsweep_shards[inventory_hostname]"
SHARD_ARGV = ("{{ [pgsweep_bin | default('pgsweep'), 'run', work.path ~ '/experiment.toml', "
              f"'--shard', {_SHARD}.k | string, '--group', {_SHARD}.group, '--results', "
              f"work.path ~ '/results'] + {_SHARD}.hosts }}}}")


@dataclass
class FleetOutcome:
    folder: Path  # the merged fleet folder
    groups: dict[str, str]  # group -> "ok", or why its rounds are missing
    missing: list[int] = field(default_factory=list)
    merged: merge.Merged | None = None
    kept: list[str] = field(default_factory=list)  # groups done before this --resume


def groups(exp: Experiment, inventory: Path, wanted: list[str], scratch: Path
           ) -> dict[str, GroupHosts]:  # fmt: skip
    """Group -> its copy of the topology (its server's host, the other roles' hosts and how
    its shard reaches them), from the inventory as Ansible reads it."""
    res = LOCAL.run([ansible_tool("ansible-inventory"), "-i", str(inventory), "--list"],
                    out=scratch / "inventory.json", timeout=120, env=ansible_env())  # fmt: skip
    if res.returncode != 0:
        raise PgsweepError(f"Ansible could not read the inventory: {res.tail()}",
                           where=str(inventory), fix="check it with ansible-inventory -i "
                           f"{inventory} --list")  # fmt: skip
    data: dict[str, Any] = json.loads(LOCAL.output(scratch / "inventory.json"))
    found = {g: list(v["hosts"]) for g, v in data.items() if g not in ("_meta", *RESERVED)
             and isinstance(v, dict) and v.get("hosts")}  # fmt: skip
    hostvars: dict[str, dict[str, Any]] = data.get("_meta", {}).get("hostvars", {})
    names = wanted or sorted(found)
    tops: dict[str, GroupHosts] = {}
    for g in names:
        try:
            fleet_folder.check_group(g)
        except ValueError as e:
            raise PgsweepError(f"the inventory's group {g!r} cannot be a fleet's group: {e}",
                               where=str(inventory),
                               fix="rename the group (Ansible's own rule for group names: "
                               "letters, digits and _), or leave it out with --groups "
                               "a,b") from None  # fmt: skip
        if g not in found:
            raise PgsweepError(f"the inventory has no group {g!r} with hosts", where=str(inventory),
                               expected=f"one of {', '.join(sorted(found)) or '(none)'}",
                               fix="name groups of the inventory with --groups a,b")  # fmt: skip
        tops[g] = fleet_topology.copy_of(exp.topology, g, found[g], hostvars, inventory,
                                         [k for k in data if k != "_meta"])  # fmt: skip
    if len(tops) < 2:
        raise PgsweepError("a fleet needs two host groups at least", where=str(inventory),
                           fix="add groups, or run on one machine without --inventory")  # fmt: skip
    return tops


def _facts_playbook(names: list[str], text: str) -> list[dict[str, Any]]:
    """One play over every group's host: check, then `pgsweep facts` (read only) reading
    the frozen file from its stdin: nothing is written on the host, so nothing is left
    there when the play is cut short (a work folder, copy and removal were four of its six
    module runs, about 0.4 CPU-s each between the host and here)."""
    return [{"hosts": names, "gather_facts": False, "timeout": HOST_TIMEOUT, "tasks": [
        *same_pgsweep(),
        {"name": "host facts", "register": "facts", "changed_when": False,
         "command": {"argv": [BIN, "facts", "-"], "stdin": frozen_file_on_stdin(text)}},
    ]}]  # fmt: skip


def _playbook(names: list[str], fetched: Path) -> list[dict[str, Any]]:
    """One play over every group's host: check, copy, run the shard (async), fetch."""
    group = f"{{{{ {_SHARD}.group }}}}"
    bin_ = BIN
    left = "{{ pgsweep_left[inventory_hostname] }}"
    earlier = "inventory_hostname in pgsweep_left"  # a host an earlier dispatch lost
    return [{
        "hosts": names, "gather_facts": False, "timeout": HOST_TIMEOUT, "tasks": [
            {"name": "stop the shard an earlier dispatch left", "when": earlier,
             "changed_when": False, "timeout": STOP_WAIT_S + 60, "command": {"argv": [
                 bin_, "stop", f"{left}/results", "--wait", str(STOP_WAIT_S)]}},
            {"name": "remove its work folder", "when": earlier,
             "file": {"path": left, "state": "absent"}},
            *prologue(),
            # one expression: the group's --host options are a list of their own
            {"name": "shard", "command": {"argv": SHARD_ARGV},
             "async": int(SHARD_TIMEOUT), "poll": 0, "register": "job"},
            # asked until the shard's process is gone (twice at least: it may not show at
            # once); each answer is a job event engine.fleet_progress reads. A question
            # waits on the host (--wait) and answers at once when the shard ends: the
            # next one follows a second later
            {"name": fleet_progress.TASK, "command": {"argv": [
                bin_, "progress", "{{ work.path }}/results", "--json", "--wait",
                fleet_progress.WAIT]},
             # a host silent for the play's timeout is lost: its group fails, the others go on
             "register": "seen", "changed_when": False, "failed_when": False,
             "until": "seen.rc != 0 or (not (seen.stdout | from_json).running "
                      "and seen.attempts > 1)",
             "retries": int(SHARD_TIMEOUT),  # at one a second at most: a week
             "delay": 1},
            {"name": "shard done", "async_status": {"jid": "{{ job.ansible_job_id }}"},
             # at once once the process is gone (the loop above ends there)
             "register": "ran", "until": "ran.finished", "delay": 2,
             "retries": int(SHARD_TIMEOUT) // 2,
             # 3: some trials failed, kept
             "failed_when": "ran.finished and ran.rc not in [0, 3]"},
            {"name": "fetch", "timeout": FETCH_TIMEOUT_S,
             "fetch": {"src": "{{ work.path }}/results/{{ item }}",
                                        "dest": f"{fetched}/{group}/", "flat": True},
             "loop": ["experiment.toml", "plan.json", "results.db"]},
            {"name": "clean up", "file": {"path": "{{ work.path }}", "state": "absent"}},
        ],
    }]  # fmt: skip


def dispatch(exp: Experiment, inventory: Path, wanted: list[str], results: Path,
             resume: bool = False, report: fleet_progress.Report | None = None
             ) -> FleetOutcome:  # fmt: skip
    """Ask every group's host for its facts, refuse groups that differ; run every
    reachable group's shard at once through Ansible, fetch them, merge them. With
    `resume`, only the groups whose shard did not come back last time."""
    with stopped_by_signals():  # SIGTERM and SIGHUP stop the shards too, as Ctrl-C does
        return _dispatch(exp, inventory, wanted, results, resume, report)


def _dispatch(exp: Experiment, inventory: Path, wanted: list[str], results: Path,
              resume: bool, report: fleet_progress.Report | None) -> FleetOutcome:  # fmt: skip
    hold = contextlib.ExitStack()  # the fleet folder's lock, once the folder exists
    if resume:
        results, _ = fleet_folder.reopen(results, exp, wanted)
        hold.enter_context(fleet_folder.locked(results))
        results, ledger = fleet_folder.reopen(results, exp, wanted)  # as the lock found it
        wanted = ledger.groups
    else:
        target = fleet_folder.new_target(results)
        results = target.path
    scratch = LOCAL.private_dir(scratch_path("pgsweep-fleet-"))
    try:
        tops = groups(exp, inventory, wanted, scratch)
        hosts = {g: t.server for g, t in tops.items()}  # where each group's shard runs
        n = len(hosts)
        if exp.rounds < n:
            raise PgsweepError(f"{exp.rounds} rounds cannot give each of {n} groups a round",
                               where=exp.source.where("repeat", "rounds"),
                               fix=f"rounds = {2 * n} (two per group)")  # fmt: skip
        todo = ledger.missing() if resume else list(hosts)
        facts, status = (_host_facts(exp, {g: tops[g] for g in todo}, inventory, scratch)
                         if todo else ({}, {}))  # fmt: skip
        _refuse_differences(exp, (ledger.facts if resume else {}) | facts, inventory)
        if not resume:
            ledger = fleet_folder.start(target, exp, list(hosts))
            hold.enter_context(fleet_folder.locked(results))
        ledger.facts |= facts
        reachable = [g for g in todo if g not in status]
        if reachable:
            try:
                status |= _run_shards(exp, {g: hosts[g] for g in reachable}, tops, ledger,
                                      inventory, results, scratch, report)  # fmt: skip
            except FleetStopped as stopped:
                ledger.status |= status | stopped.status  # --resume dispatches the rest
                fleet_folder.save(results, ledger)
                raise
        ledger.status |= status
        fleet_folder.save(results, ledger)
        outcome = FleetOutcome(results, {g: ledger.status[g] for g in ledger.groups},
                               kept=[g for g in ledger.groups if g not in todo])  # fmt: skip
        if reachable or resume:  # a resume merges again: the last merge may have been cut
            outcome.merged = fleet_folder.remerge(results, ledger)
        ran = {r for k, g in enumerate(ledger.groups, 1) if ledger.status[g] == "ok"
               for r in shard_rounds(exp.rounds, n)[k - 1]}  # fmt: skip
        outcome.missing = [r for r in range(1, exp.rounds + 1) if r not in ran]
        return outcome
    finally:
        hold.close()
        close_connections(scratch)
        LOCAL.remove_tree(scratch)


def _run_shards(exp: Experiment, hosts: dict[str, str], tops: dict[str, GroupHosts],
                ledger: fleet_folder.Ledger, inventory: Path, results: Path, scratch: Path,
                report: fleet_progress.Report | None) -> dict[str, str]:  # fmt: skip
    """Each group's shard (its K/N from the ledger) on its server's host, all at once,
    reaching its group's copies of the other roles' hosts (`tops`: its --host options);
    the shard folders come back into the fleet folder's shards/. Group -> "ok" or why not."""
    fetched = results / fleet_folder.SHARDS
    for g in hosts:  # what a shard that failed last time left
        LOCAL.remove_tree(fleet_folder.shard_folder(results, g))
    shards = {h: {"k": ledger.shard(g), "group": g,
                  "hosts": tops[g].host_options()}
              for g, h in hosts.items()}  # fmt: skip
    left = {h: ledger.left[g] for g, h in hosts.items() if g in ledger.left}
    plays = _playbook(list(hosts.values()), fetched)
    project = new_project(scratch / "run", exp, "fleet.json", plays)
    LOCAL.private_dir(project / "env")
    LOCAL.write_file(project / "env" / "extravars",
                     json.dumps({"pgsweep_shards": shards, "pgsweep_left": left}))
    watch = None
    if report is not None:
        events = project / "artifacts" / "fleet" / "job_events"
        watch = fleet_progress.EventWatcher(events, {h: g for g, h in hosts.items()}, report)
    try:
        rc = run_playbook(project, "fleet.json", inventory, scratch, len(hosts), watch)
    except KeyboardInterrupt:  # Ctrl-C, SIGTERM, SIGHUP: no shard may run on unattended
        with signals_ignored():
            status = _status(project, hosts, fetched, 130)
            _note_left(ledger, project, hosts, status)
            done = {g: why for g, why in status.items() if why == "ok"}
            rest = {g: h for g, h in hosts.items() if g not in done}
            raise FleetStopped(done | _stop_shards(exp, project, rest, ledger, inventory,
                                                   scratch)) from None
    status = _status(project, hosts, fetched, rc)
    _note_left(ledger, project, hosts, status)
    return status


def _work_folders(project: Path, ident: str, task: str = "work folder") -> dict[str, str]:
    """Host -> the work folder the play made there (its job events), when it is one a
    dispatch makes (fleet_folder.work_folder)."""
    out = {}
    for event, data in job_events(project, ident):
        path = str(data.get("res", {}).get("path", ""))
        if event == "runner_on_ok" and data.get("task") == task and work_folder(path):
            out[str(data.get("host"))] = path
    return out


def _note_left(ledger: fleet_folder.Ledger, project: Path, hosts: dict[str, str],
               status: dict[str, str]) -> None:  # fmt: skip
    """Which work folder each group's host may still hold after this dispatch: none once
    its shard came back (the play removed it), this dispatch's where it failed or was cut
    after making one (its shard may run on there), else what an earlier dispatch left,
    unless this one removed that."""
    made = _work_folders(project, "fleet")
    cleared = {str(data.get("host")) for event, data in job_events(project, "fleet")
               if event == "runner_on_ok" and data.get("task") == "remove its work folder"}
    for g, h in hosts.items():
        if status.get(g) == "ok" or (h in cleared and h not in made):
            ledger.left.pop(g, None)
        elif h in made:
            ledger.left[g] = made[h]


class FleetStopped(KeyboardInterrupt):
    """The controller was stopped mid-dispatch: `status` says, per group, whether its
    shard came back, was stopped (its host put back by its own run), or why not."""

    def __init__(self, status: dict[str, str]) -> None:
        super().__init__("fleet stopped")
        self.status = status


def _stop_playbook(names: list[str]) -> list[dict[str, Any]]:
    """Ctrl-C to each host's shard, by PID (`pgsweep stop`: it puts its host back), then
    its work folder removed once the shard has ended (not while it still runs)."""
    work = "{{ pgsweep_work[inventory_hostname] }}"
    return [{"hosts": names, "gather_facts": False, "timeout": HOST_TIMEOUT, "tasks": [
        {"name": "stop the shard", "register": "stopped", "changed_when": False,
         "timeout": STOP_WAIT_S + 60,
         "command": {"argv": [BIN, "stop", f"{work}/results", "--wait", str(STOP_WAIT_S)]}},
        {"name": "clean up", "file": {"path": work, "state": "absent"}},
    ]}]  # fmt: skip


def _stop_shards(exp: Experiment, project: Path, hosts: dict[str, str],
                 ledger: fleet_folder.Ledger | None, inventory: Path, scratch: Path
                 ) -> dict[str, str]:  # fmt: skip
    """Stop the shards a stopped dispatch left on its hosts: each host's work folder is
    found in the dispatch's job events (a host that had made none ran no shard). One
    stopped and removed is no longer the ledger's to remember."""
    work = _work_folders(project, "fleet")
    made = {g: h for g, h in hosts.items() if h in work}
    status = {g: "stopped before its shard started" for g in hosts if g not in made}
    if not made:
        return status
    stop = new_project(scratch / "stop", exp, "stop.json", _stop_playbook(list(made.values())))
    LOCAL.private_dir(stop / "env")
    LOCAL.write_file(stop / "env" / "extravars",
                     json.dumps({"pgsweep_work": {h: work[h] for h in made.values()}}))
    run_playbook(stop, "stop.json", inventory, scratch, len(made), timeout=STOP_WAIT_S + 120)
    why = failures(stop, "stop")
    for g, h in made.items():
        if h not in why and ledger is not None:
            ledger.left.pop(g, None)
    return status | {g: (f"not stopped: {why[h]}" if h in why else "stopped: its shard was "
                         "stopped and its host put back") for g, h in made.items()}  # fmt: skip


def _host_facts(exp: Experiment, tops: dict[str, GroupHosts], inventory: Path, scratch: Path
                ) -> tuple[dict[str, dict[str, str]], dict[str, str]]:  # fmt: skip
    """Group -> the facts of its server's host (FACT) and of its copy of each other role's
    host (NAME:FACT); and group -> why it gave none (a member unreachable, another pgsweep):
    those groups are not dispatched, their rounds are missing."""
    everyone = [h for t in tops.values() for h in t.members()]
    plays = _facts_playbook(everyone, exp.source.text)
    project = new_project(scratch / "facts", exp, "facts.json", plays)
    rc = run_playbook(project, "facts.json", inventory, scratch, len(everyone))
    by_host = {str(data.get("host")): _json(data.get("res", {}).get("stdout", "{}"))
               for event, data in job_events(project, "facts")
               if event == "runner_on_ok" and data.get("task") == "host facts"}  # fmt: skip
    failed = failures(project, "facts")
    facts: dict[str, dict[str, str]] = {}
    status: dict[str, str] = {}
    for g, t in tops.items():
        lost = {h: role for h, role in t.members().items() if h not in by_host}
        if lost:
            why = {h: failed.get(h, f"no facts (ansible-runner exit {rc})") for h in lost}
            status[g] = "; ".join(f"{role} ({h}): {why[h]}" if role else why[h]
                                  for h, role in lost.items())  # fmt: skip
            continue
        facts[g] = hostfacts.only_facts(by_host[t.server])
        for name, (h, _) in t.copies.items():
            facts[g] |= {f"{name}:{k}": v for k, v in hostfacts.only_facts(by_host[h]).items()}
    return facts, status


def _json(text: object) -> object:
    """A host's answer as JSON (None when it is not: its facts are then missing)."""
    try:
        return json.loads(str(text))
    except ValueError:
        return None


def _refuse_differences(exp: Experiment, facts: dict[str, dict[str, str]],
                        inventory: Path) -> None:  # fmt: skip
    diff = hostfacts.differences(facts, exp.hosts_may_differ)
    if diff:
        allowed = ", ".join(f'"{f}"' for f in (*exp.hosts_may_differ, *diff))
        raise PgsweepError(
            "the host groups are not the same machine, so a verdict could hold on one and "
            "not another: " + "; ".join(hostfacts.describe(diff)),
            where=str(inventory),
            fix="give every group the same kind of machine, or let the file allow the facts "
            f"(their groups become a factor the report names): [experiment] "
            f"hosts_may_differ = [{allowed}]",
        )  # fmt: skip


def _status(project: Path, hosts: dict[str, str], fetched: Path, rc: int) -> dict[str, str]:
    """Group -> "ok" (its shard's folder came back), or the first failure Ansible
    reported for its host (ansible-runner's job events)."""
    why = failures(project, "fleet")
    back = {g for g in hosts if LOCAL.lstat(fetched / g / "results.db") is not None}
    return {g: "ok" if g in back and h not in why else why.get(h, f"ansible-runner exit {rc}")
            for g, h in hosts.items()}  # fmt: skip


def describe(outcome: FleetOutcome) -> list[str]:
    lines = [f"{g}: {printable(why)}" + (" (kept: it ran before this --resume)"
                                          if g in outcome.kept else "")
             for g, why in outcome.groups.items()]  # fmt: skip
    if outcome.missing:
        lines.append(f"rounds missing (their group failed): {round_spans(outcome.missing)}")
    return lines
