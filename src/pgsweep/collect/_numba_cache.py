"""Where numba keeps the compiled log kernels: beside the code when that is writable (a
virtual environment), else in the user's cache (a non-root user running an installed copy
cannot write there). Importing this module sets it: numba reads NUMBA_CACHE_DIR once, when
it is first imported."""

from __future__ import annotations

import os
from pathlib import Path


def ensure_cache_dir() -> None:
    if "NUMBA_CACHE_DIR" in os.environ or os.access(Path(__file__).parent, os.W_OK):
        return
    base = os.environ.get("XDG_CACHE_HOME", str(Path.home() / ".cache"))
    os.environ["NUMBA_CACHE_DIR"] = str(Path(base) / "pgsweep" / "numba")


ensure_cache_dir()
