#!/usr/bin/env bash
# Set up pgsweep and run the quickstart experiment (examples/quickstart.toml) through to its
# summary: 4 configurations x 3 rounds of tpcb-like, about 4 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/pgsweep run examples/quickstart.toml "$@"
