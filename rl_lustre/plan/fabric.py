"""The GPUDirect-RDMA fabric's part of a GKE plan (``Cluster.fabric == "rdma"``).

What the Cluster Toolkit A4 blueprint builds for the GPU network, as plan nodes:

- a second gVNIC VPC with one subnet (node NIC eth1), and a RoCE VPC on the zone's
  ``<zone>-vpc-roce`` network profile with one subnet per GPU NIC (eth2..eth9), all at
  MTU 8896 and with no firewall rules (RDMA networks accept none);
- one ``GKENetworkParamSet`` and one ``Network`` (``networking.gke.io/v1``) per extra
  network, so pods can attach to them;
- the gIB NCCL plugin installer DaemonSet.

The GPU pool waits for the subnets (its nodes get one NIC per subnet); the RayCluster
waits for the pod networks and the installer. None of it is on the Lustre branch.
"""

from __future__ import annotations

import ipaddress
from typing import TYPE_CHECKING, Any

from .. import naming
from ..catalog import FABRIC_MTU, GKE_ACCELERATOR_LABEL
from ..kube.fabric import GIB_IMAGE, INSTALLER_NAME, INSTALLER_NAMESPACE, extra_networks, rdma_nics
from ..plankeys import (
    GKE_CLUSTER_KEY,
    GVNIC_NETWORK_KEY,
    GVNIC_SUBNET_KEY,
    NCCL_INSTALLER_KEY,
    RDMA_NETWORK_KEY,
    netparams_key,
    podnet_key,
    rdma_subnet_key,
)
from .graph import PlannedResource

if TYPE_CHECKING:
    from ..spec import ClusterSpec

__all__ = [
    "GVNIC_SUBNET_CIDR",
    "RDMA_RANGE",
    "extra_networks",
    "fabric_nodes",
    "gpu_pool_subnet_keys",
    "ray_dependency_keys",
]

# The blueprint's ranges: net-1 192.168.64.0/18, the RoCE subnets /21s of 192.168.128.0/18.
GVNIC_SUBNET_CIDR = "192.168.64.0/18"
RDMA_RANGE = "192.168.128.0/18"


def gpu_pool_subnet_keys(cluster: ClusterSpec) -> tuple[str, ...]:
    """Plan keys the GPU pool waits for: one subnet per extra node NIC."""
    return tuple(n["subnet_key"] for n in extra_networks(cluster))


def ray_dependency_keys(cluster: ClusterSpec) -> tuple[str, ...]:
    """Plan keys the RayCluster waits for: the pod networks its workers attach to and
    the NCCL plugin installer."""
    if cluster.fabric != "rdma":
        return ()
    return (
        *(podnet_key(n["k8s_name"]) for n in extra_networks(cluster) if n["device_mode"] == "RDMA"),
        NCCL_INSTALLER_KEY,
    )


def fabric_nodes(cluster: ClusterSpec, labels: dict[str, str]) -> list[PlannedResource]:
    """The fabric's plan nodes (none for ``fabric="tcp"``).

    Examples:
        >>> from rl_lustre import Cluster
        >>> c = Cluster(name="demo", project="my-project", region="us-east1", zone="us-east1-b")
        >>> nodes = {n.key: n for n in fabric_nodes(c, {})}
        >>> nodes["rdma-network"].settings["network_profile"]
        'projects/my-project/global/networkProfiles/us-east1-b-vpc-roce'
        >>> nodes["rdma-subnet-7"].settings["ip_cidr_range"], nodes["podnet-rdma-7"].depends_on
        ('192.168.184.0/21', ('netparams-rdma-7',))
    """
    if cluster.fabric != "rdma":
        return []
    assert cluster.project is not None
    assert cluster.region is not None
    assert cluster.zone is not None
    project, region, zone = cluster.project, cluster.region, cluster.zone
    created: dict[str, Any] = {"action": "create", "labels": labels}
    gvnic_net, rdma_net = naming.gvnic_network_name(cluster), naming.rdma_network_name(cluster)
    nics = rdma_nics(cluster)
    rdma_blocks = list(ipaddress.ip_network(RDMA_RANGE).subnets(new_prefix=21))[:nics]
    nodes = [
        PlannedResource(
            key=GVNIC_NETWORK_KEY,
            kind="compute.v1.Network",
            name=gvnic_net,
            settings={
                "auto_create_subnetworks": False,
                "routing_mode": "REGIONAL",
                "mtu": FABRIC_MTU,
                "purpose": "second host NIC (gVNIC, node eth1)",
            },
            **created,
        ),
        PlannedResource(
            key=GVNIC_SUBNET_KEY,
            kind="compute.v1.Subnetwork",
            name=naming.gvnic_subnet_name(cluster),
            depends_on=(GVNIC_NETWORK_KEY,),
            settings={
                "network": gvnic_net,
                "region": region,
                "ip_cidr_range": GVNIC_SUBNET_CIDR,
                "secondary_ip_ranges": {},
                "private_ip_google_access": True,
            },
            **created,
        ),
        PlannedResource(
            key=RDMA_NETWORK_KEY,
            kind="compute.v1.Network",
            name=rdma_net,
            settings={
                "auto_create_subnetworks": False,
                "routing_mode": "REGIONAL",
                "mtu": FABRIC_MTU,
                "network_profile": f"projects/{project}/global/networkProfiles/{zone}-vpc-roce",
                "firewall_rules": "none (RDMA networks accept none)",
                "purpose": f"GPU-to-GPU RoCE traffic ({nics} x MRDMA NICs per node)",
            },
            **created,
        ),
    ]
    for i, block in enumerate(rdma_blocks):
        nodes.append(
            PlannedResource(
                key=rdma_subnet_key(i),
                kind="compute.v1.Subnetwork",
                name=naming.rdma_subnet_name(cluster, i),
                depends_on=(RDMA_NETWORK_KEY,),
                settings={
                    "network": rdma_net,
                    "region": region,
                    "ip_cidr_range": str(block),
                    "secondary_ip_ranges": {},
                    "private_ip_google_access": False,
                },
                **created,
            )
        )
    for net in extra_networks(cluster):
        name = net["k8s_name"]
        nodes.append(
            PlannedResource(
                key=netparams_key(name),
                kind="networking.gke.io/v1/GKENetworkParamSet",
                name=name,
                depends_on=(GKE_CLUSTER_KEY, net["subnet_key"]),
                settings={
                    "scope": "cluster",
                    "vpc": net["network"],
                    "vpc_subnet": net["subnet"],
                    "device_mode": net["device_mode"],
                    "node_interface": net["interface"],
                },
                **created,
            )
        )
        nodes.append(
            PlannedResource(
                key=podnet_key(name),
                kind="networking.gke.io/v1/Network",
                name=name,
                depends_on=(netparams_key(name),),
                settings={
                    "scope": "cluster",
                    "type": "Device",
                    "parameters": f"GKENetworkParamSet {name}",
                    "attached_to_ray_workers": net["device_mode"] == "RDMA",
                },
                **created,
            )
        )
    nodes.append(
        PlannedResource(
            key=NCCL_INSTALLER_KEY,
            kind="apps/v1/DaemonSet",
            name=INSTALLER_NAME,
            depends_on=(GKE_CLUSTER_KEY,),
            settings={
                "namespace": INSTALLER_NAMESPACE,
                "image": GIB_IMAGE,
                "installs": "gIB NCCL plugin and NCCL into /home/kubernetes/bin/gib on every GPU node",
                "node_affinity": {GKE_ACCELERATOR_LABEL: cluster.accelerator_type},
            },
            **created,
        )
    )
    return nodes
