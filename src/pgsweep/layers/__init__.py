"""The layers of the stack, in the order a trial prepares them (most expensive first)."""

from __future__ import annotations

from .base import Layer


def all_layers() -> list[Layer]:
    """A fresh instance of every layer (layers keep run state: journals, frozen scripts)."""
    from .build import BuildLayer
    from .cluster import ClusterLayer
    from .oslayer import OsLayer
    from .replication import ReplicationLayer
    from .server import ServerLayer
    from .storage import StorageLayer
    from .workload import WorkloadLayer

    # a build stands on nothing, but sits above storage in the resource chain: clusters of
    # two builds share one filesystem instead of each getting a filesystem of its own
    return [StorageLayer(), BuildLayer(), ClusterLayer(), OsLayer(), ReplicationLayer(),
            ServerLayer(), WorkloadLayer()]  # fmt: skip
