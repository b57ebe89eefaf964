"""`pgsweep merge`: the shard folders of one experiment joined into one results folder.

Every shard froze the same experiment file and computed the same plan (the seed is the
file's, `run --shard`), so their trials are rows of one design: each shard brings the
rounds the plan gave its group. The merge refuses (exit 2, naming the folder and what
differs) anything else: a folder that is no shard, another file or plan, two folders of
one shard or group, rounds that overlap or that a shard's plan did not give it (a trial
outside its shard's rounds is a tampered or foreign row). Shards are read under the
reading commands' rules (host.folders: folders no other user can change, files that are
not links); the merged folder is new or empty, private, written without following links.

Facts of each machine stay apart: every environment scope and cluster name of group G
becomes `SCOPE@G` ("host@a"), the fleet's own facts are merged under "fleet", and each
trial keeps its group and shard."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..errors import PgsweepError
from ..host import safefs
from ..plan import parse_spans, round_spans, shard_rounds
from .db import Store
from .results import COPIED_TABLES, Experiment, Results

RUN_SHARDS = "run each shard with `pgsweep run FILE --shard K/N` from one experiment file"


@dataclass(frozen=True)
class ShardFolder:
    folder: Path
    k: int
    n: int
    group: str
    rounds: list[int]
    experiment: Experiment  # after _same_experiment: the first shard's (one parsed plan)
    created_at: str  # this shard's own start


@dataclass
class Merged:
    folder: Path
    shards: int  # shard folders merged
    of: int  # shards in the plan
    trials: int
    missing: list[int]  # rounds no merged shard ran


def merge(sources: list[Path], out: Path) -> Merged:
    """Join `sources` (shard folders) into the new folder `out`."""
    opened = [Results(s) for s in sources]
    try:
        shards: list[ShardFolder] = []
        for r in opened:  # each compared as it is read: one plan held, not one per shard
            shard = _shard(r)
            if shards:
                _same_experiment(shards[0], shard)
                shard = replace(shard, experiment=shards[0].experiment)
            shards.append(shard)
        _check(shards, opened)
        out, fresh = _new_folder(out)
        try:
            trials = _write(shards, opened, out)
        except BaseException:
            if fresh:
                safefs.remove_tree(out)
            raise
    finally:
        for r in opened:
            r.close()
    ran = {r for s in shards for r in s.rounds}
    missing = [r for r in range(1, shards[0].experiment.rounds + 1) if r not in ran]
    return Merged(out, len(shards), shards[0].n, trials, missing)


def _shard(results: Results) -> ShardFolder:
    fleet = results.fleet()
    where = str(results.folder)
    if "shard" not in fleet:
        what = "a merged folder" if "groups" in fleet else "not a shard"
        raise PgsweepError(f"{where} is {what}: merge joins the folders of shard runs",
                           where=where, fix=RUN_SHARDS)  # fmt: skip
    try:
        k, n, rounds = int(fleet["shard"]), int(fleet["shards"]), parse_spans(fleet["rounds"])
    except (KeyError, ValueError):
        raise PgsweepError(f"{where}: its shard facts are damaged ({fleet})", where=where,
                           fix=RUN_SHARDS) from None  # fmt: skip
    experiment = results.experiment()
    return ShardFolder(results.folder, k, n, fleet.get("group", f"shard{k}"), rounds,
                       experiment, experiment.created_at)  # fmt: skip


def _same_experiment(first: ShardFolder, s: ShardFolder) -> None:
    """One experiment file, one plan, one seed, one PostgreSQL."""
    plan = first.experiment.plan
    differ = [what for key, what in (("file_text", "the experiment file"), ("plan", "plan"),
                                     ("seed", "seed"), ("postgres_version", "PostgreSQL"))
              if getattr(s.experiment, key) != getattr(first.experiment, key)]  # fmt: skip
    if "plan" in differ:
        other = s.experiment.plan
        keys = sorted(k for k in {*plan, *other} if plan.get(k) != other.get(k))
        differ[differ.index("plan")] = f"the plan ({', '.join(keys)})"
    if differ:
        raise PgsweepError(
            f"{s.folder} is not a shard of the experiment in {first.folder}: "
            f"{', '.join(differ)} differ",
            where=str(s.folder), fix="merge the shards of one experiment file: " + RUN_SHARDS,
        )  # fmt: skip


def _check(shards: list[ShardFolder], opened: list[Results]) -> None:
    """Each shard once, each round once and where the plan puts it."""
    plan = shards[0].experiment.plan
    seen_k: dict[int, Path] = {}
    seen_g: dict[str, Path] = {}
    seen_r: dict[int, Path] = {}
    for s, results in zip(shards, opened, strict=True):
        if s.k in seen_k or s.group in seen_g:
            twice = f"shard {s.k}" if s.k in seen_k else f"group {s.group}"
            held = seen_k.get(s.k) or seen_g[s.group]
            raise PgsweepError(f"{twice} is given twice: {held} and {s.folder}",
                               where=str(s.folder),
                               fix="name each shard's folder once")  # fmt: skip
        overlap = [r for r in s.rounds if r in seen_r]
        if overlap:
            raise PgsweepError(
                f"{s.folder} and {seen_r[overlap[0]]} both hold round(s) {round_spans(overlap)}",
                where=str(s.folder), fix="merge each round from one shard only",
            )  # fmt: skip
        given = shard_rounds(int(plan["rounds"]), s.n)[s.k - 1] if s.k <= s.n else []
        stray = sorted({t.round for t in results.trials()} - set(given))
        if s.rounds != given or stray:
            bad = round_spans(stray) if stray else round_spans(s.rounds)
            raise PgsweepError(
                f"{s.folder} holds round(s) {bad}, which the plan does not give shard "
                f"{s.k}/{s.n} (rounds {round_spans(given)}): it was changed or is no shard",
                where=str(s.folder), fix=RUN_SHARDS,
            )  # fmt: skip
        seen_k[s.k], seen_g[s.group] = s.folder, s.folder
        seen_r |= dict.fromkeys(s.rounds, s.folder)


def _new_folder(out: Path) -> tuple[Path, bool]:
    """A new folder (or an empty one in a safe place), private: resolved once, in a place
    no other user can change (safefs.trusted_target), as `run` makes its own. Returns it
    and whether it was made here."""
    out = safefs.trusted_target(out, "the merged results folder")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise PgsweepError(f"{out} exists and is not an empty folder", where=str(out),
                           fix="choose a new --results folder for the merge")  # fmt: skip
    if out.exists():
        return out, False
    out.parent.mkdir(parents=True, exist_ok=True)
    return safefs.private_dir(out), True


def _write(shards: list[ShardFolder], opened: list[Results], out: Path) -> int:
    first = shards[0].experiment
    plan_json = json.dumps(first.plan, indent=1, sort_keys=True)  # as Plan.to_json wrote it
    safefs.write_file(out / "experiment.toml", first.file_text)
    safefs.write_file(out / "plan.json", plan_json)
    os.close(os.open(out / "results.db", os.O_WRONLY | os.O_CREAT | os.O_EXCL
                     | safefs.NOFOLLOW, 0o600))  # fmt: skip
    store = Store(out / "results.db")
    try:
        fp = json.loads(first.fingerprint)
        fp.pop("shard", None)  # the fleet's, not one shard's
        row = {"name": first.name, "file_text": first.file_text,
               "fingerprint": json.dumps(fp, sort_keys=True), "seed": first.seed,
               "plan_json": plan_json,
               "created_at": min(s.created_at for s in shards),
               "pgsweep_version": first.pgsweep_version,
               "postgres_version": first.postgres_version}  # fmt: skip
        store.write_experiment(row, [(c.id, c.label, json.dumps(c.levels), c.group)
                                     for c in opened[0].configurations()])  # fmt: skip
        trials = 0
        for s, results in zip(shards, opened, strict=True):
            trials += _copy(s, results, store)
        groups = sorted(shards, key=lambda s: s.k)
        store.save_environment("fleet", {
            "shards": str(shards[0].n), "groups": ", ".join(s.group for s in groups),
            "rounds": round_spans([r for s in shards for r in s.rounds]),
            **{f"group.{s.group}": f"shard {s.k}, rounds {round_spans(s.rounds)}, from "
               f"{s.folder}" for s in groups},
        })  # fmt: skip
    finally:
        store.close()
    return trials


def _copy(s: ShardFolder, results: Results, store: Store) -> int:
    """One shard's rows, in one transaction; its group on every trial, its machine's
    facts and cluster names suffixed with the group."""
    db = store.db
    db.execute("BEGIN IMMEDIATE")
    try:
        n = 0
        for table in COPIED_TABLES:
            cols, rows = results.table_rows(table)
            if table == "trial":
                rows = [_trial_row(cols, r, s) for r in rows]
                n = len(rows)
            elif table == "environment":
                rows = [(f"{r[0]}@{s.group}", *r[1:]) for r in rows if r[0] != "fleet"]
            elif table == "load_counter":
                rows = [(f"{r[0]}@{s.group}", *r[1:]) for r in rows]
            if rows:
                marks = ", ".join("?" * len(cols))
                db.executemany(f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({marks})", rows)
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise
    return n


def _trial_row(cols: list[str], row: tuple[Any, ...], s: ShardFolder) -> tuple[Any, ...]:
    values = dict(zip(cols, row, strict=True))
    values["host_group"], values["shard"] = s.group, s.k
    effective = json.loads(values["effective_json"])
    if "cluster.name" in effective:  # matches the load counters, suffixed alike
        effective["cluster.name"] = f"{effective['cluster.name']}@{s.group}"
        values["effective_json"] = json.dumps(effective, sort_keys=True)
    return tuple(values[c] for c in cols)
