#!/usr/bin/env bash
# Run pgsweep's whole test suite (real PostgreSQL clusters, real pgbench), plus ruff and mypy.
# With arguments, they go to one pytest run as they are (e.g. scripts/test.sh tests/unit -x).
set -euo pipefail
cd "$(dirname "$0")/.."
# The suite keeps caches between runs, each keyed so that a fresh clone (CI's) starts warm;
# `rm -rf` them at will.
if [ "$(id -u)" -eq 0 ]; then
    suite_cache=/var/cache/pgsweep-suite
else
    suite_cache="${XDG_CACHE_HOME:-$HOME/.cache}/pgsweep-suite"
fi
# uv, which setup.sh would install with pip from its lockfile (6 s of its 20, most of
# them pip's start-up: stop 49), kept by the lockfile's hash and handed to it
uv_kept="$suite_cache/uv/$(sha256sum requirements-uv.lock | cut -c1-16)"
PGSWEEP_UV="$uv_kept/uv" scripts/setup.sh --dev
if [ ! -x "$uv_kept/uv" ] && [ -x .venv/bin/uv ]; then
    mkdir -p "$uv_kept" && cp .venv/bin/uv "$uv_kept/uv.$$" && mv "$uv_kept/uv.$$" "$uv_kept/uv"
fi
# Python writes the .pyc of what it imports (into .venv and src/): where the environment
# says PYTHONDONTWRITEBYTECODE (this machine, and CI), every process of the suite compiled
# every module it imported that setup.sh had not warmed, each time (pandas for an export:
# 3.0 s of CPU instead of 0.9; Ansible's for each play; every agent's and pgsweep's).
unset PYTHONDONTWRITEBYTECODE
# ccache's cache for the suite's PostgreSQL compile is kept between runs (the build cache
# itself is made in tmpfs and removed each time): with ccache installed (setup.sh --dev),
# the first run on a machine compiles in ~285 CPU-s, the next ones in ~45 (stop 39).
export PGSWEEP_CCACHE_DIR="${PGSWEEP_CCACHE_DIR:-$suite_cache/ccache}"
# Two more caches kept there, both keyed by content:
# - mypy's incremental cache (a file whose hash matches its entry is not checked again):
#   a fresh clone's check took 17 CPU-s, 0.8 with another clone's cache (stop 48);
# - numba's compiled txlog kernels (its index is stamped with the source file's sha256,
#   not its path or mtime): compiling them took test_txlog 30 CPU-s of 34 (stop 48).
#   They are numba's in-tree cache (src/pgsweep/collect/__pycache__), copied in here
#   and back out once the suite is done.
export MYPY_CACHE_DIR="$suite_cache/mypy"
numba_cache="$suite_cache/numba"
kernels=src/pgsweep/collect/__pycache__
mkdir -p "$kernels"
cp "$numba_cache"/txlog_kernels.* "$kernels"/ 2>/dev/null || true
.venv/bin/ruff check .
if [ $# -gt 0 ]; then
    .venv/bin/mypy
    exec .venv/bin/pytest -q -p no:cacheprovider "$@"
fi

# Two phases. First the machine lane, with the suite's one PostgreSQL build compiling
# beside it and the pure lane; then six lanes at once (their tests wait a lot: for
# pgbench at a fixed rate, for Ansible, for timeouts; three lanes left a third of the two
# cores idle, and with four the fleet and ssh-host modules, mostly waiting on Ansible and
# SSH, made their lane the longest: ci39, 10m50s). Which module goes where is about
# what it shares with the machine:
# - machine (phase 1): modules that change kernel values, huge page pools, mounts, loop
#   devices or cgroups, or compare every server, process, shared memory segment and
#   pgsweep folder on the machine before and after: no other lane's server may run beside
#   them (it would be one of those, and a reserved huge page pool would be taken by it).
#   A compile is none of those (tests/prebuild.py keeps its scratch off /tmp). Only what
#   counts needs the lane: test_server_levels' runs went to the rest lane, its two plans
#   that count servers and scratch folders to test_start_refusals (phase 1 was 39 s
#   shorter, stop 41);
# - prebuild (from phase 1 on): the build (tests/prebuild.py, about 2 minutes of
#   compiling into tmpfs) at nice 19 and on the last CPU alone (make -j1): at nice 19 on
#   both cores it still slowed the machine lane by 70 s (test_os from 37 s alone to 103 s).
#   Its tests (test_build) run in a lane of their own (build_last) once it is done, at
#   normal priority: at nice 19 under another process's load a run there once timed out;
#   before it waits for the compile, that lane runs test_report and test_replication (the
#   one module making pgsweep namespaces, which it counts with the links on the machine;
#   the others' are sshhosts' own: harness_link): with test_build alone after
#   test_replication it ended three minutes before the others (ci121);
# - pure (from phase 1 on, on the last CPU with the compile): mypy, then unit
#   tests that touch nothing outside their own memory and pytest's tmp_path (planner,
#   parsers, statistics, the tests' CLI fork server): the CPU was half idle
#   in phase 1's last minute (stop 44, /proc/stat every 5 s), while phase 2 is CPU-bound
#   (and in stop 47 this lane still ended about a minute before the machine lane);
# - network (phase 2, its plans from test_safety on): modules that make TCP listeners, and those
#   that make filesystems on loop devices (test_storage counts every pgsweep mount, loop
#   device and zfs-fuse: test_engine_real's and test_counters' are here, one after the
#   other, and no other lane makes any), and first test_examples, beside test_safety
#   (plans only; plan refuses a ZFS experiment while a zfs-fuse pgsweep did not start
#   runs: test_storage's; the lane ended last, 15-25 s after the others: ci43, ci44);
#   test_remote_os, whose simulated host's agent holds the machine's kernel lock, after
#   test_storage (the one module of phase 2 that runs [os] here);
# - pure_sims (from phase 1 on): the statistics' and the adaptive design's simulations, all
#   CPU; as root on any CPU and SCHED_IDLE until phase 2 (see below);
# - build (from test_safety on, beside it): modules whose leftovers are told apart by
#   their results folder's tag (conftest.leftovers), with no TCP listener or loop device;
# - ssh (phase 2) and fleet (from test_safety on, the machine lane's last module):
#   test_hosts, and test_fleet_hosts (sshd in namespaces of
#   their own, each module on a free subnet; their leftovers are their own hosts'
#   namespaces, and test_replication does not count their links: sshhosts.harness_link);
#   after test_hosts, modules told apart by tag (test_against_state, test_lost_baseline,
#   test_readers, test_dump: without pyenv's start-up on every SSH command this lane ended
#   a minute before the others, stop 44);
#   after test_fleet_hosts, test_nonroot (it
#   looks only at what the account "nobody" owns; there the lanes end within a minute of
#   each other), then the builds' recording-host test and the dry run's standbys (plans
#   with scratch servers of their own: the lane that ended first had room);
# - rest (phase 2, every module not named here): runs told apart the same way.
pure_sims=(tests/unit/test_simulations.py tests/unit/test_adaptive.py)
pure=(tests/unit/test_trial_length.py tests/unit/test_engine.py
      tests/unit/test_metrics.py tests/unit/test_pgbench_parse.py tests/unit/test_plan.py
      tests/unit/test_statmodel.py tests/unit/test_txlog.py
      tests/unit/test_units.py tests/unit/test_report_builds.py tests/unit/test_recorded.py
      tests/unit/test_design.py tests/unit/test_sysbench_parse.py tests/unit/test_shards.py
      tests/unit/test_fleet_verdicts.py tests/unit/test_pgreplay_parse.py
      tests/unit/test_workload_line.py tests/unit/test_explain_rows.py
      tests/unit/test_statements.py tests/unit/test_recorded_standbys.py
      tests/unit/test_agent_replies.py tests/unit/test_wait_profile.py
      tests/unit/test_device_series.py tests/unit/test_flamegraph.py
      tests/unit/test_recorded_client_tools.py tests/unit/test_fleet_progress.py
      tests/unit/test_dump_versions.py tests/unit/test_blockio.py
      tests/unit/test_recorded_iolatency.py tests/unit/test_recorded_devices.py
      tests/unit/test_recorded_storage.py tests/unit/test_layout.py
      tests/unit/test_binaries_memo.py tests/unit/test_recorded_server_host.py
      tests/unit/test_buildcopy.py tests/unit/test_fleet_facts_play.py tests/unit/test_cliserver.py
      tests/unit/test_bounded_reads.py
      tests/unit/test_headline.py tests/unit/test_fleet_report.py tests/unit/test_safetext.py
      tests/unit/test_sessions.py tests/unit/test_proc.py tests/unit/test_noise.py
      tests/unit/test_plot_labels.py tests/unit/test_readme.py tests/unit/test_schema.py
      tests/unit/test_standby_lost.py)
machine=(tests/integration/test_hugepages.py
         tests/unit/test_doctor.py tests/unit/test_sysctl_ranges.py
         tests/unit/test_bad_experiments.py
         tests/integration/test_start_refusals.py tests/integration/test_plan_commands.py)
# last in the machine lane, the modules a compile beside them slowed most (test_safety
# 117 s instead of 71 s alone, test_os 103 s instead of 37 s), when it is mostly done:
# test_os, then test_safety with three lanes' first modules beside it (see below)
machine_last=(tests/integration/test_os.py)
machine_shared=(tests/integration/test_safety.py)
network_first=(tests/unit/test_examples.py)
network=(tests/integration/test_engine_real.py
         tests/integration/test_storage.py tests/integration/test_counters.py
         tests/integration/test_remote_os.py)
build_first=(tests/integration/test_report.py tests/integration/test_replication.py)
build_last=(tests/integration/test_build.py)
build=(tests/integration/test_measure.py
       tests/integration/test_explain.py tests/integration/test_adaptive_real.py
       tests/integration/test_fleet.py tests/integration/test_sysbench.py
       tests/integration/test_pgreplay.py tests/integration/test_gate.py)
ssh=(tests/integration/test_hosts.py tests/integration/test_against_state.py
     tests/integration/test_lost_baseline.py tests/integration/test_readers.py
     tests/integration/test_dump.py)
fleet_first=(tests/integration/test_fleet_hosts.py)
fleet=(tests/integration/test_nonroot.py
       tests/unit/test_recorded_builds.py tests/unit/test_dry_standbys.py)
pytest=(.venv/bin/pytest -q -p no:cacheprovider)
logs=$(mktemp -d)
lanes=()
# set -e holds inside the trap too: every command in it must succeed or the suite's exit
# status becomes the trap's. The suite's build cache goes with the suite.
suite_disk=""
suite_loop=""
# the suite's disk goes last: the lanes' processes may hold files on it
trap 'for p in "${lanes[@]}"; do pkill -P "$p" 2>/dev/null || true
      kill "$p" 2>/dev/null || true; done; rm -rf "$logs"
      [ -n "${PGSWEEP_KEEP_SUITE_BUILD:-}" ] || rm -rf /dev/shm/pgsweep-suite
      scripts/suite-disk.sh down "$suite_disk" "$suite_loop" || true' EXIT
# The modules whose work areas must be on a disk (conftest WORK_ON_DISK = True) make them
# on a journaled ext4 of the suite's own, on a loop device over a sparse file in /var/tmp:
# this machine's root filesystem is ext4 without a journal, where each file created cost
# a scan of recently deleted inodes (a cluster's copy: 1.1 CPU-s, 0.07 on the suite's
# disk; test_report and test_readers 84 s -> 67 s alone, stop 42). Root only.
if [ "$(id -u)" -eq 0 ]; then
    suite_disk=$(mktemp -d /var/tmp/suite-disk-XXXXXX)
    suite_loop=$(scripts/suite-disk.sh up "$suite_disk")
    export PGSWEEP_SUITE_DISK="$suite_disk"
fi
status=0
# phase 1: the machine lane, and on the last CPU alone (make -j1 there) the compile and
# the pure lane; both may go on into phase 2 (only test_build needs the compile).
last_cpu=$(($(nproc) - 1))
(
    rc=0
    taskset -c "$last_cpu" nice -n 19 .venv/bin/python tests/prebuild.py || rc=$?
    echo "$rc" >"$logs/prebuild.rc"
) >"$logs/prebuild" 2>&1 &
prebuild_pid=$!
(
    side=0
    # at normal priority: at nice 19 a process at nice 0 on that CPU (a `yes` beside the
    # suite, stop 40) left it 1.5% of the CPU, and the lane never ended
    taskset -c "$last_cpu" .venv/bin/mypy || side=1
    taskset -c "$last_cpu" "${pytest[@]}" "${pure[@]}" || side=1
    exit "$side"
) >"$logs/pure" 2>&1 &
pure_pid=$!
# the statistics' simulations and the adaptive design's (CPU alone, ~90 CPU-s) beside them.
# As root, in phase 1 on any CPU as SCHED_IDLE (chrt --idle: a CPU's time no other process
# wants, the machine lane's waits above all), and as any process from phase 2 on (below):
# at normal priority on any CPU they took test_os from 57 s to 94 s (ci33), and on the
# last CPU only they ran well into phase 2 (stop 49). Not at nice 10: beside two busy
# loops the lane had run 20 minutes when it was stopped (ci128). Without root, on the
# last CPU at normal priority.
if [ "$(id -u)" -eq 0 ]; then
    chrt --idle 0 "${pytest[@]}" "${pure_sims[@]}" >"$logs/pure_sims" 2>&1 &
else
    taskset -c "$last_cpu" "${pytest[@]}" "${pure_sims[@]}" >"$logs/pure_sims" 2>&1 &
fi
pure_sims_pid=$!
lanes=("$prebuild_pid" "$pure_pid" "$pure_sims_pid")
# The machine lane ahead of the others (nice -5, root only): it mostly waits (for servers,
# trials at a fixed rate, kernel values), and phase 1 lasts as long as it does; the pure
# lanes, all CPU, take what it leaves. At equal priority it ended 45 s after them, with
# half the CPU idle meanwhile (stop 44).
ahead=()
[ "$(id -u)" -eq 0 ] && ahead=(nice -n -5)
"${ahead[@]}" "${pytest[@]}" "${machine[@]}" || status=1
"${ahead[@]}" "${pytest[@]}" "${machine_last[@]}" || status=1
# The fleet and build lanes, and the network lane's plans, start beside test_safety, the
# machine lane's last module: it mostly waits (its trials, an attacker's sweeps), and
# with the fleet lane alone beside it one core was half idle for 40 s of its 66 (stop
# 49). Their modules are the
# ones that can share the machine with it: what test_safety watches while it runs is the
# TCP listeners of this network namespace's servers (theirs listen on Unix sockets, or,
# test_fleet_hosts', in the simulated hosts' namespaces) and the loop devices (they make
# none, nor mounts), and what it counts as left behind is its own runs' alone
# (conftest.leftovers). Not beside test_os, which reserves huge pages (a server beside it
# could take them) and counts the postmasters on the machine.
# The fleet and network lanes' other modules wait for the machine lane's end, however long
# test_safety takes.
beside_then_after() {  # the modules of array $1 now, those of array $2 after phase 1
    local -n now=$1 after=$2
    local side=0
    "${pytest[@]}" "${now[@]}" || side=1
    while [ ! -e "$logs/phase1.done" ]; do sleep 1; done
    "${pytest[@]}" "${after[@]}" || side=1
    return "$side"
}
beside_then_after fleet_first fleet >"$logs/fleet" 2>&1 &
fleet_pid=$!
"${pytest[@]}" "${build[@]}" >"$logs/build" 2>&1 &
build_pid=$!
beside_then_after network_first network >"$logs/network" 2>&1 &
network_pid=$!
lanes+=("$fleet_pid" "$build_pid" "$network_pid")
"${ahead[@]}" "${pytest[@]}" "${machine_shared[@]}" || status=1
touch "$logs/phase1.done"
descendants() { local p; for p in $(pgrep -P "$1"); do echo "$p"; descendants "$p"; done; }
# the simulations, if still going, take their share from here on (every thread: chrt -a)
if [ "$(id -u)" -eq 0 ]; then
    for p in "$pure_sims_pid" $(descendants "$pure_sims_pid"); do
        chrt -a --other -p 0 "$p" >/dev/null 2>&1 || true
    done
fi
# A compile still going (ccache's cache empty: a machine's first run) goes ahead of the
# lanes from here on, on any CPU: test_build waits for it, and beside six lanes it got a
# quarter of a CPU (built in 746 s, the suite 15m26s: stop 45's first run here). Its make
# and compilers take the new priority and CPUs from the processes running now. Where the
# kernel groups processes by session (kernel.sched_autogroup_enabled, Debian's default),
# the CPU is shared between sessions first and a process's nice counts only inside its
# own: pgsweep starts make in a session of its own (as it starts every server), so its
# session's nice is what gives it the CPU (/proc/PID/autogroup; renice alone left the
# compile at 15-19 CPU-s a minute, stop 45).
if [ ! -e "$logs/prebuild.rc" ]; then
    own_group=$(cat /proc/self/autogroup 2>/dev/null || true)
    for p in $(descendants "$prebuild_pid"); do
        if [ "$(id -u)" -eq 0 ]; then
            renice -n -5 -p "$p" >/dev/null 2>&1 || true
            # not the suite's own session (the prebuild's python is in it, with every lane)
            [ "$(cat "/proc/$p/autogroup" 2>/dev/null)" = "$own_group" ] ||
                { echo -5 >"/proc/$p/autogroup"; } 2>/dev/null || true
        fi
        taskset -a -p -c "0-$last_cpu" "$p" >/dev/null 2>&1 || true
    done
fi
# phase 2: two more lanes beside the rest lane (in the foreground); the build_last lane runs
# its modules that need no build first, then waits for the compile and runs test_build
(
    side=0
    "${pytest[@]}" "${build_first[@]}" || side=1
    while [ ! -e "$logs/prebuild.rc" ]; do sleep 1; done
    [ "$(cat "$logs/prebuild.rc")" = 0 ] || side=1
    "${pytest[@]}" "${build_last[@]}" || side=1
    exit "$side"
) >"$logs/build_last" 2>&1 &
build_last_pid=$!
"${pytest[@]}" "${ssh[@]}" >"$logs/ssh" 2>&1 &
ssh_pid=$!
lanes+=("$build_last_pid" "$ssh_pid")
skip=("${pure[@]}" "${pure_sims[@]}" "${machine[@]}" "${machine_last[@]}"
      "${machine_shared[@]}" "${network_first[@]}" "${network[@]}"
      "${build[@]}" "${build_first[@]}" "${build_last[@]}" "${ssh[@]}" "${fleet_first[@]}"
      "${fleet[@]}")
"${pytest[@]}" "${skip[@]/#/--ignore=}" tests || status=$?
wait "$network_pid" || status=1
wait "$ssh_pid" || status=1
wait "$fleet_pid" || status=1
wait "$build_pid" || status=1
wait "$build_last_pid" || status=1
wait "$pure_pid" || status=1
wait "$pure_sims_pid" || status=1
wait "$prebuild_pid" || status=1
for lane in prebuild pure pure_sims network ssh fleet build build_last; do
    echo "--- the $lane lane (run beside the others) ---"
    cat "$logs/$lane"
done
# the kernels numba compiled, back into the suite's cache (every lane is done)
mkdir -p "$numba_cache" && cp "$kernels"/txlog_kernels.*.nb[ic] "$numba_cache"/ 2>/dev/null || true
exit "$status"
