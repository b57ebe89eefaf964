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

# Three lanes run at once, each one pytest after the other in it; then the machine lane
# with the pure lane beside it. Which module goes where is about what it shares with the
# machine:
# - build: the suite's one PostgreSQL build (tests/prebuild.py, about 2 minutes of
#   compiling, on tmpfs) at a lower CPU priority (nice 10: not 19, which starved it and the
#   real runs after it when another process loaded the CPU), then the real runs that need
#   it at normal priority (a niced server is a slow one: a run timed out that way), and
#   test_explain (its run is long, and the build lane has room once the compile is done);
# - network: the modules that make namespaces, veth links and TCP listeners, and the
#   engine's real runs; the modules that make filesystems on loop devices too (test_storage
#   counts every pgsweep mount, loop device and zfs-fuse: test_engine_real's are here, one
#   after the other, and no other lane makes any), and test_examples (plan refuses a ZFS
#   experiment while a zfs-fuse pgsweep did not start runs: test_storage's); and, to even
#   the lanes' lengths, shards, sysbench and pgreplay (their leftovers are tagged);
# - rest (every module not named here): runs whose leftovers are told apart by their
#   results folder's tag (conftest.leftovers), so they never look at another run's;
# - machine, after those three: modules that change kernel values, huge page pools,
#   mounts, loop devices or cgroups, or compare every server, process, shared memory
#   segment and folder on the machine before and after (another lane's server would be one
#   of them; a reserved huge page pool would be taken by another lane's server);
# - pure, beside the machine lane at the lowest CPU priority: mypy, then unit tests that
#   touch nothing outside their own memory (planner, parsers, statistics, simulations).
pure=(tests/unit/test_adaptive.py tests/unit/test_trial_length.py tests/unit/test_engine.py
      tests/unit/test_metrics.py tests/unit/test_pgbench_parse.py tests/unit/test_plan.py
      tests/unit/test_simulations.py tests/unit/test_statmodel.py tests/unit/test_txlog.py
      tests/unit/test_units.py tests/unit/test_report_builds.py tests/unit/test_recorded.py
      tests/unit/test_design.py tests/unit/test_sysbench_parse.py tests/unit/test_shards.py
      tests/unit/test_fleet_verdicts.py tests/unit/test_pgreplay_parse.py
      tests/unit/test_workload_line.py tests/unit/test_explain.py)
side_real=(tests/integration/test_build.py tests/integration/test_measure.py
           tests/integration/test_explain.py)
network=(tests/integration/test_replication.py tests/integration/test_hosts.py
         tests/integration/test_fleet_hosts.py
         tests/integration/test_replicated_real.py tests/integration/test_engine_real.py
         tests/integration/test_storage.py tests/integration/test_counters.py
         tests/unit/test_examples.py tests/integration/test_adaptive_real.py
         tests/integration/test_fleet.py tests/integration/test_sysbench.py
         tests/integration/test_pgreplay.py)
machine=(tests/integration/test_os.py tests/integration/test_hugepages.py
         tests/unit/test_doctor.py tests/unit/test_sysctl_ranges.py
         tests/integration/test_nonroot.py tests/integration/test_safety.py
         tests/unit/test_bad_experiments.py
         tests/integration/test_server_levels.py tests/integration/test_plan_commands.py)
pytest=(.venv/bin/pytest -q -p no:cacheprovider)
logs=$(mktemp -d)
lanes=()
# set -e holds inside the trap too: every command in it must succeed or the suite's exit
# status becomes the trap's. The suite's build cache goes with the suite.
trap 'for p in "${lanes[@]}"; do pkill -P "$p" 2>/dev/null || true
      kill "$p" 2>/dev/null || true; done; rm -rf "$logs"
      [ -n "${PGSWEEP_KEEP_SUITE_BUILD:-}" ] || rm -rf /dev/shm/pgsweep-suite' EXIT
(
    side=0
    nice -n 10 .venv/bin/python tests/prebuild.py || side=1
    "${pytest[@]}" "${side_real[@]}" || side=1
    exit "$side"
) >"$logs/build" 2>&1 &
build_pid=$!
"${pytest[@]}" "${network[@]}" >"$logs/network" 2>&1 &
network_pid=$!
lanes=("$build_pid" "$network_pid")
status=0
skip=("${pure[@]}" "${side_real[@]}" "${network[@]}" "${machine[@]}")
"${pytest[@]}" "${skip[@]/#/--ignore=}" tests || status=$?
wait "$network_pid" || status=1
wait "$build_pid" || status=1
# The pure lane touches nothing outside its own memory: it runs beside the machine lane.
(
    side=0
    nice -n 19 .venv/bin/mypy || side=1
    nice -n 19 "${pytest[@]}" "${pure[@]}" || side=1
    exit "$side"
) >"$logs/pure" 2>&1 &
pure_pid=$!
lanes=("$pure_pid")
"${pytest[@]}" "${machine[@]}" || status=1
wait "$pure_pid" || status=1
for lane in network build pure; do
    echo "--- the $lane lane (run beside the others) ---"
    cat "$logs/$lane"
done
exit "$status"
