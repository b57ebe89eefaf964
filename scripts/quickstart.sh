#!/usr/bin/env bash
# Set up pgsweep and run the quickstart experiment (examples/quickstart.toml) through to its
# report: 4 configurations x 3 rounds of tpcb-like, about 4 minutes on 2 cores. The report
# is printed, and written as results/quickstart-TIME/report.html and report.md.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
results="results/quickstart-$(date +%Y%m%d-%H%M%S)"
status=0
.venv/bin/pgsweep run examples/quickstart.toml --results "$results" || status=$?
if [ -f "$results/results.db" ] && [ "$status" -ne 2 ]; then
    .venv/bin/pgsweep report "$results"
    .venv/bin/pgsweep report "$results" --format html -o "$results/report.html"
    .venv/bin/pgsweep report "$results" --format markdown -o "$results/report.md"
fi
exit "$status"
