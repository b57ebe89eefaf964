"""The code's shape, as docs/architecture.md states it, checked on the source itself:
imports run one way down the pipeline's stages (lazy imports included) with no circle
between modules, and what a run does to a machine goes through its Host: in the layers,
the collectors, PostgreSQL's programs and the engine, a direct file, process or kernel
access is allowed only where the list below says why (checks of this machine before
anything runs, the controller's own inputs and results, the run's own work area),
so a new one fails here."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from conftest import ROOT

SRC = ROOT / "src" / "pgsweep"
# top first: a module may import its own stage and those below it, never one above
STAGES = ["cli", "outputs", "engine", "analysis", "spec", "layers", "collect", "postgres",
          "store", "verdict", "plan", "host", "shared"]  # fmt: skip


def _stage(module: str) -> str:
    head = module.split(".")[0]
    if head in ("cli", "cli_run", "cli_read"):
        return "cli"
    return head if head in STAGES else "shared"  # core, units, errors, tomlpos, __init__


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(SRC.rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _runtime_nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node but those under `if TYPE_CHECKING:` (imports for annotations only)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING":
            continue
        yield node
        yield from _runtime_nodes(node)


def _imports(module: str, path: Path, known: dict[str, Path]) -> Iterator[tuple[str, int]]:
    """(imported pgsweep module, line) for each import the module runs."""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    package = [p for p in package if p]
    for node in _runtime_nodes(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level == 0 and not (node.module or "").startswith("pgsweep"):
                continue
            base = ((node.module or "").split(".")[1:] if node.level == 0 else
                    package[: len(package) - node.level + 1] + (node.module or "").split("."))
            base = [b for b in base if b]
            for alias in node.names:
                full = ".".join([*base, alias.name])
                yield (full if full in known else ".".join(base)), node.lineno
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("pgsweep."):
                    yield alias.name.removeprefix("pgsweep."), node.lineno


def test_imports_run_down_the_pipeline_only() -> None:
    known = _modules()
    upward = [f"{m} ({_stage(m)}) imports {t} ({_stage(t)}), line {line}"
              for m, path in known.items() for t, line in _imports(m, path, known)
              if STAGES.index(_stage(t)) < STAGES.index(_stage(m))]  # fmt: skip
    assert upward == []


def test_no_module_import_circle() -> None:
    known = _modules()
    graph = {m: {t for t, _ in _imports(m, p, known) if t != m and t in known}
             for m, p in known.items()}  # fmt: skip
    circles = []
    for start in graph:  # a module that reaches itself again
        seen, todo = set(), list(graph[start])
        while todo:
            m = todo.pop()
            if m == start:
                circles.append(start)
                break
            if m not in seen:
                seen.add(m)
                todo += graph[m]
    assert circles == []


# ---- the machine through the Host --------------------------------------------------------
MACHINE_MODULES = {"os", "shutil", "subprocess", "tempfile", "proc", "safefs", "blockdev",
                   "zfsfuse", "mounts", "bounded"}  # fmt: skip
HARMLESS = {"os.getpid", "os.geteuid", "os.getuid", "os.cpu_count", "os.sysconf",
            "os.fspath", "blockdev.Grant", "bounded.Budget"}  # fmt: skip
PATH_CALLS = {"read_text", "write_text", "read_bytes", "write_bytes", "mkdir", "unlink",
              "exists", "is_file", "is_dir", "stat", "lstat", "chmod", "iterdir", "glob",
              "rglob", "rmdir", "rename", "touch", "open"}  # fmt: skip
HOSTS = {"host", "on", "client"}  # names the code gives a Host

PLAN = "checks this machine (the server's) before anything runs"
INPUTS = "the controller's own inputs and results folder, not a host's"
RUN = "this process, and the run's own work area, lock and registry here, made before any host"
OPENS = "opening a host: ssh and its agent (host/remote.py)"
DRY = "the dry run's own host (a Host): it reads this machine and changes nothing"
FLEET = "a fleet's controller: its folder here and Ansible (each group runs pgsweep there)"
ALLOWED = {
    ("layers/build.py", "check_host"): PLAN,
    ("layers/room.py", "_room"): PLAN,
    ("layers/room.py", "_device_bytes"): PLAN,
    ("layers/server_include.py", "_read"): INPUTS,
    ("layers/storage.py", "check_host"): PLAN,
    ("layers/storage.py", "coexist"): PLAN,
    ("layers/storage.py", "_same_disk"): PLAN,
    ("layers/workload.py", "record_inputs"): INPUTS,
    ("layers/workload.py", "_read_script"): INPUTS,
    ("layers/workload_replay.py", "_parse_check"): PLAN,
    ("layers/workload_tools.py", "program"): PLAN,
    ("collect/_numba_cache.py", "ensure_cache_dir"): "the package's own compile cache",
    ("collect/txlog.py", "_read_all"): "a transaction log the caller opened",
    ("collect/txlog.py", "_size"): "a transaction log the caller opened",
    ("collect/txlog.py", "piece"): "a transaction log the caller opened",
    ("postgres/binaries.py", "locate"): PLAN,
    ("postgres/binaries.py", "_has_all"): PLAN,
    ("postgres/binaries.py", "_inspect"): PLAN,
    ("postgres/binaries.py", "_identity"): PLAN,
    ("postgres/binaries.py", "runtime_value"): PLAN,
    ("postgres/binaries.py", "runtime"): PLAN,
    ("postgres/binaries.py", "__enter__"): PLAN,
    ("postgres/binaries.py", "__exit__"): PLAN,
    ("postgres/binaries.py", "_postgres"): PLAN,
    ("engine/measure.py", "_reduce_log"): "pgbench beside the server here: its logs read by "
                                          "descriptor (a client host's come through its Host)",
    # the engine around the trials
    ("engine/run.py", "run"): RUN,
    ("engine/plans.py", "existing"): INPUTS,
    ("engine/plans.py", "preflight"): RUN,
    ("engine/folder.py", "check_results_folder"): INPUTS,
    ("engine/folder.py", "resume_store"): INPUTS,
    ("engine/folder.py", "new_store"): INPUTS,
    ("engine/against.py", "frozen_file"): INPUTS,
    ("engine/watch.py", "progress"): INPUTS,
    ("engine/watch.py", "progress_awaited"): RUN,
    ("engine/watch.py", "runs_writing"): RUN,
    ("engine/watch.py", "stop"): RUN,
    ("engine/clients.py", "open_hosts"): OPENS,
    ("engine/clients.py", "keep"): OPENS,
    ("engine/clients.py", "doctor_on"): OPENS,
    ("engine/buildprep.py", "_inspect"): PLAN,
    ("engine/dryhost.py", "claim_device"): DRY,
    ("engine/dryhost.py", "write_kernel"): DRY,
    ("engine/fleet.py", "_status"): FLEET,
    ("engine/fleet_ansible.py", "ansible_tool"): FLEET,
    ("engine/fleet_ansible.py", "job_events"): FLEET,
    ("engine/fleet_ansible.py", "close_connections"): FLEET,
    ("engine/fleet_progress.py", "scan"): FLEET,
    **{("engine/fleet_folder.py", f): FLEET for f in ("locked", "new_target", "remerge",
                                                      "reopen", "save", "start")},
}
TRIAL_PATH = ["layers", "collect", "postgres", "engine"]


def _direct(call: ast.Call) -> str | None:
    """What a call reaches on the machine without a Host, or None."""
    fn = call.func
    if isinstance(fn, ast.Name) and fn.id == "open":
        return "open"
    if not isinstance(fn, ast.Attribute):
        return None
    owner = fn.value
    if isinstance(owner, ast.Name) and owner.id in MACHINE_MODULES:
        name = f"{owner.id}.{fn.attr}"
        return None if name in HARMLESS or name.startswith("os.path") else name
    through_host = (isinstance(owner, ast.Name) and owner.id in HOSTS) or (
        isinstance(owner, ast.Attribute) and owner.attr == "host")
    return f".{fn.attr}" if fn.attr in PATH_CALLS and not through_host else None


def _direct_calls() -> dict[tuple[str, str], list[str]]:
    files = [p for part in TRIAL_PATH for p in sorted((SRC / part).glob("*.py"))
             if (SRC / part).is_dir()] + [SRC / p for p in TRIAL_PATH if p.endswith(".py")]
    found: dict[tuple[str, str], list[str]] = {}
    for path in files:
        tree = ast.parse(path.read_text())
        for fn in ast.walk(tree):
            if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(fn):
                what = _direct(node) if isinstance(node, ast.Call) else None
                if what:
                    key = (str(path.relative_to(SRC)), fn.name)
                    found.setdefault(key, []).append(f"{what} (line {node.lineno})")
    return found


def test_what_a_trial_does_to_a_machine_goes_through_its_host() -> None:
    found = _direct_calls()
    unexplained = {k: v for k, v in found.items() if k not in ALLOWED}
    assert unexplained == {}, "act through the trial's host (host/api.py), or say why not"
    stale = sorted(set(ALLOWED) - set(found))
    assert stale == [], "no longer direct: remove from ALLOWED"


def test_the_check_sees_a_direct_access_planted_in_a_layer(tmp_path: Path) -> None:
    """The scanner itself: a layer reading /proc by path, or running a process with proc,
    is found; the same through `trial.run.host` is not."""
    source = '''
def prepare(settings, trial):
    Path("/proc/meminfo").read_text()
    proc.run(["sync"], out=Path("/tmp/x"))
    trial.run.host.read_text(Path("/proc/meminfo"))
    host.lstat(Path("/x"))
'''
    calls = [n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Call)]
    assert sorted(filter(None, map(_direct, calls))) == [".read_text", "proc.run"]


def test_what_a_remote_host_starts_imports_no_heavy_library() -> None:
    """`pgsweep agent` (each remote host's, for the length of a run) and a fleet host's
    `progress` and `facts` start a process on the measured host: the experiment file's
    models (pydantic), the statistics and the store are the controller's. A dead copy of the
    ZFS table in host/zfsfuse once made every agent import pydantic (0.54 -> 0.26 CPU-s a
    start without it, stop 45)."""
    import subprocess
    import sys

    heavy = ("pydantic", "numpy", "scipy", "duckdb", "pyarrow", "jinja2", "matplotlib")
    code = ("import sys, pgsweep.cli, pgsweep.host.agent, pgsweep.host.local\n"
            f"print(sorted({{m.split('.')[0] for m in sys.modules}} & {set(heavy)!r}))"
            )  # fmt: skip
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)  # fmt: skip
    assert res.stdout.strip() == "[]", res.stdout
