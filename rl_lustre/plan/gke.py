"""The GKE backend's plan (:func:`gke_plan`): the network and private services access
(:mod:`rl_lustre.plan.network`), Managed Lustre (:mod:`rl_lustre.plan.lustre`), the GKE
cluster (:func:`gke_cluster`, here) and its pools (:mod:`rl_lustre.plan.nodepools`), the
GPUDirect-RDMA fabric (:mod:`rl_lustre.plan.fabric`), the Kubernetes objects
(:mod:`rl_lustre.plan.kube_objects`) and the start-up and warm-start nodes
(:mod:`rl_lustre.plan.startup`, :mod:`rl_lustre.plan.warmstart`), as one dependency graph.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import naming
from ..catalog import LUSTRE_PORT_988_MIN_GKE, ownership_labels
from ..plankeys import CPU_POOL_KEY, GKE_CLUSTER_KEY, SUBNET_KEY
from .fabric import fabric_nodes
from .graph import Plan, PlannedResource
from .keeper import keeper_node
from .kube_objects import compute_class, head_access_nodes, ray_cluster, secret, volume_claim_nodes
from .lustre import lustre_instance
from .network import cluster_subnet, ip_allocation, psa_nodes, vpc_nodes
from .nodepools import cpu_pool, gpu_pool, node_account, node_account_keys
from .preload import preload_nodes
from .results import results_nodes
from .startup import startup_nodes
from .warmstart import warmstart_nodes

if TYPE_CHECKING:
    from ..spec import ClusterSpec

__all__ = ["control_plane_access", "gke_cluster", "gke_plan", "lustre_nic_settings"]

RELEASE_CHANNEL = "REGULAR"
MAINTENANCE_EXCLUSION_NAME = "rl-lustre-no-node-recreation"


def gke_plan(cluster: ClusterSpec) -> Plan:
    """The plan of a GKE deployment: every node, from the network to the warm-start export.

    Nodes are listed storage first (network, private services access, Lustre), then the
    fabric, the GKE cluster and its pools, the Kubernetes objects and the start-up nodes;
    :class:`~rl_lustre.plan.Plan` orders them by their dependencies, keeping this order
    where the graph allows. Each builder takes ``created``, the action and labels of what
    the deployment creates (the ownership labels and ``Cluster.labels``).

    Examples:
        >>> from rl_lustre.spec import ClusterSpec
        >>> plan = gke_plan(ClusterSpec(name="demo", project="my-project", region="us-east1",
        ...                             zone="us-east1-b", fabric="tcp"))
        >>> len(plan), plan.keys()[:6]
        (24, ['network', 'subnet', 'psa-range', 'psa-peering', 'firewall-lustre', 'lustre'])
    """
    assert cluster.project is not None
    assert cluster.region is not None
    assert cluster.zone is not None
    ours = {**ownership_labels(cluster.name), **cluster.labels}
    created: dict[str, Any] = {"action": "create", "labels": ours}
    resources = [
        *vpc_nodes(cluster, created),
        *psa_nodes(cluster, created),
        lustre_instance(cluster),
        *fabric_nodes(cluster, ours),
        gke_cluster(cluster, created),
        *preload_nodes(cluster),
        *_present(node_account(cluster, created)),
        cpu_pool(cluster, created),
        compute_class(cluster, created),
        gpu_pool(cluster, created),
        *volume_claim_nodes(cluster, created),
        *_present(secret(cluster, created)),
        *head_access_nodes(cluster, created),
        ray_cluster(cluster, created),
        keeper_node(cluster, created),
        *startup_nodes(cluster),
        *warmstart_nodes(cluster, prefetch=bool(cluster.prefetch_models)),
        *results_nodes(cluster),
    ]
    return Plan(
        cluster_name=cluster.name,
        backend="gke",
        resources=resources,
        project=cluster.project,
        region=cluster.region,
        zone=cluster.zone,
    )


def lustre_nic_settings(cluster: ClusterSpec) -> dict[str, bool]:
    """The Lustre CSI driver's NIC setting: multi-NIC off on the RDMA fabric.

    From GKE 1.35.2-gke.1842000 (``catalog.LUSTRE_MULTI_NIC_MIN_GKE``) the driver configures
    every suitable NIC of a node for Lustre and expects all standard NICs in one VPC; ``fabric="rdma"`` puts eth1 on a
    second gVNIC VPC (the A4 blueprint's GPU network), which has no route to the Lustre
    instance (reached through the primary VPC's private services access). So the driver
    keeps to eth0 there; the RoCE NICs are not standard NICs and carry NCCL, not Lustre.

    Examples:
        >>> from rl_lustre.spec import ClusterSpec
        >>> lustre_nic_settings(ClusterSpec(name="d", project="my-project", region="us-east1", zone="us-east1-b"))
        {'disable_multi_nic': True}
        >>> lustre_nic_settings(ClusterSpec(name="d", project="my-project", region="us-east1", zone="us-east1-b",
        ...                                 fabric="tcp"))
        {}
    """
    return {"disable_multi_nic": True} if cluster.fabric == "rdma" else {}


def control_plane_access(cluster: ClusterSpec) -> dict[str, Any]:
    """Who reaches the GKE control plane, and how: the settings of the ``gke-cluster`` node
    for its DNS and IP endpoints.

    The DNS endpoint admits any caller with IAM permission on the cluster, from anywhere,
    so ``up()`` and the SDK reach the API without an IP allow-list; the IP endpoint stays
    behind master authorized networks with only the user's blocks
    (``Cluster.authorized_networks``).

    Examples:
        >>> from rl_lustre.spec import ClusterSpec
        >>> spec = ClusterSpec(name="d", project="my-project", region="us-east1", zone="us-east1-b",
        ...                    authorized_networks=["203.0.113.7/32"])
        >>> control_plane_access(spec)["master_authorized_networks"]
        {'enabled': True, 'cidr_blocks': ['203.0.113.7/32'], 'public_access': 'IP endpoint: only the listed blocks'}
    """
    if cluster.authorized_networks:
        blocks = list(cluster.authorized_networks)
        public = (
            "IP endpoint: the whole internet (public_control_plane=True)"
            if {"0.0.0.0/0", "::/0"} & set(blocks)
            else "IP endpoint: only the listed blocks"
        )
    else:
        blocks = []
        public = (
            "IP endpoint: no client on a public address; rl_lustre uses the DNS endpoint (IAM-gated). "
            "List blocks in Cluster(authorized_networks=[...]) to open the IP endpoint to them"
        )
    return {
        "master_authorized_networks": {"enabled": True, "cidr_blocks": blocks, "public_access": public},
        "control_plane_endpoints": {
            "dns_endpoint": {
                "allow_external_traffic": True,
                "access": "callers with IAM permission on the cluster, from any address",
            },
            "ip_endpoint": {
                "enabled": True,
                "public_endpoint": True,
                "access": "master_authorized_networks only",
            },
        },
    }


def gke_cluster(cluster: ClusterSpec, created: dict[str, Any]) -> PlannedResource:
    """The ``gke-cluster`` node (``created``: its action and labels): a regional cluster
    with its nodes in the cluster's zone, the Lustre CSI driver and Ray operator add-ons,
    Workload Identity, and the CPU pool as its initial node pool (so no default pool is
    made and deleted).

    It waits for the subnet and the node account only: the Lustre branch runs beside it.

    Examples:
        >>> from rl_lustre.spec import ClusterSpec
        >>> node = gke_cluster(ClusterSpec(name="demo", project="my-project", region="us-east1",
        ...                                zone="us-east1-b"), {"action": "create"})
        >>> node.depends_on, node.settings["network_config"]
        (('subnet', 'node-sa'), {'datapath_provider': 'ADVANCED_DATAPATH', 'enable_multi_networking': True})
    """
    extra: dict[str, Any] = {}
    if cluster.fabric == "rdma":
        extra["network_config"] = {"datapath_provider": "ADVANCED_DATAPATH", "enable_multi_networking": True}
    if cluster.maintenance_exclusion is not None:
        extra["maintenance_exclusion"] = {
            "name": MAINTENANCE_EXCLUSION_NAME,
            "scope": cluster.maintenance_exclusion,
            "start": "when the cluster is created",
            "end_time_behavior": "UNTIL_END_OF_SUPPORT",
        }
    return PlannedResource(
        key=GKE_CLUSTER_KEY,
        kind="container.v1.Cluster",
        name=naming.gke_cluster_name(cluster),
        # Its initial pool (the CPU pool) runs as the node account.
        depends_on=(SUBNET_KEY, *node_account_keys(cluster)),
        settings={
            "region": cluster.region,
            "location": naming.gke_cluster_location(cluster),
            "node_locations": [cluster.zone],
            "network": naming.network_name(cluster),
            "subnetwork": cluster_subnet(cluster),
            "ip_allocation_policy": ip_allocation(cluster),
            "addons": {
                "lustre_csi_driver_config": {
                    "enabled": True,
                    "enable_legacy_lustre_port": False,
                    **lustre_nic_settings(cluster),
                },
                # Ray's logs and metrics leave the head as they are written (Cloud Logging,
                # Managed Prometheus): a lost head, or a deleted cluster, keeps them.
                "ray_operator_config": {
                    "enabled": True,
                    "ray_cluster_logging_config": {"enabled": True},
                    "ray_cluster_monitoring_config": {"enabled": True},
                },
            },
            **control_plane_access(cluster),
            "workload_identity_pool": f"{cluster.project}.svc.id.goog",
            "release_channel": RELEASE_CHANNEL,
            # The Lustre CSI driver reaches Lustre on port 988 (legacy port off) from here on.
            "min_version": LUSTRE_PORT_988_MIN_GKE,
            **extra,
            # GKE needs a node pool at creation: the CPU pool is that pool, so no
            # default pool is created and then deleted.
            "initial_node_pool": f"{CPU_POOL_KEY} (created with the cluster; hosts system pods)",
        },
        **created,
    )


def _present(*nodes: PlannedResource | None) -> list[PlannedResource]:
    """The nodes a builder made (a builder returns None for a node the cluster does not have)."""
    return [n for n in nodes if n is not None]
