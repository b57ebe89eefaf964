#!/usr/bin/env bash
# Set up pgsweep on a Debian/Ubuntu machine: PostgreSQL server packages, sysbench and
# pgreplay (through apt, when missing and we are root), then a Python virtual environment.
# Usage: scripts/setup.sh [--dev]     (--dev adds the test and lint tools, and Ansible)
set -euo pipefail
cd "$(dirname "$0")/.."

lock=requirements.lock
[ "${1:-}" = "--dev" ] && lock=requirements-dev.lock

need=()
command -v python3 >/dev/null || need+=(python3)
python3 -c 'import venv, ensurepip' 2>/dev/null || need+=(python3-venv)
ls /usr/lib/postgresql/*/bin/pgbench >/dev/null 2>&1 || need+=(postgresql postgresql-contrib)
ls /usr/lib/postgresql/*/lib/pg_prewarm.so >/dev/null 2>&1 || need+=(postgresql-contrib)
# workload.tool = "sysbench" runs Debian's sysbench (its PostgreSQL driver is built in)
command -v sysbench >/dev/null || need+=(sysbench)
command -v pgreplay >/dev/null || need+=(pgreplay)  # workload.tool = "pgreplay"
if [ "${1:-}" = "--dev" ]; then  # the HTML report is tested in a real headless browser
    command -v chromium >/dev/null || need+=(chromium fonts-dejavu-core)
    # the storage layer's tests build every filesystem it supports on loop devices
    command -v mkfs.xfs >/dev/null || need+=(xfsprogs)
    command -v mkfs.btrfs >/dev/null || need+=(btrfs-progs)
    command -v zfs-fuse >/dev/null || need+=(zfs-fuse)
    # the build layer's tests compile PostgreSQL from Debian's source (no readline or zlib)
    command -v cc >/dev/null && command -v make >/dev/null || need+=(build-essential)
    # pgsweep compiles through ccache when it is installed; the suite keeps its cache
    # between runs (scripts/test.sh): a second run's compile is mostly cache hits
    command -v ccache >/dev/null || need+=(ccache)
    command -v git >/dev/null || need+=(git)
    # remote hosts are tested as sshd in network namespaces (tests/sshhosts.py)
    [ -x /usr/sbin/sshd ] || need+=(openssh-server)
    # the explain panel's wait states from pg_wait_sampling (tests/integration/test_explain)
    for bin in /usr/lib/postgresql/*/bin; do
        major=$(basename "$(dirname "$bin")")
        [ -e "/usr/lib/postgresql/$major/lib/pg_wait_sampling.so" ] ||
            need+=("postgresql-$major-pg-wait-sampling")
    done
fi
if [ ${#need[@]} -gt 0 ]; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "error: missing packages: ${need[*]}" >&2
        echo "  fix: run as root, or: sudo apt-get install -y ${need[*]}" >&2
        exit 2
    fi
    echo "setup: installing ${need[*]} with apt-get" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# The throwaway servers (and whatever an experiment's scripts run) get a system account of
# their own that owns nothing else, not postgres, whose files are the machine's clusters.
if [ "$(id -u)" -eq 0 ] && ! id pgsweep >/dev/null 2>&1; then
    useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin pgsweep
    echo "setup: made the system account pgsweep for the throwaway servers" >&2
fi

# Debian's postgresql package starts a cluster of its own; pgsweep never touches it.
# The virtual environment is made without pip: this Python's own pip installs into it
# where it can (pip --python, 22.3 and later), else ensurepip gives it a copy of its own
# (8.5 s, most of it compiling pip). Which pip is found when one is first needed.
[ -x .venv/bin/python ] || python3 -m venv --without-pip .venv
pip=()
pip_install() {
    if [ ${#pip[@]} -eq 0 ]; then
        pip=(.venv/bin/python -m pip)
        if ! "${pip[@]}" --version >/dev/null 2>&1; then
            pip=(python3 -m pip --python .venv/bin/python)
            if ! "${pip[@]}" --version >/dev/null 2>&1; then
                .venv/bin/python -m ensurepip >/dev/null
                pip=(.venv/bin/python -m pip)
            fi
        fi
    fi
    "${pip[@]}" install -q --disable-pip-version-check "$@"
}
# The lockfiles are installed by uv (pinned by hash itself, requirements-uv.lock): about
# 5 s on 2 cores where pip took 22 s. pip installs them when uv cannot be had. Neither
# byte-compiles every module of numpy, scipy and matplotlib (pip's --no-compile: about
# 40 s); the imports below compile just what pgsweep loads, once. (Python may be told not
# to write .pyc files itself, PYTHONDONTWRITEBYTECODE, as on some CI machines.)
# PGSWEEP_UV: a uv binary installed from this same lockfile before (scripts/test.sh keeps
# one by the lockfile's hash), copied instead
if [ ! -x .venv/bin/uv ] && [ -x "${PGSWEEP_UV:-}" ]; then
    cp "$PGSWEEP_UV" .venv/bin/uv
fi
[ -x .venv/bin/uv ] || pip_install --require-hashes -r requirements-uv.lock \
    >/dev/null 2>&1 || true
install_locked() {
    # --native-tls: the machine's certificates, as pip uses them (a proxy's own CA)
    if [ -x .venv/bin/uv ] && .venv/bin/uv pip install -q --native-tls \
            --python .venv/bin/python "$@"; then
        return 0
    fi
    pip_install --no-compile "$@"
}
install_locked --require-hashes -r "$lock"
# --dev: fleets are tested for real, through Ansible (the [fleet] extra, its own lockfile)
if [ "${1:-}" = "--dev" ]; then
    install_locked --require-hashes -r requirements-fleet.lock
fi
install_locked --no-deps -e .
warm='import pgsweep.cli, pgsweep.analysis, pgsweep.outputs.html, pgsweep.outputs.export'
warm+=', pgsweep.engine.run, pgsweep.collect.txlog, pgsweep.engine.against'
warm+=', pgsweep.analysis.trial_length'
[ "${1:-}" = "--dev" ] && warm+=', pytest'
# pyarrow loads pandas, when it is installed, for an export (3 s of compiling otherwise)
warm+=$'\nimport importlib.util\nif importlib.util.find_spec("pandas"): import pandas'
env -u PYTHONDONTWRITEBYTECODE .venv/bin/python -c "$warm"
echo "setup: ready (.venv/bin/pgsweep)" >&2
