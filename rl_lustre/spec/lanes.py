"""The capacity policy's lanes: each kind of ``ClusterSpec.capacity`` in each candidate zone, in
order, with the name of its GKE node pool; what the GPU pools, the ComputeClass's rules and
``up()``'s stages are made from.

:func:`capacity_lanes` orders them kind-major: each kind in every candidate zone (the
cluster's own zone first, where the volume is) before the next kind; a reservation is in
the cluster's zone only (a specific reservation is zonal). The zones known offline are
:func:`planned_zones`'s (``capacity_zones="region"`` adds the zones found at ``up()``).
:func:`class_stages` is how ``up()`` walks a policy with a queued flex-start kind (whose
nodes come only through a ProvisioningRequest). Derived from the spec alone, and imported by
the plan, the Kubernetes objects and the drivers alike (below them all, so that none of them
imports another for it).

Examples:
    >>> from rl_lustre import Cluster
    >>> c = Cluster(name="demo", project="my-project", region="us-east1", zone="us-east1-b",
    ...             capacity=("spot", "flex-start"), capacity_zones=("us-east1-b", "us-east1-c"), fabric="tcp")
    >>> [(lane.kind, lane.zone, lane.pool_name) for lane in capacity_lanes(c)]  # doctest: +NORMALIZE_WHITESPACE
    [('spot', 'us-east1-b', 'gpu-pool'), ('spot', 'us-east1-c', 'gpu-spot-c'),
     ('flex-start', 'us-east1-b', 'gpu-flex-b'), ('flex-start', 'us-east1-c', 'gpu-flex-c')]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import attrs

from .. import naming

if TYPE_CHECKING:
    from .capacity import Capacity
    from .cluster import ClusterSpec

__all__ = ["Lane", "capacity_lanes", "class_stages", "planned_zones"]


@attrs.frozen
class Lane:
    """One capacity kind in one zone: the GPU pool ``up()`` asks for when it tries this.

    Attributes:
        index: its place in the order (0: the ``gpu-pool`` of the plan).
        capacity: the kind and its options.
        zone: where the pool's nodes go.
        pool_name: the GKE node pool's name (``gpu-pool`` for lane 0, else ``gpu-<kind>-<zone letter>``).
    """

    index: int
    capacity: Capacity
    zone: str
    pool_name: str

    @property
    def kind(self) -> str:
        return self.capacity.kind

    @property
    def label(self) -> str:
        """``spot in us-east1-c``."""
        return f"{self.capacity.label} in {self.zone}"

    @property
    def queued(self) -> bool:
        """Flex-start asked all at once through a ProvisioningRequest, at ``up()``."""
        return self.capacity.queued


def planned_zones(cluster: ClusterSpec) -> tuple[str, ...]:
    """The zones known offline: the explicit list, or the cluster's zone (``"region"``'s other
    zones are found at ``up()``)."""
    assert cluster.zone is not None
    zones = cluster.capacity_zones
    return tuple(zones) if isinstance(zones, tuple) else (cluster.zone,)


def capacity_lanes(cluster: ClusterSpec, zones: Sequence[str] | None = None) -> tuple[Lane, ...]:
    """The lanes ``up()`` tries, in order, over ``zones`` (by default :func:`planned_zones`;
    the cluster's zone is always first)."""
    assert cluster.zone is not None
    home = cluster.zone
    candidates = [home, *[z for z in (zones if zones is not None else planned_zones(cluster)) if z != home]]
    lanes: list[Lane] = []
    for cap in cluster.capacity:
        for zone in candidates if cap.kind != "reservation" else [home]:
            name = naming.gpu_pool_name(cluster) if not lanes else naming.gpu_lane_pool_name(cluster, cap.kind, zone)
            if any(la.pool_name == name for la in lanes):  # two options of one kind in one zone
                name = f"{name}-{len(lanes)}"
            lanes.append(Lane(len(lanes), cap, zone, name))
    return tuple(lanes)


def class_stages(cluster: ClusterSpec) -> tuple[tuple[tuple[int, ...], int | None], ...]:
    """How ``up()`` walks the policy: ``(kinds the ComputeClass tries, then the queued kind)``
    per stage, the kinds as indexes into ``cluster.capacity``. A queued flex-start kind gets its
    nodes only through a ProvisioningRequest, which the ComputeClass cannot ask for: ``up()``
    asks for it once the class's rules before it have no capacity, and adds the rules after
    it to the class only if that request fails.

    Examples:
        >>> from rl_lustre import Capacity, Cluster
        >>> c = Cluster(name="demo", project="my-project", region="us-east1", zone="us-east1-b", fabric="tcp",
        ...             capacity=("spot", "flex-start", "on-demand"))
        >>> class_stages(c)
        (((0,), 1), ((0, 2), None))
        >>> class_stages(Cluster(name="demo", project="my-project", region="us-east1", zone="us-east1-b",
        ...                      fabric="tcp", capacity=("spot", Capacity("flex-start", queued=False))))
        (((0, 1), None),)
    """
    stages: list[tuple[tuple[int, ...], int | None]] = []
    kinds: list[int] = []
    for index, cap in enumerate(cluster.capacity):
        if cap.kind == "flex-start" and cap.queued:
            stages.append((tuple(kinds), index))
        else:
            kinds.append(index)
    stages.append((tuple(kinds), None))
    return tuple(stages)
