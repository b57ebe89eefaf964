"""Compile the suite's one PostgreSQL build (tests/data/suite-build.toml) into the
suite's build cache, through pgsweep's own build code, so the build tests find it there.
scripts/test.sh runs this beside the real runs at the lowest priority; a test that needs
the build first waits on the cache's lock, then finds it built (or builds it itself).
Compile only: the build's inspection and its settings' start check (initdb, a scratch
server) come with test_build's runs, in the second phase. With ccache warm the compile
ends while the machine lane still runs, and that lane counts every postgres process on
the machine before and after its tests (stop 39's first run caught the start check's)."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
SUITE_BUILD = HERE / "data" / "suite-build.toml"
# on tmpfs: the compile's writes stay off the disk the real runs beside it fsync to; not
# in /var/tmp or /tmp, whose pgsweep-* names the bad-input tests compare
SUITE_CACHE = Path("/dev/shm/pgsweep-suite/builds")


def main() -> int:
    os.environ.setdefault("PGSWEEP_CACHE_DIR", str(SUITE_CACHE))
    from pgsweep import spec
    from pgsweep.engine import buildprep
    from pgsweep.host import builds, sources
    from pgsweep.host.local import LOCAL

    # the build's scratch (pgsweep-build-*) off /tmp: the machine lane, which runs beside
    # the compile, compares /tmp's pgsweep names before and after
    scratch = SUITE_CACHE.parent / "tmp"
    scratch.mkdir(mode=0o755, parents=True, exist_ok=True)  # apt's sandbox user passes
    was, tempfile.tempdir = tempfile.tempdir, str(scratch)
    try:
        exp = spec.load(SUITE_BUILD)
        (wanted,) = buildprep.needed(exp)
        root = LOCAL.build_cache(LOCAL.ids(exp.user)[0], create=True)
        assert root is not None
        build, cached = LOCAL.make_build(root, wanted, lambda line: print(line, flush=True))
    except (builds.BuildError, sources.SourceError) as exc:
        print(f"prebuild failed: {exc}", file=sys.stderr)
        return 1
    finally:
        tempfile.tempdir = was
    print(f"prebuild: {build.key} {'cached' if cached else f'built in {build.seconds:.0f} s'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
