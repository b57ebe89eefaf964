"""pgsweep: does this change make PostgreSQL faster, slower, or no different?"""

import os

__version__ = "0.1.0"

# pgsweep's statistics multiply small matrices: one BLAS thread does it. Left to itself,
# numpy's OpenBLAS starts a thread per core, and they spin for a while after each call:
# on the cores a trial is measuring, between and during its windows.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
