"""Import what pgsweep's commands load, once, so that Python writes their .pyc files
(scripts/setup.sh, scripts/test.sh): pip's and uv's --no-compile installs leave numpy,
scipy and matplotlib uncompiled, and where the environment says PYTHONDONTWRITEBYTECODE
every process would compile them again. Run it without that variable set.

usage: .venv/bin/python scripts/warm.py [--dev]     (--dev: pytest's too)"""

import importlib
import importlib.util
import sys

MODULES = ["pgsweep.cli", "pgsweep.analysis", "pgsweep.outputs.html", "pgsweep.outputs.export",
           "pgsweep.engine.run", "pgsweep.collect.txlog", "pgsweep.engine.against",
           "pgsweep.analysis.trial_length"]  # fmt: skip

for name in MODULES + (["pytest"] if "--dev" in sys.argv[1:] else []):
    importlib.import_module(name)
# pyarrow loads pandas, when it is installed, for an export (3 s of compiling otherwise)
if importlib.util.find_spec("pandas"):
    importlib.import_module("pandas")
