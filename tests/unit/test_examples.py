"""Every file in examples/ is a valid experiment on this machine: `pgsweep plan` accepts
it (the same validation and read-only machine checks `run` makes) and prints its plan."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conftest import ROOT, pgsweep, requires_pg

EXAMPLES = sorted((ROOT / "examples").glob("*.toml"))


@requires_pg
@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_plans(path: Path) -> None:
    text = path.read_text()
    if os.geteuid() != 0 and any(k in text for k in ("[storage]", "[os]", "storage.", "os.")):
        pytest.skip("this example changes the machine: it needs root")
    res = pgsweep("plan", str(path))
    assert res.returncode == 0, res.stderr
    assert "estimated duration:" in res.stdout and "run order:" in res.stdout
