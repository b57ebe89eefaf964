"""The attacker of test_safety: runs as the server user (postgres) while pgsweep runs as
root, and keeps planting symbolic links to a root-only file at every name root might
write, read or delete in, knowing pgsweep's layout (it finds the work area in its own
servers' command lines, reads plan.json for trial ids where it may and guesses the rest,
as someone who read the code would). It also asks its own server to
listen on TCP through postgresql.auto.conf. Every attempt is logged, one per line:
`planted PATH`, `denied PATH` (the kernel refused), `tamper PATH`.

usage: attacker.py RESULTS CANARY LOG --tag TAG | --prefix PREFIX
  --tag: attack the work area of the run into RESULTS only, the one whose name holds TAG
  (workarea.run_tag): the suite runs other tests' runs beside this one, whose servers
  the server user sees too, and a link planted in theirs fails their trials;
  --prefix: attack the directories in RESULTS whose names start with PREFIX (the value
  checker's scratch under /tmp) instead of a run's work area."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from pathlib import Path

ROOT_NAMES = (
    "postgresql.conf",
    "pg_hba.conf",
    "pgsweep.conf",
    "postgres.out",
    "initdb.out",
    "cp.out",
    "load.out",
    "pgbench.out",
    "warmup.out",
    "disk-1.img",
    "zfs-fuse.pid",
)
LEAF_NAMES = ("pgsweep.conf", "postgresql.conf", "tx.99999", "evil-link")
running = True


def stop(*_: object) -> None:
    global running
    running = False


def plant(path: Path, target: Path, log: list[str]) -> None:
    try:
        if path.is_symlink():
            return
    except PermissionError:
        log.append(f"denied {path}")
        return
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        tmp.symlink_to(target)
        os.replace(tmp, path)  # replaces a file of ours; a root-owned dir refuses us
        log.append(f"planted {path}")
    except PermissionError:
        log.append(f"denied {path}")
        with contextlib.suppress(OSError):
            tmp.unlink()
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError, OSError):
        pass


def tamper(data: Path, log: list[str]) -> None:
    auto = data / "postgresql.auto.conf"
    try:
        text = auto.read_text()
        if "listen_addresses" not in text:
            with open(auto, "a") as f:
                f.write("listen_addresses = '*'\nport = 5432\n")
            log.append(f"tamper {auto}")
    except OSError:
        pass


def work_areas(results: Path, tag: str) -> set[Path]:
    """The run's work areas: listed in the results folder where it may be listed, else
    found as the server user finds them, in the command lines of its own servers (the
    results folder is private: 0711 while a run's work area is inside, never listable)."""
    found: set[Path] = set()
    inside = os.path.realpath(results)
    with contextlib.suppress(OSError):
        found |= set(results.glob(".pgsweep-work-*"))
    for proc in Path("/proc").iterdir():
        try:
            if not proc.name.isdigit() or proc.stat().st_uid != os.getuid():
                continue
            argv = (proc / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        for arg in argv:
            parts = Path(arg).parts
            for i, part in enumerate(parts):
                area = Path(*parts[: i + 1])
                if ((part.startswith(".pgsweep-work-") and str(area.parent) == inside)
                        or (part.startswith("pgsweep-work-") and f"-{tag}-" in part)):
                    found.add(area)
    return found


def trial_ids(results: Path) -> list[str]:
    """From plan.json when it can be read; else guessed, as the ids are r{round}-c{NN}."""
    try:
        plan = json.loads((results / "plan.json").read_text())
        return [t["id"] for t in plan["trials"]]
    except (OSError, ValueError):
        return [f"r{r}-c{c:02d}" for r in range(1, 4) for c in range(1, 5)]


def work_targets(results: Path, areas: set[Path]) -> list[tuple[Path, bool]]:
    """(directory, is a server-user leaf) pairs pgsweep's layout makes for a run."""
    out: list[tuple[Path, bool]] = []
    trials = trial_ids(results)
    for work in areas:
        out += [(work, False), (work / "private", False), (work / "trials", False)]
        out += [(work / "clusters", False)]
        for n in range(1, 5):
            c = work / "clusters" / f"cluster-{n}"
            out += [(c, False), (c / "conf", False), (c / "cmd", False)]
            out += [(c / "data", True), (c / "snapshot", True), (c / "log", True)]
        for t in trials:
            out += [(work / "trials" / t, False), (work / "trials" / t / "txlog", True)]
        out += [(work / "standbys", False)]
        for n, g in ((n, g) for n in range(1, 5) for g in range(10)):  # root's 0711: guessed
            s = work / "standbys" / f"cluster-{n}-{g}-s1"  # primary N, its data generation G
            out += [(s, False), (s / "conf", False), (s / "cmd", False)]
            out += [(s / "data", True), (s / "log", True)]
    return out


def main() -> None:
    results, canary, log_path = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    if len(sys.argv) != 6 or sys.argv[4] not in ("--tag", "--prefix"):
        sys.exit(__doc__)
    option, value = sys.argv[4:6]
    signal.signal(signal.SIGTERM, stop)
    log: list[str] = []
    try:
        attack(results, canary, option, value, log)
    finally:
        log_path.write_text("".join(f"{line}\n" for line in dict.fromkeys(log)))


def attack(results: Path, canary: Path, option: str, value: str, log: list[str]) -> None:
    areas: set[Path] = set()
    looked = 0.0
    while running:
        if option == "--prefix":
            targets = [(d, False) for d in results.glob(f"{value}*")]
            targets += [(d / "out", False) for d, _ in list(targets)]
        else:
            # a run has one work area: once found, /proc (every process on the machine,
            # half this loop's CPU) is read again once a second, not at every sweep
            if not areas or time.monotonic() - looked > 1.0:
                areas, looked = work_areas(results, value), time.monotonic()
            targets = work_targets(results, areas)
        for directory, leaf in targets:
            try:
                if not directory.is_dir():
                    continue
            except PermissionError:
                continue
            try:  # a snapshot being made is root's for a moment: not readable yet
                loaded = (directory.parent / "snapshot" / "PG_VERSION").exists()
                if directory.parent.parent.name == "standbys":  # a base backup is in
                    loaded = (directory / "PG_VERSION").exists()
            except OSError:
                loaded = False
            if directory.name in ("data", "snapshot") and not loaded:
                continue  # once loaded: earlier, a link only makes initdb (the server user) fail
            for name in LEAF_NAMES if leaf else ROOT_NAMES:
                plant(directory / name, canary.parent if name == "evil-link" else canary, log)
            if leaf and directory.name == "data":
                tamper(directory, log)
        time.sleep(0.02)


if __name__ == "__main__":
    main()
