"""The capacity policy as lanes and GPU node pools: one pool per kind and zone, in the order of
the deployment's ComputeClass, with the node-pool settings Google documents for each kind.

A :class:`Lane` is one capacity kind in one zone. :func:`capacity_lanes` orders them
kind-major: each kind of ``ClusterSpec.capacity`` in every candidate zone (the cluster's
own zone first, where the volume is) before the next kind; a reservation is in the
cluster's zone only (a specific reservation is zonal). Each lane's pool is a rule of the
deployment's ComputeClass (:mod:`rl_lustre.kube.computeclass`): ``up()`` creates every one
of them, and GKE's cluster autoscaler brings the nodes from the first that has capacity,
every time nodes are needed. :func:`lane_pool_settings` is what a lane's pool is, on top of
:func:`~rl_lustre.plan.nodepools.gpu_node_settings` (so the preload disk, the fabric's NICs
and every other node setting reach every pool); every pool carries the class's node label
and ``NoSchedule`` taint and the ``rl-lustre/capacity`` label of its kind.

Per kind (GKE's documented settings):

- ``spot``: ``spot: true``, autoscaled from 0 to ``num_nodes`` (location policy ``ANY``),
  no reservation: it costs nothing while no pod needs it, and a lost node is replaced by
  whatever kind has capacity then.
- ``on-demand``: as Spot, without ``spot``.
- ``reservation``: ``reservation_affinity`` ``SPECIFIC_RESERVATION`` with key
  ``compute.googleapis.com/reservation-name`` and the reservation (a shared one by its
  ``projects/P/reservations/R`` path), ``num_nodes`` nodes: a reservation is paid whether
  used or not, so its nodes are held.
- ``flex-start`` (``gcloud container node-pools create --flex-start --enable-autoscaling
  --num-nodes=0 --total-min-nodes=0 --total-max-nodes=N --location-policy=ANY
  --reservation-affinity=none --no-enable-autorepair``): ``flex_start: true``, 0 initial
  nodes, autoscaling 0..N with location policy ``ANY``, auto-repair off, no reservation, the
  nodes' ``max_run_duration``: the flex-start the cluster autoscaler obtains, node by node.
  With ``queued`` (all nodes at once, through a ProvisioningRequest) ``up()`` also makes a
  pool with queued provisioning beside it (:func:`queued_pool_settings`), whose nodes come
  only for the request: GKE's autoscaler does not scale a queued pool for pending pods, so
  that pool is not a rule of the ComputeClass.

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
    >>> s["labels"]
    {'cloud.google.com/compute-class': 'demo-gpus', 'rl-lustre/capacity': 'flex-start'}
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import naming
from ..catalog import COMPUTE_CLASS_LABEL
from ..spec.lanes import Lane, capacity_lanes, class_stages, planned_zones

if TYPE_CHECKING:
    from ..spec import ClusterSpec

__all__ = [
    "PROVISIONING",
    "RESERVATION_KEY",
    "Lane",
    "capacity_lanes",
    "class_stages",
    "lane_pool_settings",
    "planned_zones",
    "queued_pool_settings",
]

RESERVATION_KEY = "compute.googleapis.com/reservation-name"
# How the plan and the cost name each kind's provisioning.
PROVISIONING = {"spot": "Spot", "reservation": "reserved", "on-demand": "on-demand", "flex-start": "flex-start"}


def _autoscaled(nodes: int) -> dict[str, Any]:
    return {"enabled": True, "total_min_node_count": 0, "total_max_node_count": nodes, "location_policy": "ANY"}


def lane_pool_settings(cluster: ClusterSpec, lane: Lane) -> dict[str, Any]:
    """The kind-specific settings of ``lane``'s pool, the ComputeClass's rule (merged over
    the GPU node settings)."""
    from ..kube.computeclass import pool_labels, pool_taint

    cap = lane.capacity
    nodes = cluster.num_nodes
    out: dict[str, Any] = {
        "location": lane.zone,
        "provisioning": PROVISIONING[cap.kind],
        "spot": cap.kind == "spot",
        "node_count": 0,
        "autoscaling": _autoscaled(nodes),
        "reservation_affinity": {"consume_reservation_type": "NO_RESERVATION"},
        "management": {"auto_repair": True, "auto_upgrade": True},
        "labels": pool_labels(cluster, lane),
        "class_taint": pool_taint(cluster),
        "compute_class": f"{naming.compute_class_name(cluster)} (rule {lane.index})",
    }
    if cap.kind == "reservation":
        del out["autoscaling"]
        out["node_count"] = nodes
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
                "management": {"auto_repair": False, "auto_upgrade": True},
                "max_run_duration_seconds": int(cap.max_run_duration),
                "capacity_check_wait_seconds": int(cap.wait),
            }
        )
    if lane.zone != cluster.zone:
        out["volume_access"] = (
            f"the Lustre instance stays in {cluster.zone}; these nodes reach it across zones "
            "(inter-zone traffic is billed, and adds latency)"
        )
    return out


def queued_pool_settings(cluster: ClusterSpec, lane: Lane) -> dict[str, Any]:
    """The settings of the queued flex-start pool of ``lane`` (a queued flex-start kind): its
    nodes come only for the ProvisioningRequest ``up()`` makes when it reaches that kind
    (:mod:`rl_lustre.kube.provisioning_request`), all at once, and join the ComputeClass by its
    label and taint (the pods select the class), though the class has no rule for the pool.

    Examples:
        >>> from rl_lustre import Cluster
        >>> c = Cluster(name="demo", project="my-project", region="us-east1", zone="us-east1-b",
        ...             capacity=("spot", "flex-start"), fabric="tcp")
        >>> s = queued_pool_settings(c, capacity_lanes(c)[1])
        >>> s["name"], s["queued_provisioning"]["provisioning_request"], s["autoscaling"]["total_max_node_count"]
        ('gpu-flex-b-q', 'demo-gpu-flex-b-q', 8)
    """
    cap = lane.capacity
    assert cap.kind == "flex-start"
    assert cap.max_run_duration is not None
    name = naming.gpu_queued_pool_name(cluster, lane.pool_name)
    out = lane_pool_settings(cluster, lane)
    out.pop("capacity_check_wait_seconds", None)
    out.pop("max_run_duration_seconds", None)
    out["name"] = name
    out["compute_class"] = f"{naming.compute_class_name(cluster)} (by its label and taint; no rule: queued)"
    out["queued_provisioning"] = {
        "enabled": True,
        "provisioning_request": naming.provisioning_request_name(cluster, name),
        "provisioning_class": "queued-provisioning.gke.io",
        "max_run_duration_seconds": int(cap.max_run_duration),
        "pods_consume_by": "annotation autoscaling.x-k8s.io/consume-provisioning-request and nodeSelector "
        f"{COMPUTE_CLASS_LABEL}",
    }
    return out
