"""Compile a build into a fresh cache, then run the same preparation again: seconds for
the fetch (apt source), the compile (unpack, configure, make -j, make install) and the
second look (which must compile nothing), and the size of the cache entry.

    bench/build-cache            # tests/data/suite-build.toml (-O0)
    bench/build-cache --O2       # the same options at configure's default -O2
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--O2", action="store_true", help="build at -O2 instead of -O0")
    args = ap.parse_args()
    cache = Path(tempfile.mkdtemp(prefix="pgsweep-bench-cache-", dir="/var/tmp"))
    cache.chmod(0o755)  # the server user runs the binaries in it
    os.environ["PGSWEEP_CACHE_DIR"] = str(cache / "builds")
    text = (ROOT / "tests/data/suite-build.toml").read_text()
    if args.O2:
        text = re.sub(r'optimize = "0"\n', "", text)
    exp_file = cache / "bench.toml"
    exp_file.write_text(text)
    from pgsweep import spec
    from pgsweep.engine import buildprep

    try:
        exp = spec.load(exp_file)
        lines: list[tuple[float, str]] = []
        began = time.monotonic()
        first = buildprep.prepare(exp, lambda s: lines.append((time.monotonic(), s)))
        total = time.monotonic() - began
        (prepared,) = first.values()
        assert prepared.build is not None, prepared.failure
        fetched = next((t for t, s in lines if "compiling into" in s), began) - began
        began = time.monotonic()
        second = buildprep.prepare(exp, lambda s: None)
        again = time.monotonic() - began
        (hit,) = second.values()
        assert hit.build is not None and hit.build.cached, "the second look compiled"
        size = sum(p.lstat().st_size for p in prepared.build.home.rglob("*"))
        print(f"build: {prepared.spec.describe()}")
        print(f"  source pinned (apt fetch when first): {fetched:7.1f} s")
        print(
            f"  compile (unpack, configure, make -j{os.cpu_count()}, install): "
            f"{prepared.build.seconds:7.1f} s"
        )
        print(f"  first preparation in all (incl. catalog checks): {total:7.1f} s")
        print(f"  second preparation (cache hit, nothing compiled):  {again:7.1f} s")
        print(f"  cache entry: {size / 1024**2:.0f} MiB ({prepared.build.version})")
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
