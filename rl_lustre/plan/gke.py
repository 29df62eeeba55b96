"""The GKE backend's plan: VPC, private services access, Managed Lustre, the GKE cluster
and its pools (:mod:`rl_lustre.plan.nodepools`), and the Kubernetes objects, as one
dependency graph."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import naming
from ..catalog import (
    FABRIC_MTU,
    GKE_ACCELERATOR_LABEL,
    GPU_RESOURCE,
    LUSTRE_CSI_DRIVER,
    LUSTRE_PORT_988_MIN_GKE,
    ownership_labels,
)
from ..plankeys import (
    CPU_POOL_KEY,
    FIREWALL_LUSTRE_KEY,
    GKE_CLUSTER_KEY,
    GPU_POOL_KEY,
    LUSTRE_KEY,
    NETWORK_KEY,
    PSA_PEERING_KEY,
    PSA_RANGE_KEY,
    PV_KEY,
    PVC_KEY,
    RAYCLUSTER_KEY,
    SECRET_KEY,
    SUBNET_KEY,
)
from .fabric import fabric_nodes, ray_dependency_keys
from .graph import Plan, PlannedResource
from .lustre import instance_labels, instance_settings
from .nodepools import cpu_pool, gpu_pool, node_account, node_account_keys, standby_pool
from .preload import preload_nodes
from .startup import startup_nodes
from .warmstart import warmstart_nodes

if TYPE_CHECKING:
    from ..spec import ClusterSpec

__all__ = ["gke_plan"]

# Cluster Toolkit's defaults (examples/gke-a4, gke-managed-lustre): a /18 primary range,
# a /14 for pods and a /20 for services, and a /22 private services access range.
SUBNET_CIDR = "192.168.0.0/18"
PODS_CIDR = "10.4.0.0/14"
SERVICES_CIDR = "10.0.32.0/20"
PODS_RANGE_NAME = "pods"
SERVICES_RANGE_NAME = "services"
PSA_PREFIX_LENGTH = 22
# In our own network we pick the PSA block ourselves, clear of the ranges above, so the
# range is reserved beside the subnet instead of after it (Lustre's branch is the long one).
PSA_ADDRESS = "10.90.0.0"
# Service Networking names the VPC peering it creates after the service.
PSA_PEERING_NAME = "servicenetworking-googleapis-com"
LUSTRE_PORT = 988
RELEASE_CHANNEL = "REGULAR"
MAINTENANCE_EXCLUSION_NAME = "rl-lustre-no-node-recreation"


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


def gke_plan(cluster: ClusterSpec) -> Plan:
    assert cluster.volume is not None
    assert cluster.project is not None
    assert cluster.region is not None
    assert cluster.zone is not None
    project, region, zone = cluster.project, cluster.region, cluster.zone
    ours = {**ownership_labels(cluster.name), **cluster.labels}
    own_network = cluster.network is None
    net = naming.network_name(cluster)
    # A user's network is used as it is; GKE then picks its subnet in the region, which
    # in an auto-mode network carries the network's name.
    subnet = naming.subnet_name(cluster) if own_network else net
    vol = cluster.volume
    volume_handle = naming.lustre_volume_handle(vol)
    assert vol.capacity_gib is not None
    created: dict[str, Any] = {"action": "create", "labels": ours}
    if own_network:
        net_fields: dict[str, Any] = created
        # Jumbo frames: Managed Lustre documents up to 10% more throughput at 8896.
        net_settings: dict[str, Any] = {"auto_create_subnetworks": False, "routing_mode": "REGIONAL", "mtu": FABRIC_MTU}
        subnet_settings: dict[str, Any] = {
            "region": region,
            "ip_cidr_range": SUBNET_CIDR,
            "secondary_ip_ranges": {PODS_RANGE_NAME: PODS_CIDR, SERVICES_RANGE_NAME: SERVICES_CIDR},
            "private_ip_google_access": True,
        }
        ip_allocation: dict[str, Any] = {
            "use_ip_aliases": True,
            "cluster_secondary_range_name": PODS_RANGE_NAME,
            "services_secondary_range_name": SERVICES_RANGE_NAME,
        }
    else:
        net_fields = {"action": "use"}
        net_settings = {"existing": True}
        subnet_settings = {"region": region, "existing": True}
        # GKE adds these as secondary ranges of the user's subnet.
        ip_allocation = {
            "use_ip_aliases": True,
            "cluster_ipv4_cidr_block": PODS_CIDR,
            "services_ipv4_cidr_block": SERVICES_CIDR,
        }

    # The control plane's DNS endpoint admits any caller with IAM permission on the
    # cluster, from anywhere, so up() and the SDK reach the API without an IP allow-list;
    # the IP endpoint stays behind master authorized networks with only the user's blocks.
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

    head_pool = naming.gpu_pool_name(cluster) if cluster.head_on_gpu_pool else naming.cpu_pool_name(cluster)
    cluster_fabric: dict[str, Any] = {}
    if cluster.fabric == "rdma":
        cluster_fabric["network_config"] = {"datapath_provider": "ADVANCED_DATAPATH", "enable_multi_networking": True}
    if cluster.maintenance_exclusion is not None:
        cluster_fabric["maintenance_exclusion"] = {
            "name": MAINTENANCE_EXCLUSION_NAME,
            "scope": cluster.maintenance_exclusion,
            "start": "when the cluster is created",
            "end_time_behavior": "UNTIL_END_OF_SUPPORT",
        }

    resources: list[PlannedResource] = [
        PlannedResource(key=NETWORK_KEY, kind="compute.v1.Network", name=net, settings=net_settings, **net_fields),
        PlannedResource(
            key=SUBNET_KEY,
            kind="compute.v1.Subnetwork",
            name=subnet,
            depends_on=(NETWORK_KEY,),
            settings={"network": net, **subnet_settings},
            **net_fields,
        ),
        # Our network: the block is ours to pick (PSA_ADDRESS), so the range is reserved
        # beside the subnet. A user's network: Google picks the block among addresses the
        # VPC does not use yet, so it comes after the subnet whose ranges it must avoid.
        PlannedResource(
            key=PSA_RANGE_KEY,
            kind="compute.v1.GlobalAddress",
            name=naming.psa_range_name(cluster),
            depends_on=(NETWORK_KEY,) if own_network else (SUBNET_KEY,),
            settings={
                "network": net,
                "purpose": "VPC_PEERING",
                "address_type": "INTERNAL",
                "prefix_length": PSA_PREFIX_LENGTH,
                **({"address": PSA_ADDRESS} if own_network else {}),
            },
            **created,
        ),
        PlannedResource(
            key=PSA_PEERING_KEY,
            kind="servicenetworking.v1.Connection",
            name=PSA_PEERING_NAME,
            depends_on=(PSA_RANGE_KEY,),
            settings={
                "network": net,
                "service": "servicenetworking.googleapis.com",
                "reserved_peering_ranges": [naming.psa_range_name(cluster)],
            },
            **created,
        ),
        # Its source is the PSA block, known once the range is allocated.
        PlannedResource(
            key=FIREWALL_LUSTRE_KEY,
            kind="compute.v1.Firewall",
            name=naming.firewall_name(cluster),
            depends_on=(PSA_RANGE_KEY,),
            settings={
                "network": net,
                "direction": "INGRESS",
                "allow": [{"protocol": "tcp", "ports": [str(LUSTRE_PORT)]}],
                "source_ranges_from": PSA_RANGE_KEY,
            },
            **created,
        ),
        PlannedResource(
            key=LUSTRE_KEY,
            kind="lustre.v1.Instance",
            name=vol.name,
            depends_on=(PSA_PEERING_KEY, FIREWALL_LUSTRE_KEY),
            # What the request sends (plan/lustre.py), and the throughput it amounts to.
            settings={
                **instance_settings(vol),
                "aggregate_throughput_mbps": vol.throughput_mbps,
                **({"existing": True} if vol.existing else {}),
            },
            **(
                {"action": "use"}
                if vol.existing
                else {
                    "action": "create",
                    "labels": instance_labels(vol, deployment=cluster.name, labels=cluster.labels),
                }
            ),
        ),
        PlannedResource(
            key=GKE_CLUSTER_KEY,
            kind="container.v1.Cluster",
            name=naming.gke_cluster_name(cluster),
            # Its initial pool (the CPU pool) runs as the node account.
            depends_on=(SUBNET_KEY, *node_account_keys(cluster)),
            settings={
                "region": region,
                "location": naming.gke_cluster_location(cluster),
                "node_locations": [zone],
                "network": net,
                "subnetwork": subnet,
                "ip_allocation_policy": ip_allocation,
                "addons": {
                    "lustre_csi_driver_config": {
                        "enabled": True,
                        "enable_legacy_lustre_port": False,
                        **lustre_nic_settings(cluster),
                    },
                    "ray_operator_config": {"enabled": True},
                },
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
                "workload_identity_pool": f"{project}.svc.id.goog",
                "release_channel": RELEASE_CHANNEL,
                # The Lustre CSI driver reaches Lustre on port 988 (legacy port off) from here on.
                "min_version": LUSTRE_PORT_988_MIN_GKE,
                **cluster_fabric,
                # GKE needs a node pool at creation: the CPU pool is that pool, so no
                # default pool is created and then deleted.
                "initial_node_pool": f"{CPU_POOL_KEY} (created with the cluster; hosts system pods)",
            },
            **created,
        ),
        *preload_nodes(cluster),
        *[n for n in (node_account(cluster, created),) if n is not None],
        cpu_pool(cluster, created),
        gpu_pool(cluster, created),
        *[n for n in (standby_pool(cluster, created),) if n is not None],
        # Needs only the API server and the instance's address, not the node pools.
        PlannedResource(
            key=PV_KEY,
            kind="v1/PersistentVolume",
            name=naming.pv_name(cluster),
            depends_on=(LUSTRE_KEY, GKE_CLUSTER_KEY),
            settings={
                "scope": "cluster",
                "csi_driver": LUSTRE_CSI_DRIVER,
                "volume_handle": volume_handle,
                "ip_and_filesystem_from": "the lustre instance's mount point",
                "filesystem": vol.filesystem,
                "capacity": f"{vol.capacity_gib}Gi",
                "access_modes": ["ReadWriteMany"],
            },
            **created,
        ),
        PlannedResource(
            key=PVC_KEY,
            kind="v1/PersistentVolumeClaim",
            name=naming.pvc_name(cluster),
            depends_on=(PV_KEY,),
            settings={
                "namespace": cluster.namespace,
                "volume_name": naming.pv_name(cluster),
                "storage": f"{vol.capacity_gib}Gi",
                "access_modes": ["ReadWriteMany"],
                "storage_class_name": "",
            },
            **created,
        ),
    ]
    # Listed after Lustre so that the plan reads storage first; the graph decides the order.
    after_lustre = [r.key for r in resources].index(LUSTRE_KEY) + 1
    resources[after_lustre:after_lustre] = fabric_nodes(cluster, ours)
    ray_deps = [PVC_KEY, CPU_POOL_KEY, GPU_POOL_KEY]
    if cluster.secrets:
        resources.append(
            PlannedResource(
                key=SECRET_KEY,
                kind="v1/Secret",
                name=naming.secret_name(cluster),
                depends_on=(GKE_CLUSTER_KEY,),
                settings={
                    "namespace": cluster.namespace,
                    "type": "Opaque",
                    "keys": list(cluster.secrets),
                    "values": "read from this process's environment at up(); never part of the plan",
                },
                **created,
            )
        )
        ray_deps.insert(1, SECRET_KEY)
    ray_deps += ray_dependency_keys(cluster)
    resources.append(
        PlannedResource(
            key=RAYCLUSTER_KEY,
            kind="ray.io/v1/RayCluster",
            name=naming.raycluster_name(cluster),
            depends_on=tuple(ray_deps),
            settings={
                "namespace": cluster.namespace,
                "image": cluster.image,
                "ray_version": cluster.ray_version,
                "head": {"node_pool": head_pool, "spot": cluster.spot and cluster.head_on_gpu_pool},
                "workers": {
                    "replicas": cluster.num_nodes,
                    "gpus_per_worker": cluster.gpus_per_node,
                    "node_pool": naming.gpu_pool_name(cluster),
                    "node_selector": {GKE_ACCELERATOR_LABEL: cluster.accelerator_type},
                    "tolerations": [GPU_RESOURCE],
                },
                "volume": {"claim": naming.pvc_name(cluster), "mount_path": cluster.mount_path},
                "shm": "memory-backed emptyDir at /dev/shm",
                **_fabric_ray_settings(cluster),
                "head_service": cluster.head_service,
                **(
                    {
                        "secrets": {
                            "secret": naming.secret_name(cluster),
                            "env_from_secret_key_ref": list(cluster.secrets),
                        }
                    }
                    if cluster.secrets
                    else {}
                ),
            },
            **created,
        )
    )
    resources += startup_nodes(cluster)
    resources += warmstart_nodes(cluster, prefetch=bool(cluster.prefetch_models))
    return Plan(
        cluster_name=cluster.name, backend="gke", resources=resources, project=project, region=region, zone=zone
    )


def _fabric_ray_settings(cluster: ClusterSpec) -> dict[str, Any]:
    from ..kube.fabric import worker_fabric_summary

    return worker_fabric_summary(cluster)
