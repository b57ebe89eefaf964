"""Reading a results folder: typed records instead of SQL, so analysis, the reports, show,
export and compare depend on what a trial is rather than on how the tables are laid out
(the schema can change under them, the reader absorbs it). The connection is read-only: a
report cannot change the results it reports on. Everything per trial comes back in run
order (trial.ord), the order the machine saw the trials in."""

from __future__ import annotations

import gzip
import json
import sqlite3
from dataclasses import dataclass, fields
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar
from urllib.parse import quote

from ..errors import PgsweepError, internal
from ..host import folders
from ..plan import parse_spans
from .db import Store, newer_schema
from .rows import (
    DeviceSecond,
    LatencyBin,
    ProcessCpu,
    Sample,
    Second,
    StandbySecond,
    ToolSecond,
    Wait,
)
from .schema import SCHEMA_VERSION

# The one metric name that does not live in the metric table: pgbench's own summary TPS of
# the trial (trial.tps), which the reports treat as a metric like the derived ones.
TPS = "tps"


@dataclass(frozen=True)
class Experiment:
    name: str
    seed: int
    plan: dict[str, Any]  # Plan.to_json, parsed
    created_at: str
    pgsweep_version: str
    postgres_version: str
    file_text: str  # the experiment file as it was run
    fingerprint: str

    @property
    def factors(self) -> list[str]:
        return [f["name"] for f in self.plan["factors"]]

    @property
    def rounds(self) -> int:
        return int(self.plan["rounds"])


@dataclass(frozen=True)
class Configuration:
    id: str
    label: str
    levels: dict[str, Any]  # factor -> level, in the plan's factor order
    group: int  # cluster group (split-plot order)


@dataclass(frozen=True)
class Trial:
    id: str
    ord: int  # position in the run order
    round: int
    config_id: str
    status: str  # "ok" or "failed"
    reason: str | None
    log_tail: str | None
    started_at: str
    finished_at: str
    warmup_s: int | None
    duration_s: int | None
    tps: float | None
    transactions: int | None
    failed_transactions: int | None
    latency_avg_ms: float | None
    latency_stddev_ms: float | None
    events: tuple[str, ...]  # what preparing the trial did: "restart", "restore", ...
    effective: dict[str, str]  # settings in force that are not at their default
    server_started_at: str | None
    pgbench_argv: tuple[str, ...] | None
    host_group: str | None = None  # the host group that ran it (a shard, a merged fleet)
    shard: int | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass(frozen=True)
class Fact:
    """One recorded fact of the environment. scope: "host", "cluster-N" (the storage under
    a cluster) or a configuration id (its settings not at their default)."""

    scope: str
    name: str
    value: str


R = TypeVar("R", Second, Sample, LatencyBin, StandbySecond, Wait, ProcessCpu, DeviceSecond,
            ToolSecond)


class Results:
    """The results in `folder`, read-only. Raises PgsweepError for a folder without
    results.db or with a schema newer than this pgsweep knows, and for one another user
    could change (host.folders): pgsweep may be root, and writes beside it."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.path = folders.results_folder(folder) / "results.db"
        for suffix in ("", "-journal", "-wal", "-shm"):
            folders.check_file(Path(f"{self.path}{suffix}"), "the results folder's")
        if not self.path.is_file():
            raise PgsweepError(
                f"{folder} holds no results.db",
                where=str(folder),
                fix="name a folder written by `pgsweep run`",
            )
        self._db = _open(self.path)

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> Results:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _rows(self, sql: str, params: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
        return self._db.execute(sql, params).fetchall()

    # ---- the experiment and its design --------------------------------------------------
    def experiment(self) -> Experiment:
        rows = self._rows("SELECT * FROM experiment")
        if not rows:  # the run died between creating the file and writing its plan
            raise PgsweepError(
                f"{self.path} holds no experiment",
                fix="run the experiment again: this folder has no plan and no trials",
            )
        r = rows[0]
        return Experiment(
            r["name"], r["seed"], json.loads(r["plan_json"]), r["created_at"],
            r["pgsweep_version"], r["postgres_version"], r["file_text"], r["fingerprint"],
        )  # fmt: skip

    def configurations(self) -> list[Configuration]:
        """In id order, which is the plan's level order (c01 holds every first level)."""
        return [
            Configuration(r["id"], r["label"], json.loads(r["levels_json"]), r["grp"])
            for r in self._rows("SELECT * FROM configuration ORDER BY id")
        ]

    # ---- trials and their figures ---------------------------------------------------------
    def trials(self, *, ok_only: bool = False) -> list[Trial]:
        where = "WHERE status = 'ok'" if ok_only else ""
        return [_trial(r) for r in self._rows(f"SELECT * FROM trial {where} ORDER BY ord")]

    def metric(self, name: str, *, ok_only: bool = False) -> dict[str, float]:
        """Trial id -> value of metric `name` (TPS: pgbench's summary TPS), for the trials
        that have it."""
        if name == TPS:
            return {t.id: t.tps for t in self.trials(ok_only=ok_only) if t.tps is not None}
        ok = "AND t.status = 'ok'" if ok_only else ""
        rows = self._rows(
            "SELECT m.trial_id, m.value FROM metric m JOIN trial t ON t.id = m.trial_id "
            f"WHERE m.name = ? {ok} ORDER BY t.ord",
            (name,),
        )
        return {r["trial_id"]: r["value"] for r in rows}

    def metric_by_round(self, name: str) -> dict[tuple[str, int], float]:
        """(configuration id, round) -> value of metric `name` in that trial, for every ok
        trial that has it: the shape paired comparisons within rounds need."""
        by_id = {t.id: t for t in self.trials(ok_only=True)}
        return {
            (by_id[tid].config_id, by_id[tid].round): v
            for tid, v in self.metric(name, ok_only=True).items()
        }

    def metrics(self) -> dict[str, dict[str, float]]:
        """Trial id -> metric name -> value: every derived metric (collect.metrics)."""
        return self._per_trial("metric")

    def counters(self) -> dict[str, dict[str, float]]:
        """Trial id -> counter name -> delta over the measured window (disk, host, pg)."""
        return self._per_trial("counter")

    def _per_trial(self, table: str) -> dict[str, dict[str, float]]:
        out: dict[str, dict[str, float]] = {}
        for r in self._rows(
            f"SELECT x.trial_id, x.name, x.value FROM {table} x "
            "JOIN trial t ON t.id = x.trial_id ORDER BY t.ord, x.name"
        ):
            out.setdefault(r["trial_id"], {})[r["name"]] = r["value"]
        return out

    def seconds(self, trial_id: str) -> list[Second]:
        """The trial's per-second rows from its transaction log ([] without a log)."""
        return self._series(Second, "second", "second", trial_id).get(trial_id, [])

    def all_seconds(self) -> dict[str, list[Second]]:
        return self._series(Second, "second", "second")

    def samples(self, trial_id: str) -> list[Sample]:
        """The trial's pgbench progress lines."""
        return self._series(Sample, "sample", "at_s", trial_id).get(trial_id, [])

    def all_samples(self) -> dict[str, list[Sample]]:
        return self._series(Sample, "sample", "at_s")

    def standby_seconds(self) -> dict[str, list[StandbySecond]]:
        """Trial id -> its standbys' seconds, by second then standby ({} without standbys)."""
        return self._series(StandbySecond, "standby_second", "second, x.standby")

    def device_seconds(self) -> dict[str, list[DeviceSecond]]:
        """Trial id -> its devices' seconds (and the "memory" rows), by second then device
        ({} for a folder from before, or a trial whose server had none to read)."""
        return self._series(DeviceSecond, "device_second", "second, x.device")

    def tool_seconds(self) -> dict[str, list[ToolSecond]]:
        """Trial id -> the workload tool's own figures each second, by second then name ({}
        for pgbench and pgreplay trials, and folders from before)."""
        return self._series(ToolSecond, "tool_second", "second, x.name")

    def waits(self) -> dict[str, list[Wait]]:
        """Trial id -> where its sessions waited, by process type, then most sessions first
        ({} for a folder from before explain collection, or a trial without it)."""
        return self._series(Wait, "wait", "backend_type, x.sessions DESC, x.wait_class, "
                            "x.wait_event")  # fmt: skip

    def process_cpu(self) -> dict[str, list[ProcessCpu]]:
        """Trial id -> CPU by process type over its window ({} before explain collection)."""
        return self._series(ProcessCpu, "process_cpu", "process_type")

    def latency_bins(self) -> dict[str, list[LatencyBin]]:
        """Trial id -> the latency histogram from its transaction log, by low_ms."""
        return self._series(LatencyBin, "latency_bin", "low_ms")

    def _series(
        self, kind: type[R], table: str, order: str, trial_id: str | None = None
    ) -> dict[str, list[R]]:
        """Trial id (run order) -> rows of a per-trial table as `kind`; the dataclass
        fields name the columns."""
        cols = ", ".join(f"x.{f.name}" for f in fields(kind))
        where, params = ("WHERE x.trial_id = ?", (trial_id,)) if trial_id else ("", ())
        out: dict[str, list[R]] = {}
        for r in self._rows(
            f"SELECT x.trial_id, {cols} FROM {table} x JOIN trial t ON t.id = x.trial_id "
            f"{where} ORDER BY t.ord, x.{order}",
            params,
        ):
            out.setdefault(r["trial_id"], []).append(kind(*tuple(r)[1:]))
        return out

    # ---- what surrounds the trials -----------------------------------------------------------
    def load_counters(self) -> dict[str, dict[str, float]]:
        """Cluster -> counter name -> value over that cluster's load phase."""
        out: dict[str, dict[str, float]] = {}
        for r in self._rows("SELECT * FROM load_counter ORDER BY cluster, name"):
            out.setdefault(r["cluster"], {})[r["name"]] = r["value"]
        return out

    def environment(self) -> list[Fact]:
        """The host first, then the storage under each cluster, then each configuration's
        settings; by name within a scope."""
        return [
            Fact(r["scope"], r["name"], r["value"])
            for r in self._rows(
                "SELECT scope, name, value FROM environment ORDER BY "
                "scope <> 'host', scope LIKE 'cluster-%' DESC, scope, name"
            )
        ]

    def fleet(self) -> dict[str, str]:
        """What a sharded or merged folder records of its fleet (environment scope "fleet":
        shards, and shard, group, rounds; merged: groups, rounds); {} for one machine."""
        rows = self._rows("SELECT name, value FROM environment WHERE scope = 'fleet'")
        return {r["name"]: r["value"] for r in rows}

    def rounds_here(self) -> list[int]:
        """The rounds this folder is for: all of the plan's, or a shard's (or shards')."""
        spans = self.fleet().get("rounds")
        if spans is None:
            return list(range(1, self.experiment().rounds + 1))
        return parse_spans(spans)

    def group_of_round(self) -> dict[int, str]:
        """Round -> the host group that ran it, in a sharded or merged folder ({} else)."""
        rows = self._rows("SELECT DISTINCT round, host_group FROM trial "
                          "WHERE host_group IS NOT NULL")  # fmt: skip
        return {int(r["round"]): str(r["host_group"]) for r in rows}

    def table_rows(self, table: str) -> tuple[list[str], list[tuple[Any, ...]]]:
        """Every row of one table as stored, with its column names (store.merge copies
        shards through this; nothing that reports reads it)."""
        if table not in COPIED_TABLES:
            raise internal(f"{table} is not a table of trials", fix="report this")
        cur = self._db.execute(f"SELECT * FROM {table}")
        return [d[0] for d in cur.description], [tuple(r) for r in cur.fetchall()]

    def artifact_names(self, trial_id: str) -> list[str]:
        rows = self._rows("SELECT name FROM artifact WHERE trial_id = ? ORDER BY name", (trial_id,))
        return [r["name"] for r in rows]

    def artifact(self, trial_id: str, name: str) -> bytes | None:
        """A raw output of the trial (pgbench.out, server.log, ...), decompressed."""
        rows = self._rows(
            "SELECT gz FROM artifact WHERE trial_id = ? AND name = ?", (trial_id, name)
        )
        return gzip.decompress(rows[0]["gz"]) if rows else None


_PARSED = ("events", "effective", "pgbench_argv")  # stored as JSON text
COPIED_TABLES = ("trial", "sample", "counter", "metric", "second", "latency_bin",
                 "standby_second", "wait", "process_cpu", "device_second", "tool_second",
                 "artifact", "load_counter", "environment")  # fmt: skip


def _trial(r: sqlite3.Row) -> Trial:
    plain = {f.name: r[f.name] for f in fields(Trial) if f.name not in _PARSED}
    argv = r["pgbench_argv"]
    return Trial(
        **plain,
        events=tuple(json.loads(r["events_json"])),
        effective=json.loads(r["effective_json"]),
        pgbench_argv=tuple(json.loads(argv)) if argv is not None else None,
    )


def _connect_ro(path: Path) -> sqlite3.Connection:
    db = sqlite3.connect(f"file:{quote(str(path.absolute()))}?mode=ro", uri=True)
    db.row_factory = sqlite3.Row
    return db


def _open(path: Path) -> sqlite3.Connection:
    """Read-only, once the writer has had its say where it must. A journal left by a run
    killed mid-trial has to be rolled back, which a read-only connection cannot do (it
    fails with "attempt to write a readonly database"); an older schema is migrated, as
    opening a folder always did, so old folders keep their reports."""
    try:
        if Path(f"{path}-journal").exists():
            Store(path).close()  # rolls back a hot journal (and migrates)
        db = _connect_ro(path)
        version = db.execute("PRAGMA user_version").fetchone()[0]
        if version < SCHEMA_VERSION:
            db.close()
            Store(path).close()
            db = _connect_ro(path)
    except sqlite3.DatabaseError as exc:
        raise internal(
            f"{path} could not be read as a results database: {exc}",
            fix="name a folder written by `pgsweep run`",
        ) from exc
    if version > SCHEMA_VERSION:
        db.close()
        raise newer_schema(path, version)
    return db
