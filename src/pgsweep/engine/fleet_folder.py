"""The folder of a fleet run (`run --inventory`), and what `--resume` reads back from it.

It holds the merged results at its top (experiment.toml, plan.json, results.db, as
`merge` writes them), each group's shard folder as it came back under shards/GROUP, and
fleet.json, the fleet's ledger: the experiment file it runs, its groups in shard order
(the K-th group runs shard K/N, on every dispatch), each group's outcome ("ok", or why
its rounds are missing) and the facts its host gave. `--resume` dispatches only the
groups whose outcome is not "ok"; the top is merged again from every shard folder that
came back, so no trial is run twice and none is copied twice."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from ..collect import hostfacts
from ..errors import PgsweepError
from ..host import folders, safefs
from ..spec import Experiment
from ..store import merge
from ..store.db import Store

LEDGER = "fleet.json"
SHARDS = "shards"
MERGED = ("experiment.toml", "plan.json", "results.db")


@dataclass
class Ledger:
    file_text: str
    groups: list[str]  # in shard order
    status: dict[str, str]  # group -> "ok" or why its rounds are missing
    facts: dict[str, dict[str, str]]  # group -> its host's facts

    def shard(self, group: str) -> str:
        return f"{self.groups.index(group) + 1}/{len(self.groups)}"

    def missing(self) -> list[str]:
        return [g for g in self.groups if self.status.get(g) != "ok"]


def new_target(results: Path) -> Path:
    """Where a new fleet folder goes: resolved once in a safe place, new or empty."""
    results = safefs.trusted_target(results, "the fleet's results folder")
    if results.exists() and (not results.is_dir() or any(results.iterdir())):
        raise PgsweepError(f"the fleet's results folder {results} is not a new or empty "
                           "folder", where=str(results),
                           fix="add --resume to dispatch what that fleet is missing, or "
                           "choose a new --results folder")  # fmt: skip
    return results


def start(results: Path, exp: Experiment, groups: list[str]) -> Ledger:
    """The new fleet folder (private), its shards/ folder and its first ledger: every
    group missing until its shard comes back, so a fleet stopped at once resumes whole."""
    if not results.exists():
        results.parent.mkdir(parents=True, exist_ok=True)
        safefs.private_dir(results)
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
        raw = json.loads(path.read_text())
        ledger = Ledger(str(raw["file_text"]), [str(g) for g in raw["groups"]],
                        {str(g): str(w) for g, w in raw["status"].items()},
                        {str(g): {str(k): str(v) for k, v in f.items()}
                         for g, f in raw["facts"].items()})  # fmt: skip
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise PgsweepError(f"{path} is damaged ({e})", where=str(path),
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


def save(results: Path, ledger: Ledger) -> None:
    safefs.write_file(results / LEDGER, json.dumps(asdict(ledger), indent=1))


def shard_folder(results: Path, group: str) -> Path:
    return results / SHARDS / group


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
