"""What a live GKE node pool's nodes are: the capacity kind they are billed as, and how
long they live.

:func:`pool_provisioning` is the one place that maps a ``container_v1.NodePool`` to its
nodes' capacity kind (Spot, flex-start, reserved, on-demand), which prices them;
:func:`node_lifetimes` says which nodes GKE deletes after a fixed time (flex-start), for
the recovery supervisor to save before they go. Both read a pool as
:class:`~rl_lustre.gcp.container.GkeNodePools` (or ``GkeClusters.list_all``) returns it;
nothing here sends a request.
"""

from __future__ import annotations

from collections.abc import Iterable

from google.cloud import container_v1

__all__ = ["node_lifetimes", "node_prefixes", "pool_provisioning"]


def pool_provisioning(pool: container_v1.NodePool) -> str:
    """The capacity kind a live node pool's nodes have: ``"Spot"``, ``"flex-start"``,
    ``"reserved"`` or ``"on-demand"`` -- the one place that maps a pool to what its nodes cost
    (:meth:`rl_lustre.cost.Prices.machine_rate` takes every value it returns). A flex-start
    pool's nodes (``config.flex_start``: a fallback lane, or the standby pool beside a Spot
    pool) are billed at the flex-start rate, not on demand.

    Examples:
        >>> pool_provisioning(container_v1.NodePool(config=container_v1.NodeConfig(spot=True)))
        'Spot'
        >>> pool_provisioning(container_v1.NodePool(config=container_v1.NodeConfig(flex_start=True)))
        'flex-start'
        >>> pool_provisioning(container_v1.NodePool(config=container_v1.NodeConfig()))
        'on-demand'
    """
    if pool.config.spot or pool.config.preemptible:
        return "Spot"
    if pool.config.flex_start:
        return "flex-start"
    specific = container_v1.ReservationAffinity.Type.SPECIFIC_RESERVATION
    return "reserved" if pool.config.reservation_affinity.consume_reservation_type == specific else "on-demand"


def node_lifetimes(
    pools: Iterable[container_v1.NodePool], queued: float | None = None
) -> tuple[tuple[str, float], ...]:
    """``(node-name prefix, seconds)`` for each managed instance group of a pool whose nodes
    live at most ``config.max_run_duration`` (flex-start): GKE deletes them that long after
    they were created. A flex-start pool with queued provisioning has no such field: its
    ProvisioningRequest says how long (``maxRunDurationSeconds``), given here as ``queued``.

    GKE names a pool's nodes after its instance group: the group ``gke-C-P-1a2b3c4d-grp``
    (the last part of each of ``instance_group_urls``) makes nodes ``gke-C-P-1a2b3c4d-xxxx``.
    Ray names the RayCluster's worker nodes after their Kubernetes nodes (see
    :mod:`rl_lustre.kube.raycluster`), so the recovery supervisor on the head knows from the
    node table alone which nodes of a run have an end (:mod:`rl_lustre.oncluster.lifetimes`).

    Examples:
        >>> import datetime
        >>> url = "https://www.googleapis.com/compute/v1/projects/p/zones/us-east1-b/instanceGroupManagers/"
        >>> groups = [url + "gke-c-gpu-standby-1a2b3c4d-grp"]
        >>> flex = container_v1.NodePool(name="gpu-standby", instance_group_urls=groups,
        ...     config=container_v1.NodeConfig(flex_start=True, max_run_duration=datetime.timedelta(days=3)))
        >>> spot = container_v1.NodePool(name="gpu-pool", instance_group_urls=[url + "gke-c-gpu-pool-5e6f7a8b-grp"],
        ...     config=container_v1.NodeConfig(spot=True))
        >>> node_lifetimes([spot, flex])
        (('gke-c-gpu-standby-1a2b3c4d-', 259200.0),)
        >>> lane = container_v1.NodePool(name="gpu-flex", instance_group_urls=[url + "gke-c-gpu-flex-9c0d1e2f-grp"],
        ...     config=container_v1.NodeConfig(flex_start=True), queued_provisioning={"enabled": True})
        >>> node_lifetimes([lane], queued=86400)
        (('gke-c-gpu-flex-9c0d1e2f-', 86400.0),)
    """
    out: list[tuple[str, float]] = []
    for pool in pools:
        duration = pool.config.max_run_duration
        seconds = duration.total_seconds() if duration else float(queued or 0.0) if pool.config.flex_start else 0.0
        if seconds <= 0:
            continue
        out += [(prefix, seconds) for prefix in _prefixes(pool)]
    return tuple(out)


def node_prefixes(pools: Iterable[container_v1.NodePool], provisioning: str) -> tuple[str, ...]:
    """The node-name prefixes (as :func:`node_lifetimes` names them) of the GPU pools whose
    nodes are of capacity kind ``provisioning`` (:func:`pool_provisioning`'s words).

    Examples:
        >>> url = "https://www.googleapis.com/compute/v1/projects/p/zones/us-east1-b/instanceGroupManagers/"
        >>> gpus = container_v1.NodeConfig(accelerators=[container_v1.AcceleratorConfig(accelerator_count=8)])
        >>> demand = container_v1.NodePool(name="gpu-ondemand-b", instance_group_urls=[url + "gke-c-gpu-ond-1a-grp"],
        ...     config=gpus)
        >>> cpu = container_v1.NodePool(name="ray-head-pool", instance_group_urls=[url + "gke-c-ray-head-pool-9f-grp"])
        >>> node_prefixes([demand, cpu], "on-demand")
        ('gke-c-gpu-ond-1a-',)
    """
    return tuple(p for pool in pools if pool.config.accelerators and pool_provisioning(pool) == provisioning
                 for p in _prefixes(pool))  # fmt: skip


def _prefixes(pool: container_v1.NodePool) -> list[str]:
    """GKE names a pool's nodes after its instance groups: ``gke-C-P-1a2b3c4d-grp`` -> ``gke-C-P-1a2b3c4d-``."""
    return [url.rstrip("/").rsplit("/", 1)[-1].removesuffix("-grp") + "-" for url in pool.instance_group_urls]
