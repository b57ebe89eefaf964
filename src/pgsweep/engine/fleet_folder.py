"""The folder of a fleet run (`run --inventory`), and what `--resume` reads back from it.

It holds the merged results at its top (experiment.toml, plan.json, results.db, as
`merge` writes them), each group's shard folder as it came back under shards/GROUP, and
fleet.json, the fleet's ledger: the experiment file it runs, its groups in shard order
(the K-th group runs shard K/N, on every dispatch), each group's outcome ("ok", or why
its rounds are missing) and the facts its host gave. `--resume` dispatches only the
groups whose outcome is not "ok"; the top is merged again from every shard folder that
came back, so no trial is run twice and none is copied twice. fleet.lock holds the folder
for one pgsweep at a time (`locked`)."""

from __future__ import annotations

import fcntl
import json
import os
import re
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..collect import hostfacts
from ..errors import PgsweepError
from ..host import folders, safefs
from ..spec import Experiment
from ..store import merge
from ..store.db import Store

LEDGER = "fleet.json"
LOCK = "fleet.lock"
# A group's name becomes a folder name, a play's host pattern and a shard's --group: the
# names Ansible itself calls valid, nothing a path or a template could read otherwise
GROUP_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
SHARDS = "shards"
MERGED = ("experiment.toml", "plan.json", "results.db")


@dataclass
class Ledger:
    file_text: str
    groups: list[str]  # in shard order
    status: dict[str, str]  # group -> "ok" or why its rounds are missing
    facts: dict[str, dict[str, str]]  # group -> its host's facts
    # group -> the work folder an earlier dispatch left on its host (the host was lost, or
    # could not be stopped): a shard may still run there; the next dispatch stops it first
    left: dict[str, str] = field(default_factory=dict)

    def shard(self, group: str) -> str:
        return f"{self.groups.index(group) + 1}/{len(self.groups)}"

    def missing(self) -> list[str]:
        return [g for g in self.groups if self.status.get(g) != "ok"]


@dataclass(frozen=True)
class Target:
    """A new fleet folder's path, resolved once, and the empty folder found there (device,
    inode) if one was: `start` makes or takes exactly that, later."""

    path: Path
    found: tuple[int, int] | None


def new_target(results: Path) -> Target:
    """Where a new fleet folder goes: resolved once in a safe place, new or empty."""
    results = safefs.trusted_target(results, "the fleet's results folder")
    if "{" in str(results) or "}" in str(results):  # Ansible templates the fetch's dest
        raise PgsweepError(f"the fleet's results folder {results} has {{ or }} in its path",
                           where=str(results), fix="choose a folder without braces")  # fmt: skip
    try:
        st = os.lstat(results)
    except FileNotFoundError:
        return Target(results, None)
    if not stat.S_ISDIR(st.st_mode) or any(results.iterdir()):
        raise PgsweepError(f"the fleet's results folder {results} is not a new or empty "
                           "folder", where=str(results),
                           fix="add --resume to dispatch what that fleet is missing, or "
                           "choose a new --results folder")  # fmt: skip
    if not _ours(st):
        raise PgsweepError(f"the fleet's results folder {results} is another user's, or "
                           "others may write in it", where=str(results),
                           fix="choose a folder only you can change")  # fmt: skip
    return Target(results, (st.st_dev, st.st_ino))


def _ours(st: os.stat_result) -> bool:
    return st.st_uid in folders.trusted_uids() and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def start(target: Target, exp: Experiment, groups: list[str]) -> Ledger:
    """The new fleet folder (private), its shards/ folder and its first ledger: every
    group missing until its shard comes back, so a fleet stopped at once resumes whole.
    Made where nothing was (an exclusive mkdir), or the very empty folder checked
    before (the facts were asked in between): anything else there is refused."""
    results = target.path
    try:
        if target.found is None:
            results.parent.mkdir(parents=True, exist_ok=True)
            safefs.private_dir(results)
        else:
            st = os.lstat(results)
            if (not stat.S_ISDIR(st.st_mode) or (st.st_dev, st.st_ino) != target.found
                    or not _ours(st) or any(results.iterdir())):  # fmt: skip
                raise FileExistsError(results)
    except FileExistsError:
        raise PgsweepError(f"the fleet's results folder {results} changed while the hosts' "
                           "facts were asked", where=str(results),
                           fix="choose a folder only you can change") from None  # fmt: skip
    safefs.private_dir(results / SHARDS)
    ledger = Ledger(exp.source.text, groups, {}, {})
    save(results, ledger)
    return ledger


def reopen(results: Path, exp: Experiment, wanted: list[str]) -> tuple[Path, Ledger]:
    """The ledger of the fleet to resume (resolved folder, ledger), refused (exit 2) when
    the folder is no fleet folder, the experiment file changed or other groups are named."""
    results = folders.results_folder(results, "the fleet's results folder")
    path = results / LEDGER
    folders.check_file(path, "the fleet's")
    if not path.is_file():
        raise PgsweepError(f"nothing to resume: {results} holds no {LEDGER} (it is not the "
                           "folder of a fleet run)", where=str(results),
                           fix="name the --results folder of `run --inventory`, or start "
                           "without --resume")  # fmt: skip
    try:
        ledger = _parse(json.loads(path.read_text()))
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as e:
        raise PgsweepError(f"{path} is damaged ({str(e)[:200]})", where=str(path),
                           fix="start the fleet again into a new --results folder") from None
    if ledger.file_text != exp.source.text:
        raise PgsweepError("the experiment file changed since this fleet started: its shards "
                           "would not be one experiment", where=str(exp.source.path),
                           fix=f"undo the change, or start a new fleet (the original is "
                           f"frozen in {path})")  # fmt: skip
    if wanted and sorted(wanted) != sorted(ledger.groups):
        raise PgsweepError(f"this fleet runs the groups {', '.join(ledger.groups)}, not "
                           f"{', '.join(wanted)}", where=str(results),
                           fix="resume without --groups (its groups are kept)")  # fmt: skip
    return results, ledger


def _parse(raw: dict[str, object]) -> Ledger:
    groups, status, facts = raw["groups"], raw["status"], raw["facts"]
    if not (isinstance(raw["file_text"], str) and isinstance(groups, list)
            and isinstance(status, dict) and isinstance(facts, dict)):  # fmt: skip
        raise TypeError("not the fields of a ledger")
    names = [check_group(g) for g in groups]
    if len(set(names)) != len(names) or len(names) < 2:
        raise ValueError("its groups are not two or more different names")
    left = raw.get("left", {})
    if not isinstance(left, dict) or not all(isinstance(w, str) and work_folder(w)
                                             for w in left.values()):  # fmt: skip
        raise ValueError("its work folders are not ones a dispatch makes")
    return Ledger(raw["file_text"], names,
                  {str(g): str(w) for g, w in status.items() if g in names},
                  {str(g): {str(k): str(v) for k, v in f.items()}
                   for g, f in facts.items() if g in names},
                  {str(g): str(w) for g, w in left.items() if g in names})  # fmt: skip


WORK_FOLDER = re.compile(r"(/[A-Za-z0-9_.-]+)*/pgsweep-fleet-[A-Za-z0-9_]+")


def work_folder(path: str) -> bool:
    """A work folder the dispatch's playbook makes on a host (Ansible's tempfile, prefix
    pgsweep-fleet-): an absolute path of plain names, no `..`, nothing Ansible would read
    as a template. Anything else is never stopped or removed there."""
    return bool(WORK_FOLDER.fullmatch(path)) and ".." not in path.split("/")


def check_group(name: object) -> str:
    """`name` if it is a group name a fleet can use, else ValueError."""
    if not isinstance(name, str) or not GROUP_NAME.fullmatch(name):
        raise ValueError(f"{str(name)[:80]!r} is not a group name (letters, digits and _, "
                         "not starting with a digit)")
    return name


@contextmanager
def locked(results: Path) -> Iterator[None]:
    """The fleet folder for this pgsweep alone while it dispatches, fetches and merges: a
    second `run --inventory` on it (a `--resume` while the first still runs) is refused,
    exit 2, before it contacts a host; the lock goes with the process, even on kill -9.
    The folder is root's own (checked when made or reopened); the name is opened without
    following a link."""
    fd = os.open(results / LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip()
            raise PgsweepError(f"another pgsweep (pid {holder or '?'}) is running this fleet",
                               where=str(results), fix="wait for it to end; then "
                               "`--resume` runs what it left") from None  # fmt: skip
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)


def save(results: Path, ledger: Ledger) -> None:
    safefs.write_file(results / LEDGER, json.dumps(asdict(ledger), indent=1))


def shard_folder(results: Path, group: str) -> Path:
    return results / SHARDS / check_group(group)


def remerge(results: Path, ledger: Ledger) -> merge.Merged | None:
    """The top of the fleet folder merged again from every group's shard folder that came
    back (None if none did), with the facts of every group's host."""
    done = [shard_folder(results, g) for g in ledger.groups if ledger.status.get(g) == "ok"]
    if not done:
        return None
    staging = results / ".merging"
    safefs.remove_tree(staging)  # a merge stopped half way
    merged = merge.merge(done, staging)
    _keep_facts(staging, ledger.facts)
    for name in MERGED:  # results.db last: a reader sees the old merge or the new one
        os.replace(staging / name, results / name)
    safefs.remove_tree(staging)
    merged.folder = results
    return merged


def _keep_facts(folder: Path, facts: dict[str, dict[str, str]]) -> None:
    """Each group's facts in the merged store (scope "hostfacts"), and the facts that
    differ (the file allowed them) under "fleet" for the report."""
    store = Store(folder / "results.db")
    try:
        store.save_environment("hostfacts", {f"{fact}@{g}": v for g, f_ in facts.items()
                                             for fact, v in f_.items()})  # fmt: skip
        differ = hostfacts.differences(facts, ())
        if differ:
            store.save_environment("fleet", {"facts_differ": " | ".join(
                hostfacts.describe(differ))})  # fmt: skip
    finally:
        store.close()
