"""The experiment file described by the models that validate it: a JSON Schema for TOML
editors (`pgsweep schema`: taplo and Even Better TOML complete and check keys with it) and
the Markdown reference (`pgsweep schema --markdown`, committed as docs/reference.md; a test
fails when they differ). Types, defaults and ranges come from the pydantic tables
(spec/tables.py and each layer's); the words and examples from spec/keydocs.py; what a
change costs from each layer's `cost`. [server] is an open map (PostgreSQL's own catalog
checks it), and [factors] mirrors the layer tables with lists of each key's type."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from .. import units
from ..core import Cost
from ..layers import all_layers
from ..layers.build import BASE_ONLY, BuildTable
from ..layers.cluster import ClusterTable
from ..layers.os_tables import OsTable
from ..layers.replication import STANDBY_SETTINGS, ReplicationTable
from ..layers.storage_tables import StorageTable, WalTable, ZfsTable
from ..layers.workload import WorkloadTable
from ..postgres import sysbench
from .hosts import LOCAL, NAME, HostTable, RolesTable
from .keydocs import KEYS, TABLES
from .tables import FIXED_TABLES

# the loader's own patterns (units.py) for a size, a share of RAM and a duration
SIZE = units.SIZE_PATTERN
SHARE = r"^\s*(\d+(?:\.\d+)?)\s*%\s*[Oo][Ff]\s+[Rr][Aa][Mm]\s*$"
DURATION = units.DURATION_PATTERN
SCALAR = {"type": ["string", "number", "boolean"]}  # a postgresql.conf value in TOML
# Limits the models' validators enforce, restated for editors where JSON Schema can say
# them (the loader stays the judge: tests/unit/test_schema.py checks the two agree).
# fmt: off
EXTRA: dict[str, dict[str, Any]] = {
    "build.wal_blocksize": {"enum": [1, 2, 4, 8, 16, 32, 64]},
    "build.blocksize": {"enum": [1, 2, 4, 8, 16, 32]},
    "build.segsize": {"enum": [1, 2, 4, 8, 16, 32, 64]},
    "build.optimize": {"enum": ["0", "1", "2", "3", "s", "g"]},
    "storage.zfs.compression": {"enum": ["on", "off", "lzjb", "gzip", "zle",
                                         *(f"gzip-{n}" for n in range(1, 10))]},
    "storage.zfs.sync": {"not": {}},
    "replication.delay": {"not": {}},
    "replication.sync_standbys": {"pattern": r"^\s*([Ff][Ii][Rr][Ss][Tt]|[Aa][Nn][Yy])\s+"
                                             r"0*[1-9][0-9]*\s*$"},
    "repeat.rounds": {"anyOf": [{"type": "integer", "minimum": 1, "maximum": 10000},
                                {"const": "auto"}]},
    "repeat.rebuild": {"anyOf": [{"type": "integer", "minimum": 1, "maximum": 10000},
                                 {"enum": ["auto", "per_round", "once"]}]},
    "repeat.precision": {"pattern": r"^\d+(\.\d+)?%$"},
    "repeat.interest": {"pattern": r"^\d+(\.\d+)?%$"},
    "cluster.size": {"pattern": f"{SIZE}|{SHARE}"},
    "os.memory_limit": {"pattern": SIZE},
    "storage.zfs.arc_max": {"pattern": SIZE},
    "storage.zfs.recordsize": {"pattern": SIZE},
    **{key: {"pattern": DURATION} for key in ("workload.duration", "workload.warmup",
                                               "workload.latency_limit", "replication.max_lag",
                                               "repeat.budget")},
    "workload.test": {"enum": list(sysbench.TESTS)},
    "workload.latency_log": {"anyOf": [{"enum": ["auto", "off"]},
                                       {"type": "number", "exclusiveMinimum": 0,
                                        "maximum": 1}]},
}
# fmt: on
COST_WORDS = {
    Cost.NOTHING: "nothing: the next trial runs with it",
    Cost.RELOAD: "a reload (SIGHUP)",
    Cost.RESTART: "a server restart",
    Cost.RESERVE: "a server restart and a huge page reservation",
    Cost.CLUSTER: "a new cluster (initdb and load): a whole-plot factor, replicated",
    Cost.BUILD: "a PostgreSQL build (compiled once, cached), then new clusters: a whole-plot "
    "factor",
}

LAYER_WORDS = {
    ("replication", Cost.RESTART): "a new set of standbys (a base backup and a start, priced "
    "as a restart)",
    ("storage", Cost.CLUSTER): "a new filesystem and cluster: a whole-plot factor, replicated",
}


@dataclass(frozen=True)
class Table:
    name: str  # "workload", "storage.zfs", "hosts.NAME" (a table per name the file picks)
    model: type[BaseModel] | None  # None: an open map or a closed list of settings
    layer: str | None  # the layer whose levels these are (None: not a factor)

    @property
    def named(self) -> bool:
        """[hosts.NAME]: one such table per name."""
        return self.name.endswith(".NAME")


TABLE_ORDER = (
    Table("experiment", FIXED_TABLES["experiment"], None),
    Table("postgres", FIXED_TABLES["postgres"], None),
    Table("build", BuildTable, "build"),
    Table("storage", StorageTable, "storage"),
    Table("storage.wal", WalTable, "storage"),
    Table("storage.zfs", ZfsTable, "storage"),
    Table("cluster", ClusterTable, "cluster"),
    Table("server", None, "server"),
    Table("workload", WorkloadTable, "workload"),
    Table("os", OsTable, "os"),
    Table("replication", ReplicationTable, "replication"),
    Table("replication.standby", None, "replication"),
    Table("repeat", FIXED_TABLES["repeat"], None),
    Table("report", FIXED_TABLES["report"], None),
    Table("hosts.NAME", HostTable, None),
    Table("roles", RolesTable, None),
)


def _clean(node: Any) -> Any:
    """pydantic's schema of one field, as a TOML editor wants it: no titles, no null (TOML
    has none: a key left out takes its default), pydantic's gt/ge/lt/le as JSON Schema."""
    if isinstance(node, list):
        return [_clean(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: _clean(v) for k, v in node.items() if k != "title"}
    for ours, theirs in (("gt", "exclusiveMinimum"), ("ge", "minimum"),
                         ("lt", "exclusiveMaximum"), ("le", "maximum")):  # fmt: skip
        if ours in out:
            out[theirs] = out.pop(ours)
    if "anyOf" in out:
        kinds = [k for k in out["anyOf"] if k != {"type": "null"}]
        if all(set(k) == {"type"} for k in kinds):  # plain types: one "type" list
            types = [k["type"] for k in kinds]
            if "number" in types and "integer" in types:
                types.remove("integer")
            out.pop("anyOf")
            out["type"] = types[0] if len(types) == 1 else types
        elif len(kinds) == 1:
            out.pop("anyOf")
            out = {**kinds[0], **out}
        else:
            out["anyOf"] = kinds
    if out.get("default", 0) is None:
        out.pop("default")
    return out


def key_schema(table: str, key: str, field: dict[str, Any]) -> dict[str, Any]:
    """One key: the model's type and limits, the extra limits, the words and an example."""
    out = _clean(field)
    name = f"{table}.{key}"
    extra = EXTRA.get(name)
    if extra:  # the model's types and defaults, with the validators' limits
        keep = {k: out[k] for k in ("default", "type") if k in out}
        out = ({"default": keep["default"]} if "default" in keep else {}) | (
            {"type": keep["type"]} if "type" in keep and "anyOf" not in extra else {}) | extra
    text, example, _ = KEYS[name]
    return {**out, "description": text, "examples": [example]}


def _table_schema(t: Table) -> dict[str, Any]:
    doc = TABLES[t.name]
    if t.name == "server":
        return {"type": "object", "description": doc, "additionalProperties": SCALAR}
    if t.name == "replication.standby":
        return {"type": "object", "description": doc, "additionalProperties": False,
                "properties": {k: {**SCALAR, "description": f"the standbys' {k}"}
                               for k in STANDBY_SETTINGS}}  # fmt: skip
    assert t.model is not None
    fields = t.model.model_json_schema()["properties"]
    props = {k: key_schema(t.name, k, v) for k, v in fields.items()}
    out: dict[str, Any] = {"type": "object", "description": doc, "additionalProperties": False,
                           "properties": props}  # fmt: skip
    if t.name == "os":
        props["sysctl"]["description"] = TABLES["os.sysctl"]
    required = [k for k, f in t.model.model_fields.items() if f.is_required()]
    if required:
        out["required"] = required
    return out


def _levels(item: dict[str, Any]) -> dict[str, Any]:
    """A factor: a non-empty list of distinct levels, each what the key takes."""
    one = {k: v for k, v in item.items() if k not in ("default", "examples")}
    example = item.get("examples", [None])[0]
    out = {"type": "array", "minItems": 1, "uniqueItems": True, "items": one,
           "description": "Levels to compare. " + str(item.get("description", ""))}  # fmt: skip
    if example is not None and not isinstance(example, dict):
        out["examples"] = [[example]]
    return out


def _factors(tables: dict[str, dict[str, Any]]) -> dict[str, Any]:
    layers: dict[str, Any] = {}
    for t in TABLE_ORDER:
        if t.layer is None:
            continue
        schema = tables[t.name]
        parts = t.name.split(".")
        into = layers.setdefault(t.layer, {"type": "object", "additionalProperties": False,
                                           "properties": {}})  # fmt: skip
        if len(parts) == 2:  # storage.zfs -> factors.storage.zfs.recordsize
            into = into["properties"].setdefault(parts[1], {
                "type": "object", "additionalProperties": False, "properties": {}})
        if t.name == "server":
            into["additionalProperties"] = _levels(SCALAR)
            into["description"] = "levels of any postgresql.conf setting"
            continue
        for key, item in schema["properties"].items():
            if t.name == "build" and key in BASE_ONLY:
                continue  # not a factor
            if key == "sysctl":
                into["properties"][key] = {"type": "object", "additionalProperties": _levels(
                    item["additionalProperties"]), "description": TABLES["os.sysctl"]}
                continue
            into["properties"][key] = _levels(item)
    return {"type": "object", "description": TABLES["factors"], "additionalProperties": False,
            "properties": layers}  # fmt: skip


def json_schema() -> dict[str, Any]:
    """The JSON Schema (draft-07) of an experiment file."""
    tables = {t.name: _table_schema(t) for t in TABLE_ORDER}
    props: dict[str, Any] = {}
    for t in TABLE_ORDER:
        top, _, sub = t.name.partition(".")
        if t.named:  # any name the pattern allows but "local", each such a table
            props[top] = {"type": "object", "description": tables[t.name]["description"],
                          "propertyNames": {"pattern": f"^{NAME.pattern}$",
                                            "not": {"const": LOCAL}},
                          "additionalProperties": copy.deepcopy(tables[t.name])}  # fmt: skip
        elif sub:
            props[top]["properties"][sub] = copy.deepcopy(tables[t.name])
        else:
            props[top] = copy.deepcopy(tables[t.name])
    props["factors"] = _factors(tables)
    return {"$schema": "http://json-schema.org/draft-07/schema#",
            "$id": "https://github.com/pgsweep/pgsweep/docs/experiment.schema.json",
            "title": "pgsweep experiment file",
            "description": "One TOML file: each layer is a table of base values; [factors] "
            "mirrors them with lists of levels. pgsweep validates more than this schema "
            "says (PostgreSQL checks [server]); `pgsweep plan FILE` is the judge.",
            "type": "object", "additionalProperties": False, "required": ["experiment"],
            "properties": props}  # fmt: skip


def costs() -> dict[str, str]:
    """"table.key" -> what changing it between two trials costs, from the layers."""
    layers = {layer.name: layer for layer in all_layers()}
    out: dict[str, str] = {}
    for t in TABLE_ORDER:
        if t.layer is None or t.model is None:
            continue
        prefix = t.name.partition(".")[2]
        for key in t.model.model_fields:
            if t.name == "build" and key in BASE_ONLY:
                out[f"{t.name}.{key}"] = "not a factor"
                continue
            cost = layers[t.layer].cost(f"{prefix}.{key}" if prefix else key)
            out[f"{t.name}.{key}"] = LAYER_WORDS.get((t.layer, cost), COST_WORDS[cost])
    return out
