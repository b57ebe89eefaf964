"""Sizes and shares of RAM as people write them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pgsweep.host.blockdev import Grant
from pgsweep.units import parse_duration, parse_size, ram_share


def test_sizes_in_postgres_and_zfs_spellings() -> None:
    assert parse_size("512MB") == 512 * 1024**2
    assert parse_size("4GiB") == 4 * 1024**3
    assert parse_size("8K") == 8192  # zfs recordsize
    assert parse_size(4096) == 4096
    with pytest.raises(ValueError, match="a size such as"):
        parse_size("8 parsecs")


def test_share_of_ram() -> None:
    assert ram_share("25% of RAM") == 0.25
    assert ram_share("200% of ram") == 2.0
    assert ram_share("25%") is None and ram_share("200MB") is None and ram_share(5) is None


def test_a_grant_names_the_device_not_a_prefix(tmp_path: Path) -> None:
    disk = Path("/dev") / sorted(os.listdir("/sys/class/block"))[0]  # any real block device
    link = tmp_path / "by-id"
    link.symlink_to(disk)
    grant = Grant((link,))
    assert grant.allows(disk)  # the same device by another name
    assert not grant.allows(Path(f"{disk}1")) and not Grant().allows(disk)
    # only device paths under /dev, never a path that climbs out of it
    assert not Grant((Path("/etc/passwd"),)).allows(Path("/dev/../etc/passwd"))


@pytest.mark.parametrize("value", [float("inf"), float("nan"), "40d", 1e300, -1])
def test_durations_are_finite_and_bounded(value: object) -> None:
    with pytest.raises(ValueError):
        parse_duration(value)


def test_postgresqls_time_units_are_durations() -> None:
    """recovery_min_apply_delay = "1d" passed plan and then crashed the trial's wait."""
    assert parse_duration("1d") == 86400 and parse_duration("250us") == 0.00025


def test_ext4_is_mounted_without_background_inode_table_zeroing() -> None:
    from pgsweep.host.blockdev import quiet_defaults

    assert quiet_defaults("ext4", "") == ["noinit_itable"]
    assert quiet_defaults("ext4", "noatime,data=writeback") == ["noinit_itable"]
    assert quiet_defaults("ext4", "noatime,init_itable=10") == []  # the level asks for it
    assert quiet_defaults("xfs", "") == [] and quiet_defaults("btrfs", "noatime") == []
