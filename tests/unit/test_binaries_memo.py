"""binaries.inspect remembers what an installation said (its version and catalog) while its
postgres binary is the same file: asked again, nothing runs; a binary replaced (a new
file) is asked afresh; and what a caller gets is its own copy. The "installation" here is
a script that counts how often it runs and answers as postgres does."""

from __future__ import annotations

import os
from pathlib import Path

from pgsweep.postgres import binaries

SCRIPT = """#!/bin/sh
echo run >> {count}
case "$1" in
  --version) echo "postgres (PostgreSQL) {version}" ;;
  --describe-config) printf '{row}\\n' ;;
esac
"""


ROW = "\\t".join(["work_mem", "user", "Resource Usage", "INTEGER", "4096", "64", "2147483647",
                  "Sets", "long"])  # fmt: skip


def _install(bindir: Path, count: Path, version: str) -> None:
    new = bindir / "postgres.new"
    new.write_text(SCRIPT.format(count=count, version=version, row=ROW))
    new.chmod(0o755)
    os.replace(new, bindir / "postgres")  # a new file, as a package upgrade leaves it


def test_an_installation_is_asked_once_while_its_binary_is_the_same_file(tmp_path: Path) -> None:
    bindir, count, scratch = tmp_path / "bin", tmp_path / "count", tmp_path / "scratch"
    bindir.mkdir()
    scratch.mkdir()
    _install(bindir, count, "15.18")
    first = binaries.inspect(bindir, scratch)
    assert first.version == "15.18" and "work_mem" in first.settings
    runs = len(count.read_text().splitlines())
    assert runs == 2  # --version, --describe-config
    again = binaries.inspect(bindir, scratch)
    assert len(count.read_text().splitlines()) == runs  # answered from memory
    assert again == first and again is not first and again.settings is not first.settings
    again.settings.clear()  # a caller's copy: what the next one gets is whole
    assert "work_mem" in binaries.inspect(bindir, scratch).settings
    _install(bindir, count, "15.19")  # replaced: asked afresh
    assert binaries.inspect(bindir, scratch).version == "15.19"
    assert len(count.read_text().splitlines()) == runs + 2
