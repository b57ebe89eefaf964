"""The experiment file's JSON Schema (`pgsweep schema`) and its generated reference
(docs/reference.md): made from the models that validate the file, so they cannot drift.
The committed files must be what the command prints; every key of every model has words
and an example, and every example passes the model; the schema accepts every file in
examples/ (which `pgsweep plan` accepts: test_examples.py) and rejects bad files of the
corpus the loader rejects (test_bad_experiments.py)."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from pydantic import ValidationError

from conftest import DATA, ROOT
from pgsweep import cli, spec
from pgsweep.layers import all_layers
from pgsweep.spec import keydocs, reference, schema

EXAMPLES = sorted((ROOT / "examples").glob("*.toml"))
# bad files of the corpus the schema alone can tell are bad: one or more per table
SCHEMA_CATCHES = (
    "unknown-table", "unknown-layer", "unknown-key", "missing-name", "negative-seed",
    "wrong-type", "levels-not-a-list", "empty-levels", "duplicate-level", "key-no-layer-owns",
    "build-unknown-key", "build-blocksize-3", "build-optimize-4", "build-pgbench-factor",
    "build-allow-cassert-factor", "sector-size-1024", "storage-unknown-filesystem",
    "zfs-fuse-has-no-lz4", "zfs-fuse-has-no-sync", "scale-zero", "size-form", "jobs-zero",
    "bad-duration", "bad-protocol", "rate-zero", "latency-log-out-of-range",
    "huge-pages-unknown-size", "read-ahead-negative", "os-sysctl-factor-swappiness-float",
    "replication-standbys-too-many", "replication-mode-unknown", "replication-delay",
    "replication-bad-sync-standbys", "replication-unknown-standby-setting",
    "rounds-too-many", "auto-rounds-as-text", "auto-precision-bad", "bad-rebuild",
    "report-unknown-key", "report-alpha-too-high", "margin-not-a-percentage",
)  # fmt: skip


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft7Validator:
    s = schema.json_schema()
    jsonschema.Draft7Validator.check_schema(s)  # a valid draft-07 schema
    return jsonschema.Draft7Validator(s)


def _doc(path: Path) -> dict[str, Any]:
    return tomllib.loads(path.read_text())


def test_committed_reference_and_schema_are_what_the_command_prints(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Regenerate with `pgsweep schema --markdown > docs/reference.md` and
    `pgsweep schema > docs/experiment.schema.json`."""
    assert cli.main(["schema", "--markdown"]) == 0
    assert capsys.readouterr().out == (ROOT / "docs" / "reference.md").read_text()
    assert cli.main(["schema"]) == 0
    out = capsys.readouterr().out
    assert json.loads(out) == schema.json_schema()
    assert out == (ROOT / "docs" / "experiment.schema.json").read_text()


def test_every_model_key_has_words_and_a_valid_example() -> None:
    documented = set(keydocs.KEYS)
    modelled = {f"{t.name}.{k}" for t in schema.TABLE_ORDER if t.model is not None
                for k in t.model.model_fields}  # fmt: skip
    assert documented == modelled  # a key added to a model without words fails here
    assert set(keydocs.TABLES) == {t.name for t in schema.TABLE_ORDER} | {"factors", "os.sysctl"}
    assert {t.name.split(".")[0] for t in schema.TABLE_ORDER} | {"factors"} == {
        *spec.FIXED_TABLES, *(layer.name for layer in all_layers()), *spec.PLACES}  # every table
    for t in schema.TABLE_ORDER:
        if t.model is None:
            continue
        required = {k: "x" for k, f in t.model.model_fields.items() if f.is_required()}
        for key in t.model.model_fields:
            what, example, _ = keydocs.KEYS[f"{t.name}.{key}"]
            if what.startswith("Refused"):
                continue  # the layer or the model refuses every value
            try:
                t.model.model_validate({**required, key: example})
            except ValidationError as exc:
                raise AssertionError(f"{t.name}.{key} = {example!r}: {exc}") from None


def test_reference_states_type_default_cost_and_example_of_every_key() -> None:
    text = reference.markdown()
    assert "- **`clients`**: integer, at least 1 and at most 10,000; default `1`." in text
    assert "Example: `clients = 8`" in text
    assert "A change of any of these keys costs nothing: the next trial runs with it." in text
    assert "- **`huge_pages`**: one of \"off\", \"2MB\", \"1GB\"; unset by default; a change " \
        "costs a server restart and a huge page reservation." in text
    assert "- **`mode`**: one of \"async\", \"sync\"; default `\"async\"`; a change costs a " \
        "reload (SIGHUP)." in text
    assert "- **`pgbench`**: one of \"shared\", \"own\"; default `\"shared\"`; not a factor." \
        in text
    for name in keydocs.KEYS:  # every key has its line, under its table's heading
        table, _, key = name.rpartition(".")
        section = text.split(f"\n## `[{table}]`\n", 1)[1].split("\n## ", 1)[0]
        assert f"- **`{key}`**" in section, name


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_schema_accepts_every_example(validator: jsonschema.Draft7Validator,
                                      path: Path) -> None:  # fmt: skip
    errors = [e.message for e in validator.iter_errors(_doc(path))]
    assert errors == []


def test_schema_accepts_every_keys_example_as_a_value_and_as_levels(
    validator: jsonschema.Draft7Validator,
) -> None:
    for name, (what, example, _) in keydocs.KEYS.items():
        if what.startswith("Refused"):
            continue
        *tables, key = name.replace(".NAME.", ".db2.").split(".")
        doc: dict[str, Any] = {"experiment": {"name": "x"}}
        node = doc
        for t in tables:
            node = node.setdefault(t, {})
        node[key] = example
        if tables[0] == "hosts":
            node.setdefault("ssh", "root@db2")  # required
        assert list(validator.iter_errors(doc)) == [], name
        if tables[0] == "experiment" or \
                tables[0] in ("postgres", "repeat", "report", "hosts", "roles") or key in (
                    "allow_cassert",
                                                                          "pgbench", "sysctl"):
            continue  # not factors
        levels: dict[str, Any] = {"experiment": {"name": "x"}, "factors": {}}
        node = levels["factors"]
        for t in tables:
            node = node.setdefault(t, {})
        node[key] = [example]
        assert list(validator.iter_errors(levels)) == [], f"factors.{name}"


@pytest.mark.parametrize("name", SCHEMA_CATCHES)
def test_schema_rejects_bad_files_the_loader_rejects(validator: jsonschema.Draft7Validator,
                                                     name: str) -> None:  # fmt: skip
    assert list(validator.iter_errors(_doc(DATA / "bad" / f"{name}.toml"))) != []


def test_schema_keeps_server_open_and_refuses_what_no_layer_owns(
    validator: jsonschema.Draft7Validator,
) -> None:
    good = {"experiment": {"name": "x"}, "server": {"any_setting_at_all": "on", "x.y": 3},
            "hosts": {"loadgen": {"ssh": "root@10.0.0.2"}}, "roles": {"client": "loadgen"},
            "factors": {"server": {"work_mem": ["4MB", "64MB"]},
                        "os": {"sysctl": {"vm.swappiness": [1, 60]}},
                        "storage": {"zfs": {"recordsize": ["8K", "128K"]}}}}  # fmt: skip
    assert list(validator.iter_errors(good)) == []
    for bad in ({"factors": {"workload": {"clients": 4}}},  # levels are a list
                {"factors": {"workload": {"clients": ["4"]}}},  # of the key's type
                {"factors": {"server": {"work_mem": []}}},  # not empty
                {"workload": {"duration": "30 parsecs"}},
                {"os": {"memory_limit": "lots"}},
                {"replication": {"standby": {"shared_buffers": "1GB"}}},
                {"hosts": {"local": {"ssh": "root@10.0.0.2"}}},  # "local" is pgsweep's own
                {"hosts": {"db2": {"identity_file": "/root/.ssh/id"}}},  # ssh is required
                {"roles": {"pgbench": "db2"}}):
        doc = {"experiment": {"name": "x"}, **bad}
        assert list(validator.iter_errors(doc)) != [], bad
