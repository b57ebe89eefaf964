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
      tests/unit/test_units.py tests/unit/test_report_builds.py tests/unit/test_recorded.py
      tests/unit/test_design.py)
# real runs of mechanics the side lane takes after the build: none looks for other runs'
# servers, and no module of the main lane that does runs before the side lane is done
side_real=(tests/integration/test_build.py tests/integration/test_measure.py)
# alone: compare the whole machine before and after; run last, when nothing else runs
alone=(tests/unit/test_bad_experiments.py tests/integration/test_server_levels.py)
log=$(mktemp)
# Beside the main pytest, at the lowest CPU priority, one after the other: the suite's one
# PostgreSQL build (tests/prebuild.py, about 2 minutes of compiling, on tmpfs), the real
# runs in side_real, then mypy and the pure tests.
(
    side=0
    nice -n 19 .venv/bin/python tests/prebuild.py || side=1
    nice -n 19 .venv/bin/pytest -q -p no:cacheprovider "${side_real[@]}" || side=1
    nice -n 19 .venv/bin/mypy || side=1
    nice -n 19 .venv/bin/pytest -q -p no:cacheprovider "${pure[@]}" || side=1
    exit "$side"
) >"$log" 2>&1 &
pure_pid=$!
# set -e holds inside the trap too: every command in it must succeed or the suite's exit
# status becomes the trap's. The suite's build cache goes with the suite.
trap 'pkill -P "$pure_pid" 2>/dev/null || true; kill "$pure_pid" 2>/dev/null || true; rm -f "$log"
      [ -n "${PGSWEEP_KEEP_SUITE_BUILD:-}" ] || rm -rf /dev/shm/pgsweep-suite' EXIT
status=0
# the rest on both cores: modules that share a machine-wide thing in one group (conftest)
.venv/bin/pytest -q -p no:cacheprovider -n 2 --dist loadgroup "${pure[@]/#/--ignore=}" \
    "${side_real[@]/#/--ignore=}" "${alone[@]/#/--ignore=}" tests || status=$?
pure_status=0
wait "$pure_pid" || pure_status=$?
# last, with nothing else running: the modules that compare the whole machine
.venv/bin/pytest -q -p no:cacheprovider "${alone[@]}" || status=$?
echo "--- the suite's build and its tests, mypy and the pure unit tests (run beside the rest) ---"
cat "$log"
[ "$status" -ne 0 ] && exit "$status"
exit "$pure_status"
