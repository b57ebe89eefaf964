"""A standby whose host's connection broke during the trial: whichever check notices first
(the primary's streaming standbys, or the sampler's seconds), the failure names the lost
host first, so a DBA reads why and not only what stopped. The real run of it is
test_hosts' standby-host-lost test; here the sampler's paths, on stand-in hosts."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from pgsweep.layers.context import TrialFailure
from pgsweep.layers.replication_watch import LagSampler, lost_first


def _standby(name: str, alive: bool) -> Any:
    return SimpleNamespace(host=SimpleNamespace(name=name, alive=lambda: alive))


def test_the_lost_host_leads_and_an_answering_one_is_not_named() -> None:
    standbys = [_standby("replica", False), _standby("other", True), _standby("local", True)]
    assert lost_first(standbys, "0 standby(s) stream") == (
        "host replica (a standby's) was lost: 0 standby(s) stream")
    assert lost_first(standbys[1:], "0 standby(s) stream") == "0 standby(s) stream"


@pytest.mark.parametrize("alive", [False, True])
def test_the_samplers_failure_names_a_lost_standby_host(alive: bool) -> None:
    sampler = LagSampler(_standby("primary", True), {"s1": _standby("replica", alive)}, 5.0)
    sampler.error = ConnectionError("server closed the connection unexpectedly")
    with pytest.raises(TrialFailure) as err:
        sampler.end(SimpleNamespace(), SimpleNamespace())  # type: ignore[arg-type]
    lost = "host replica (a standby's) was lost: "
    assert str(err.value).startswith(lost) != alive, str(err.value)
    assert "sampling pg_stat_replication failed: server closed" in str(err.value)
