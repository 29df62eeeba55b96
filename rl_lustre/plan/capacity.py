"""The capacity policy as lanes: which GPU pool ``up()`` asks for, in which zone, in what order,
with the node-pool settings Google documents for each kind.

A :class:`Lane` is one capacity kind in one zone. :func:`capacity_lanes` orders them
kind-major: each kind of ``ClusterSpec.capacity`` in every candidate zone (the cluster's
own zone first, where the volume is) before the next kind; a reservation is tried in the
cluster's zone only (a specific reservation is zonal). :func:`lane_pool_settings` is what a
lane's pool is, on top of :func:`~rl_lustre.plan.nodepools.gpu_node_settings` (so the
preload disk, the fabric's NICs and every other node setting reach every lane's pool).

Per kind (GKE's documented settings):

- ``spot``: ``spot: true``, ``num_nodes`` nodes, no reservation.
- ``on-demand``: no reservation, ``num_nodes`` nodes.
- ``reservation``: ``reservation_affinity`` ``SPECIFIC_RESERVATION`` with key
  ``compute.googleapis.com/reservation-name`` and the reservation (a shared one by its
  ``projects/P/reservations/R`` path), ``num_nodes`` nodes.
- ``flex-start`` (``gcloud container node-pools create --flex-start --enable-autoscaling
  --num-nodes=0 --total-min-nodes=0 --total-max-nodes=N --location-policy=ANY
  --reservation-affinity=none --no-enable-autorepair [--enable-queued-provisioning]``):
  ``flex_start: true``, 0 initial nodes, autoscaling 0..N with location policy ``ANY``,
  auto-repair off, no reservation; queued: ``queued_provisioning`` on and a
  ProvisioningRequest (:mod:`rl_lustre.kube.provisioning_request`) whose
  ``maxRunDurationSeconds`` bounds the nodes' life; not queued: the pool's
  ``max_run_duration``.

Examples:
    >>> from rl_lustre import Cluster
    >>> c = Cluster(name="demo", project="my-project", region="us-east1", zone="us-east1-b",
    ...             capacity=("spot", "flex-start"), capacity_zones=("us-east1-b", "us-east1-c"), fabric="tcp")
    >>> [(lane.kind, lane.zone, lane.pool_name) for lane in capacity_lanes(c)]  # doctest: +NORMALIZE_WHITESPACE
    [('spot', 'us-east1-b', 'gpu-pool'), ('spot', 'us-east1-c', 'gpu-spot-c'),
     ('flex-start', 'us-east1-b', 'gpu-flex-b'), ('flex-start', 'us-east1-c', 'gpu-flex-c')]
    >>> s = lane_pool_settings(c, capacity_lanes(c)[2])
    >>> s["flex_start"], s["node_count"], s["autoscaling"]["location_policy"], s["management"]["auto_repair"]
    (True, 0, 'ANY', False)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import attrs

from .. import naming
from ..catalog import GKE_NODEPOOL_LABEL

if TYPE_CHECKING:
    from ..spec import ClusterSpec
    from ..spec.capacity import Capacity

__all__ = ["PROVISIONING", "RESERVATION_KEY", "Lane", "capacity_lanes", "lane_pool_settings", "planned_zones"]

RESERVATION_KEY = "compute.googleapis.com/reservation-name"
# How the plan and the cost name each kind's provisioning.
PROVISIONING = {"spot": "Spot", "reservation": "reserved", "on-demand": "on-demand", "flex-start": "flex-start"}


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


def lane_pool_settings(cluster: ClusterSpec, lane: Lane) -> dict[str, Any]:
    """The kind-specific settings of ``lane``'s pool (merged over the GPU node settings)."""
    cap = lane.capacity
    nodes = cluster.num_nodes
    out: dict[str, Any] = {
        "location": lane.zone,
        "provisioning": PROVISIONING[cap.kind],
        "spot": cap.kind == "spot",
        "node_count": nodes,
        "reservation_affinity": {"consume_reservation_type": "NO_RESERVATION"},
        "management": {"auto_repair": True, "auto_upgrade": True},
    }
    if cap.kind == "reservation":
        out["reservation_affinity"] = {
            "consume_reservation_type": "SPECIFIC_RESERVATION",
            "key": RESERVATION_KEY,
            "values": [cap.reservation],
        }
        if cap.shared:
            out["reservation_shared_from"] = cap.reservation.split("/")[1] if cap.reservation else None
    if cap.kind == "flex-start":
        assert cap.max_run_duration is not None
        out.update(
            {
                "flex_start": True,
                "node_count": 0,
                "autoscaling": {
                    "enabled": True,
                    "total_min_node_count": 0,
                    "total_max_node_count": nodes,
                    "location_policy": "ANY",
                },
                "management": {"auto_repair": False, "auto_upgrade": True},
            }
        )
        if cap.queued:
            out["queued_provisioning"] = {
                "enabled": True,
                "provisioning_request": naming.provisioning_request_name(cluster, lane.pool_name),
                "provisioning_class": "queued-provisioning.gke.io",
                "max_run_duration_seconds": int(cap.max_run_duration),
                "pods_consume_by": "annotation autoscaling.x-k8s.io/consume-provisioning-request and "
                f"nodeSelector {GKE_NODEPOOL_LABEL}",
            }
        else:
            out["max_run_duration_seconds"] = int(cap.max_run_duration)
    if lane.zone != cluster.zone:
        out["volume_access"] = (
            f"the Lustre instance stays in {cluster.zone}; these nodes reach it across zones "
            "(inter-zone traffic is billed, and adds latency)"
        )
    return out
