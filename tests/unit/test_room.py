"""Room for a configuration's data (layers/room.py): what goes where (data, snapshot, WAL
on the experiment's storage or the WAL device, standbys in the work area), a single
configuration that cannot fit is refused by `plan`'s checks, and clusters that fit alone
but not together are kept alive in turn (the cluster layer's coexist)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conftest import requires_pg, write_experiment
from pgsweep import spec
from pgsweep.engine import plans
from pgsweep.errors import PgsweepError
from pgsweep.layers import room

pytestmark = [requires_pg, pytest.mark.skipif(os.geteuid() != 0, reason="[storage] needs root")]
MiB = 1024**2


def _load(folder: Path, body: str) -> spec.Experiment:
    return spec.load(write_experiment(folder, "[experiment]\nname = 'room'\n" + body))


def test_what_goes_where(tmp_path: Path) -> None:
    exp = _load(tmp_path, "[cluster]\nscale = 4\n[storage]\ndevice = 'loop:1GiB'\n"
                "wal_device = 'loop:512MiB'\n[replication]\nstandbys = 2\n")  # fmt: skip
    (config,) = exp.configurations.values()
    places = room.places(config, tmp_path, most_wal=False)
    size = 4 * 16 * MiB + 24 * MiB
    assert places["loop:1GiB"].parts == [("data", size), ("its snapshot", size)]
    assert places["loop:1GiB"].room == int(1024 * MiB * room.FS_USABLE)
    assert places["loop:512MiB"].parts == [("WAL", 80 * MiB)]  # min_wal_size at the least
    assert places["work"].parts == [("2 standby(s)", 2 * (size + 80 * MiB))]
    assert room.too_big(config, tmp_path) is None


def test_one_configuration_that_cannot_fit_is_refused_before_anything_is_made(
    tmp_path: Path,
) -> None:
    exp = _load(tmp_path, "[cluster]\nscale = 40\n[storage]\ndevice = 'loop:1GiB'\n")
    with pytest.raises(PgsweepError, match=r"cannot fit: it needs about 1\.4 GiB") as err:
        plans.preflight(exp, tmp_path / "res")
    assert err.value.exit_code == 2 and "exp.toml:4: cluster.scale" in str(err.value)
    assert not (tmp_path / "res").exists()


def test_clusters_that_fit_alone_but_not_together_take_turns(tmp_path: Path) -> None:
    """Two clusters on one 1 GiB loop: each fits with the WAL it keeps at least, not both
    with the WAL max_wal_size lets them keep."""
    exp = _load(tmp_path, "[storage]\ndevice = 'loop:1GiB'\n[factors]\n"
                "cluster.scale = [10, 12]\n")  # fmt: skip
    where = plans.preflight(exp, tmp_path / "res")
    reason = plans.why_not_alive(exp, where)
    assert reason.startswith("cluster: 2 clusters need about"), reason
    assert "on the loop device loop:1GiB" in reason and "WAL of cluster 2 1.0 GiB" in reason


def test_one_cluster_per_storage_stays_alive(tmp_path: Path) -> None:
    """Each loop holds one cluster: nothing to share, so nothing to take turns for (even
    though max_wal_size's 1 GiB would not fit a 1 GiB loop beside the data)."""
    exp = _load(tmp_path, "[cluster]\nscale = 1\n[factors]\n"
                "storage.device = ['loop:1GiB', 'loop:1280MiB']\n")  # fmt: skip
    where = plans.preflight(exp, tmp_path / "res")
    assert plans.why_not_alive(exp, where) == ""
