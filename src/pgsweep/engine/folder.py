"""The results folder of a run: never one pgsweep did not make (an existing folder must
be empty, or hold a run's results.db to `--resume`), the frozen experiment file, the
plan, and the store, with what must not change between a run and its resume."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .. import __version__
from ..errors import PgsweepError
from ..host import folders, safefs
from ..plan import Plan
from ..spec import Experiment
from ..store import Store


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def fingerprint(exp: Experiment) -> str:
    """What must not change between a run and its --resume."""
    extra: dict[str, Any] = {"adaptive": asdict(exp.adaptive)} if exp.adaptive else {}
    if exp.against is not None:  # the before side: the very file measured again
        extra["against"] = hashlib.sha256(exp.against_text.encode()).hexdigest()
    if exp.shard is not None:  # group K of N: another K or N is another run
        extra["shard"] = str(exp.shard)
    return json.dumps(
        extra  # keys older runs lack are left out when unused
        | {
            "base": exp.base,
            "factors": [[f.name, list(f.levels)] for f in exp.factors],
            "rounds": exp.rounds,
            "seed": exp.seed,
            "rebuild": exp.rebuild,
            "postgres": str(exp.binaries.bindir),
        },
        sort_keys=True,
        default=str,
    )


def check_results_folder(results: Path, resume: bool) -> None:
    """Never adopt a folder pgsweep did not write: an existing one must be empty, or hold
    a run's results.db."""
    if results.exists() and not results.is_dir():
        raise PgsweepError(f"{results} exists and is not a folder", where=str(results),
                           fix="choose another --results folder")  # fmt: skip
    if results.is_dir() and not resume and any(results.iterdir()):
        held = "already holds results" if (results / "results.db").exists() else "is not empty"
        raise PgsweepError(
            f"the results folder {results} {held}",
            where=str(results),
            fix="add --resume to continue that run, or choose a new or empty --results folder"
            if held == "already holds results" else "choose a new or empty --results folder",
        )  # fmt: skip


def resume_store(exp: Experiment, results: Path) -> Store:
    """The store of the run to continue; refuses when the file changed its plan."""
    db_path = results / "results.db"
    if not db_path.exists():
        raise PgsweepError(
            f"nothing to resume: {db_path} does not exist",
            where=str(results),
            fix="start without --resume, or name the results folder of the run",
        )
    for suffix in ("", "-journal"):  # SQLite rolls a journal back as root (store.db)
        folders.check_file(Path(f"{db_path}{suffix}"), "the results folder's")
    store = Store(db_path)
    stored = store.experiment()
    if stored is None:
        store.close()
        raise PgsweepError(f"{db_path} holds no experiment", fix="start a new run")
    if not exp.seed_given:
        exp.seed = int(stored["seed"])
    if stored["fingerprint"] != fingerprint(exp):
        store.close()
        old, new = json.loads(stored["fingerprint"]), json.loads(fingerprint(exp))
        keys = [k for k in {*old, *new} if old.get(k) != new.get(k)]
        fix = (f"undo the change to resume, or start a new run without --resume "
               f"(the original is frozen in {results / 'experiment.toml'})")  # fmt: skip
        if "against" in keys:
            fix = ("this run measured a results folder again: resume it with the same "
                   "--against DIR, whose experiment.toml must not have changed")  # fmt: skip
        elif {"rounds", "adaptive"} & set(keys):
            fix = ("more rounds for a run whose results were looked at is one more look: the "
                   "false 'different' rate would rise unseen. Start a new run (with rounds = "
                   "\"auto\" its looks are planned), or use this one as a pilot: pgsweep plan "
                   f"FILE --noise-from {results}")  # fmt: skip
        raise PgsweepError(
            f"the experiment file changed since this run started ({', '.join(sorted(keys))} "
            "differ)", where=str(exp.source.path), fix=fix,
        )  # fmt: skip
    return store


def new_store(exp: Experiment, results: Path, plan: Plan) -> Store:
    """A new results folder, private (0700; every file 0600): the frozen file, the plan
    and the store. It holds every setting and the servers' logs; an empty folder the user
    named keeps its mode, the files in it are private all the same."""
    if not results.exists():
        results.parent.mkdir(parents=True, exist_ok=True)
        safefs.private_dir(results)
    safefs.write_file(results / "experiment.toml", exp.source.text)
    if exp.against is not None:  # the file whose configurations are measured again
        safefs.write_file(results / "against.toml", exp.against_text)
    safefs.write_file(results / "plan.json", plan.to_json())
    # made here, exclusively and 0600: SQLite would make it by the umask (0644), and its
    # journals take the database's mode
    os.close(os.open(results / "results.db", os.O_WRONLY | os.O_CREAT | os.O_EXCL
                     | safefs.NOFOLLOW, 0o600))  # fmt: skip
    store = Store(results / "results.db")
    store.write_experiment(
        {
            "name": exp.name,
            "file_text": exp.source.text,
            "fingerprint": fingerprint(exp),
            "seed": exp.seed,
            "plan_json": plan.to_json(),
            "created_at": now(),
            "pgsweep_version": __version__,
            "postgres_version": exp.binaries.version,
        },
        [(c.id, c.label(), json.dumps(c.levels), c.group) for c in plan.configurations],
    )
    return store
