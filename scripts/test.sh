#!/usr/bin/env bash
# Run pgsweep's whole test suite (real PostgreSQL clusters, real pgbench), plus ruff and mypy.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --dev
.venv/bin/ruff check .
.venv/bin/mypy
exec .venv/bin/pytest -q -p no:cacheprovider "$@"
