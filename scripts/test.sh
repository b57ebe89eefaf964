#!/usr/bin/env bash
# Run pgsweep's whole test suite (real PostgreSQL clusters, real pgbench), plus ruff and mypy.
# With arguments, they go to one pytest run as they are (e.g. scripts/test.sh tests/unit -x).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --dev
.venv/bin/ruff check .
if [ $# -gt 0 ]; then
    .venv/bin/mypy
    exec .venv/bin/pytest -q -p no:cacheprovider "$@"
fi

# The unit tests that touch nothing outside their own memory (planner, parsers, statistics
# and their simulations) run beside the rest, at the lowest CPU priority: the suite's time
# is the real runs', and these make no file, process or mount the others compare before
# and after.
pure=(tests/unit/test_adaptive.py tests/unit/test_trial_length.py tests/unit/test_engine.py
      tests/unit/test_metrics.py tests/unit/test_pgbench_parse.py tests/unit/test_plan.py
      tests/unit/test_simulations.py tests/unit/test_statmodel.py tests/unit/test_txlog.py
      tests/unit/test_units.py tests/unit/test_report_builds.py)
log=$(mktemp)
# The suite's one PostgreSQL build (tests/prebuild.py, about 2.5 minutes of compiling) is
# made beside the real runs too, first; the tests that use it run last (conftest), so it is
# ready by then. Then mypy (15 s cold) and the pure tests, one after the other.
(nice -n 19 .venv/bin/python tests/prebuild.py && nice -n 19 .venv/bin/mypy \
    && nice -n 19 .venv/bin/pytest -q -p no:cacheprovider "${pure[@]}") >"$log" 2>&1 &
pure_pid=$!
# set -e holds inside the trap too: every command in it must succeed or the suite's exit
# status becomes the trap's. The suite's build cache goes with the suite.
trap 'pkill -P "$pure_pid" 2>/dev/null || true; kill "$pure_pid" 2>/dev/null || true; rm -f "$log"
      [ -n "${PGSWEEP_KEEP_SUITE_BUILD:-}" ] || rm -rf /var/cache/pgsweep-suite' EXIT
status=0
.venv/bin/pytest -q -p no:cacheprovider "${pure[@]/#/--ignore=}" tests || status=$?
pure_status=0
wait "$pure_pid" || pure_status=$?
echo "--- the suite's build, mypy and the pure unit tests (run beside the rest) ---"
cat "$log"
[ "$status" -ne 0 ] && exit "$status"
exit "$pure_status"
