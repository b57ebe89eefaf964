"""`pgsweep plan --commands`: what `run` would do to the machine, printed before it runs.

The plan is walked trial by trial through the same engine and layers as a run
(resources acquired, every layer prepared, the run's end put back), on a `DryHost`
(dryhost.py): reads come from this machine, effects are only recorded, so nothing is
changed. Printed are the effects of the first trial of each kind (a new cluster, a
snapshot restored, a restart, a start, a reload, nothing to change), what comes before the
first trial and after the last (a build's compile included), what a client host does,
the standbys (made once the primary runs: the dry host answers pg_stat_replication with the
standbys its base backups made), and, named honestly, what the dry run cannot show: the
work area and the run's lock (made before the host is)."""

from __future__ import annotations

import dataclasses
import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..host import workarea
from ..host.blockdev import MKFS, mount_options
from ..host.builds import compile_steps
from ..host.local import LOCAL
from ..host.recording import Effect
from ..layers.base import ResourceLayer
from ..layers.build import PreparedBuild
from ..layers.context import HostSide, RunContext, Server, TrialContext, TrialFailure
from ..plan import Plan
from ..postgres.access import ServerError
from ..spec import Experiment
from . import buildprep, drysides
from .dryhost import DRY, DryHost
from .measure import AUTO_LOGGED_PER_S, sampling_rate
from .resources import Resources, in_order
from .trial import prepare_layers

KINDS = ("new cluster", "restore", "restart", "start", "reload", "no change")
MAX_TRIALS = 2000  # walked at most (milliseconds each): enough to meet every kind


def kind(events: list[str]) -> str:
    """What a trial does to its server, from its events (the first that applies)."""
    for event, name in (("new-cluster", "new cluster"), ("restore", "restore"),
                        ("restart", "restart"), ("start", "start"), ("reload", "reload")):
        if event in events:
            return name
    return "no change"


def commands(exp: Experiment, plan: Plan, results: Path, client: str | None,
             reached: Mapping[str, str]) -> list[str]:  # fmt: skip
    """The lines `plan --commands` prints (nothing on the machine changes). `reached`: each
    other host's SSH_CONNECTION, as `plan` found it (the addresses a run would use)."""
    users = {None: LOCAL.ids(None)} | ({exp.user.name: LOCAL.ids(exp.user)} if exp.user else {})
    topo = exp.topology
    if topo.remote_server:
        host = DryHost(users, exp.canonical, topo.server)
        workdir, sockets, others = drysides.server_elsewhere(exp, results, reached, host)
        here = buildprep.stand_ins(exp, DRY, LOCAL)  # compiled (or found) here, then copied
        copies = buildprep.copied(here, host, exp.user, lambda _: None)
        run = _run_context(exp, results, host, copies, others.get(topo.client),
                           tuple(others.get(n) for n in topo.standbys), (workdir, sockets))
        beside = ", and pgbench beside it" if topo.client == topo.server else ""
        head = [*drysides.server_lines(exp, run), *drysides.lines(exp, run), "",
                f"host {topo.server} (the server{beside}, "
                "through `pgsweep agent` over ssh; its reads are shown from this machine's, "
                "its own may differ):"]  # fmt: skip
    else:
        host = DryHost(users, exp.canonical)
        others = drysides.sides(exp, results, client, reached, host)
        here = buildprep.stand_ins(exp, DRY, host)
        run = _run_context(exp, results, host, here, others.get(client or ""),
                           tuple(others.get(n) for n in topo.standbys))  # fmt: skip
        head = [*drysides.lines(exp, run), "", "host local (this machine): the server" + (
            "" if client else ", and pgbench beside it")]  # fmt: skip
    layers = [la for la in exp.layers if isinstance(la, ResourceLayer)]
    resources = Resources(layers, run, not plan.keep_alive)
    out = [f"what `pgsweep run` would do, host by host; nothing here was done (reads come "
           f"from this machine, every effect is only recorded). `{DRY}` stands for the "
           "random part of a name the run makes.", *head]
    mark, there = len(host.effects), drysides.marks(run)
    for layer in exp.layers:
        layer.start_run(run)
    out += _section("before the first trial", host.effects[mark:], _compiles(here, run),
                    drysides.since(run, there))  # fmt: skip
    lines, refused = _walk(exp, plan, resources, run)
    out += lines
    mark, there = len(host.effects), drysides.marks(run)
    _finish(exp, resources, run)
    out += _section("after the last trial (and on Ctrl-C or an error): taken down, put back",
                    host.effects[mark:], (), drysides.since(run, there))  # fmt: skip
    out += ["", "not shown:"]
    out += [f"  - {line}" for line in _not_shown(exp, run, client, here)]
    out += [f"  - trial {first} and those like it: {why}" for why, first in refused.items()]
    return out


def _walk(exp: Experiment, plan: Plan, resources: Resources,
          run: RunContext) -> tuple[list[str], dict[str, str]]:  # fmt: skip
    """The trials in the run's order (this shard's), each prepared as `run` prepares it;
    the lines of the first of each kind, and why trials could not be shown (-> the first)."""
    host = run.host
    assert isinstance(host, DryHost)
    todo = plan.shard_trials(exp.shard.k) if exp.shard is not None else list(plan.trials)
    out: list[str] = []
    shown: set[str] = set()
    refused: dict[str, str] = {}
    walked = 0
    # stopped at the end of a trial, never after in_order took resources down for the next
    # (what it takes down then belongs to the run's end, shown last)
    for trial in in_order(plan, todo, resources):
        walked += 1
        config = plan.config(trial.config)
        mark, there = len(host.effects), drysides.marks(run)
        events, failed, window = _trial(exp, resources, run, trial.id, config.levels)
        what = kind(events)
        if failed is not None:
            refused.setdefault(failed, trial.id)
        elif what not in shown:
            shown.add(what)
            title = (f"trial {trial.id} ({config.label()}), the first with {what} "
                     f"[{', '.join(events) or 'no events'}]")  # fmt: skip
            effects = host.effects[mark:]
            if getattr(exp.settings(config.levels).get("storage"), "used", False):
                effects = _on_new_storage(effects)
            out += _section(title, effects, window, drysides.since(run, there))
        if shown >= set(KINDS) or walked == MAX_TRIALS:
            break
    if walked < len(todo):
        out += ["", f"  (the first {walked} of {len(todo)} trials walked: the others repeat "
                "these kinds)"]  # fmt: skip
    return out, refused


def _on_new_storage(effects: list[Effect]) -> list[Effect]:
    """A new storage's device is not made in a dry run, so the mount it would make is not in
    this machine's mount table: the I/O scheduler and read-ahead the os layer sets on its
    device are named, not shown (they would land on the work area's own device)."""
    queue = [e for e in effects if "/queue/" in e.what or "/queue/" in str(e.detail)]
    if not queue:
        return effects
    kept = [e for e in effects if e not in queue]
    return [*kept, Effect("not_shown", "os.io_scheduler and os.read_ahead_kb on the "
                          "storage's device, once it is made")]  # fmt: skip


def _run_context(exp: Experiment, results: Path, host: DryHost, builds: dict[Any, Any],
                 client_side: HostSide | None, standby_sides: tuple[HostSide | None, ...],
                 elsewhere: tuple[Path, Path] | None = None) -> RunContext:  # fmt: skip
    """The run's context as `run` would make it, with the names a run draws at random
    shown as DRYRUN; nothing is made (the work area and the run's lock are not).
    `elsewhere`: the work area and socket folder on a server's other host."""
    base = workarea.work_base(results, exp.user)
    tag = workarea.run_tag(results)
    prefix = ".pgsweep-work-" if base == results else f"pgsweep-work-{results.name}-{tag}-"
    workdir, sockets = elsewhere or (base.resolve() / f"{prefix}{DRY}",
                                     Path(f"/tmp/pgsweep-{tag}-{DRY}"))  # fmt: skip
    return RunContext(exp.binaries, exp.user, workdir, workdir / "private",
                      sockets, exp.canonical, builds,
                      host=host, run_id=f"PID-{DRY}", registry=workarea.registry_dir(),
                      grant=exp.grant, client_side=client_side,
                      standby_sides=standby_sides)  # fmt: skip


def _trial(exp: Experiment, resources: Resources, run: RunContext, trial_id: str,
           levels: dict[str, Any]) -> tuple[list[str], str | None, list[str]]:  # fmt: skip
    """One trial prepared as `run` prepares it: its events, why it cannot be shown (or
    None), and the commands of its measured window."""
    settings = exp.settings(levels)
    events: list[str] = []
    try:
        got = resources.acquire(settings, events)
        server = next(r for r in reversed(got.values()) if isinstance(r, Server))
        ctx = TrialContext(trial_id, settings, got, run, server, events=events)
        prepare_layers(exp.layers, settings, ctx)
        if _standbys_walked(exp, run):  # the standbys: made once the primary runs
            for layer in exp.layers:
                layer.attach(settings[layer.name], ctx)
    except TrialFailure as exc:
        return events, exc.reason, []
    except ServerError as exc:  # what a real server would not do: not predicted here
        return events, str(exc), []
    window = _window(ctx, run.workdir / "trials" / trial_id)
    if settings["workload"].writes:
        server.dirty = True  # as the measured window leaves it (engine/measure.py)
    return events, None, window


def _standbys_walked(exp: Experiment, run: RunContext) -> bool:
    """Every standby's host has its side here (a host `plan` did not find an address of
    would otherwise be walked as if its standbys ran beside the primary)."""
    topo = exp.topology
    return all(not topo.standby_elsewhere(i) or run.standby_side(i) is not None
               for i in range(1, len(topo.standbys) + 1))  # fmt: skip


def _window(trial: TrialContext, folder: Path) -> list[str]:
    """The pgbench runs of the measured window (engine/measure.py), as the server user."""
    w, settings = trial.demand.workload, trial.settings["workload"]
    argv: Callable[..., list[str]] | None = getattr(w, "argv", None)
    if w is None or argv is None:
        return ["(the measured window's commands: not shown for this workload yet)"]
    pgb, conn, where = trial.client.path("pgbench"), trial.cluster.pgbench_conn_args(), ""
    side = trial.run.client_side
    if side is not None:  # on the client host, over TCP, its trial folder there
        conn, folder = side.conn_args(), side.workdir / "trials" / trial.id
        where = (f"on host {side.host.name}, with PGPASSFILE={side.passfile} "
                 "PGSSLMODE=disable, ")  # fmt: skip
        if not getattr(w, "builtin", True):  # its copy in the trial's folder there
            w = dataclasses.replace(w, script=str(folder / Path(w.script).name))
            argv = w.argv
    lines = []
    if settings.warmup_s > 0:
        lines.append(argv(pgb, conn, seconds=settings.warmup_s, vacuum=True))
    rate = sampling_rate(settings.latency_log, getattr(w, "rate", None), None)
    log = str(folder / "txlog" / "tx") if rate is not None else None
    lines.append(argv(pgb, conn, seconds=w.seconds, vacuum=settings.warmup_s == 0,
                      log_prefix=log, sampling_rate=rate or 1.0))  # fmt: skip
    user = trial.run.user.name if trial.run.user else "root"
    auto = settings.latency_log == "auto" and getattr(w, "rate", None) is None
    return [f"{where}run as {user}: {shlex.join(a)}" for a in lines] + (
        [f"(the log is sampled when the warm-up runs above {AUTO_LOGGED_PER_S} TPS)"]
        if log and auto else [])  # fmt: skip


def _finish(exp: Experiment, resources: Resources, run: RunContext) -> None:
    """What the run's end does (engine/run.py's _clean_up): resources, then every layer's
    put-back, newest first."""
    resources.release_all()
    for layer in reversed(exp.layers):
        try:
            layer.finish_run(run)
        except TrialFailure:
            continue


def _section(title: str, effects: list[Effect], window: Sequence[str] = (),
             others: Sequence[tuple[str, list[Effect]]] = ()) -> list[str]:  # fmt: skip
    """One part of the run: this machine's effects, the measured window's commands, then
    each standby host's effects under its name."""
    body = _lines(effects) + list(window)
    for name, theirs in others:
        body += [f"on host {name}:", *(f"  {line}" for line in _lines(theirs))]
    return ["", f"  {title}:", *(f"    {line}" for line in body or ["(nothing)"])]


def _lines(effects: list[Effect]) -> list[str]:
    lines = [describe(e) for e in effects]
    reads = sum(1 for e in effects if e.kind == "sql" and _reads_only(e.what))
    body = [line for line in lines if line is not None]
    if reads:
        body.append(f"({reads} read-only queries to the server: its start time, the levels "
                    "in force, counters)")  # fmt: skip
    return body


def _reads_only(query: str) -> bool:
    head = query.lstrip().split(None, 1)[0].upper() if query.strip() else ""
    return head in ("SELECT", "SHOW") and "pg_prewarm(" not in query


def describe(e: Effect) -> str | None:
    """One effect as a line a root user reads (None: a read-only query, counted apart)."""
    d = e.detail
    if e.kind == "run":
        return f"run as {d.get('user', 'root')}: {shlex.join(d['argv'])}"
    if e.kind == "write_kernel":
        old = str(d.get("old") or "")
        menu = re.search(r"\[([^\]]+)\]", old)  # a menu file: the choice in force
        was = menu.group(1) if menu else old.strip()
        return f"kernel: {e.what} = {d['new']}" + (f" (was {was})" if was else "")
    if e.kind == "journal":
        return f"journal {e.what}: {d['entry']}"
    if e.kind == "sql":  # a password's verifier stands for the one the run makes
        text = re.sub(r"PASSWORD '[^']*'", "PASSWORD '(the SCRAM-SHA-256 verifier of the "
                      "run's password)'", e.what)  # fmt: skip
        return None if _reads_only(e.what) else f"SQL: {text}"
    if e.kind == "not_shown":
        return f"(not shown in detail) {e.what}"
    if e.kind in STORAGE_WORDS:
        return STORAGE_WORDS[e.kind](e.what, d)
    words = {"private_dir": "make directory (root's)", "leaf_dir": "make directory for "
             f"{d.get('user')}", "write_file": "write file", "remove_tree": "remove",
             "make_kernel_dir": "make cgroup", "remove_kernel_dir": "remove cgroup",
             "chown": f"hand to uid {d.get('uid')}", "sync": "sync:"}  # fmt: skip
    extra = f" (mode {str(d['mode']).replace('0o', '0')})" if "mode" in d else ""
    return f"{words.get(e.kind, e.kind)} {e.what}{extra}"


STORAGE_WORDS: dict[str, Callable[[str, Any], str]] = {
    "attach_loop": lambda what, d: (
        f"attach {d['device']} (losetup, direct I/O {'on' if d['direct_io'] else 'off'}"
        + (f", {d['sector_size']}-byte sectors" if d["sector_size"] else "")
        + f") over a sparse file {what} of {d['bytes'] / 1024**3:g} GiB"),
    "claim_device": lambda what, d: (
        f"check {what} again: allowed by --allow-device, not mounted, swap or held, no "
        "signature (--wipe: wiped) " + ("but the filesystem pgsweep made" if d["ours"] else "")),
    "mkfs": lambda what, d: shlex.join([*MKFS[d["fstype"]], *d["options"].split(), what]),
    "mount": lambda what, d: (
        f"mount -t {d['fstype']} -o {mount_options(d['fstype'], d['options'])} "
        f"{d['device']} {what}; its root made root's, 0711"
        + ("; chattr +C on it" if d["nocow"] else "")),
    "zfs_create": lambda what, d: _zfs_create(what, d),
    "zfs_change": lambda what, d: (
        f"zfs set {', '.join(f'{k}={v}' for k, v in d['props'].items())} {what}"
        + ("; empty its ARC (zpool export, import)" if d["drop_arc"] else "")),
    "unmount": lambda what, d: f"umount {what}",
    "detach_loop": lambda what, d: f"losetup -d the loop device over {what}; remove {what}",
    "destroy_pool": lambda what, d: f"zpool destroy {what}",
    "stop_zfs_daemon": lambda what, d: f"stop the zfs-fuse daemon ({what})",
}


def _zfs_create(pool: str, d: Any) -> str:
    values = dict(d["values"])
    arc, ashift = values.pop("zfs.arc_max", None), values.pop("zfs.ashift", None)
    props = ", ".join(f"{k[4:]}={v}" for k, v in values.items())
    return (f"start zfs-fuse (page cache off{f', ARC at most {arc}' if arc else ''}); zpool "
            f"create{f' -o ashift={ashift}' if ashift else ''} {pool} on {d['device']}, "
            f"mounted at {d['point']}; its root made root's, 0711"
            + (f"; zfs set {props}" if props else ""))


def _compiles(here: Mapping[Any, PreparedBuild], run: RunContext) -> list[str]:
    """Each build not in this machine's cache yet: fetched, unpacked and compiled before
    anything else; for a server on another host, each then copied into its cache."""
    out = []
    for prepared in here.values():
        build = prepared.build
        if build is None or build.cached:
            continue
        work = build.home.parent / f".building-{build.key}-{DRY}"
        steps = compile_steps(prepared.spec, build.home, work / "stage")
        out.append(f"[build] {prepared.spec.describe()}: fetched ({prepared.spec.source}), "
                   f"unpacked into {work}/src and compiled there as root before the first "
                   "trial: " + "; ".join(shlex.join(argv) for _, argv, _ in steps)
                   + f"; then renamed to {build.home}")  # fmt: skip
    for spec, copy in run.builds.items():
        mine = here[spec].build
        if copy.build is not None and mine is not None and copy.build.home != mine.home:
            out.append(f"[build] {mine.key}: copied into this host's build cache as "
                       f"{copy.build.home} (a gzip'd tar of {mine.home}/prefix, checked by "
                       "SHA-256) unless there already; its trials run that copy")  # fmt: skip
    return out


def _build_line(prepared: PreparedBuild) -> str:
    build, binaries = prepared.build, prepared.binaries
    assert build is not None and binaries is not None  # buildprep.stand_ins makes both
    head = f"[build] {prepared.spec.describe()}: "
    if build.cached:
        return head + f"found in the cache ({build.home}): its trials above run its binaries"
    return head + (f"not built yet: its trials above are shown with its binaries in "
                   f"{build.home} and the catalog of PostgreSQL {binaries.version} (its own "
                   "is known once built; the compile's environment, CC and CFLAGS, is not "
                   "shown)")


def _not_shown(exp: Experiment, run: RunContext, client: str | None,
               here: Mapping[Any, PreparedBuild]) -> list[str]:  # fmt: skip
    lines = [f"the work area {run.workdir} (root, 0711), the socket folder {run.socket_root}, "
             f"the run's entry and lock in {run.registry}; removed at the end"]  # fmt: skip
    lines += [_build_line(prepared) for prepared in here.values()]  # as made here
    lines.append("the environment recorded in results.db (facts read, nothing changed)")
    if client and run.client_side is None and not exp.topology.remote_server:
        lines.append(f"the client host {client}: its agent's work area, pgbench there over "
                     "TCP, and the server's listener and hba line for that host alone")  # fmt: skip
    if not _standbys_walked(exp, run):
        lines.append("the standbys, all of them: a standby's host has no address `plan` "
                     "found")  # fmt: skip
    for i, name in enumerate(exp.topology.standbys, 1):
        if exp.topology.standby_elsewhere(i) and run.standby_side(i) is None:  # not reached
            lines.append(f"standby s{i} on host {name}: its agent's work area, pg_basebackup "
                         "and the standby's server there over TCP, and the server's listener "
                         "and hba replication line for that host alone")  # fmt: skip
    return lines
