"""The network of a GKE plan: the VPC and its subnet, and the private services access
(PSA) that connects Managed Lustre to it.

- ``network`` and ``subnet`` (:func:`vpc_nodes`): our own custom-mode VPC at MTU 8896 with
  one subnet whose secondary ranges hold the pods and services, or the user's network
  (``Cluster(network=...)``), used as it is;
- ``psa-range``, ``psa-peering`` and ``firewall-lustre`` (:func:`psa_nodes`): the address
  block reserved for Google's services, the Service Networking peering that puts the
  Lustre instance in it, and the rule that lets Lustre traffic (tcp:988) in from it.

The Lustre branch starts here, so these nodes wait for as little as they can: in our own
network the PSA range is reserved beside the subnet, not after it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import naming
from ..catalog import FABRIC_MTU
from ..plankeys import FIREWALL_LUSTRE_KEY, NETWORK_KEY, PSA_PEERING_KEY, PSA_RANGE_KEY, SUBNET_KEY
from .graph import PlannedResource

if TYPE_CHECKING:
    from ..spec import ClusterSpec

__all__ = [
    "LUSTRE_PORT",
    "PODS_CIDR",
    "PSA_ADDRESS",
    "PSA_PEERING_NAME",
    "PSA_PREFIX_LENGTH",
    "SERVICES_CIDR",
    "SUBNET_CIDR",
    "cluster_subnet",
    "ip_allocation",
    "psa_nodes",
    "vpc_nodes",
]

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


def cluster_subnet(cluster: ClusterSpec) -> str:
    """The name of the subnet the GKE cluster's nodes are on: ours (``<name>-subnet``), or
    in a user's network the network's own name (GKE then picks its subnet in the region,
    which in an auto-mode network carries the network's name).

    Examples:
        >>> from rl_lustre.spec import ClusterSpec
        >>> spec = ClusterSpec(name="demo", project="my-project", region="us-east1", zone="us-east1-b")
        >>> cluster_subnet(spec), cluster_subnet(ClusterSpec(name="demo", project="my-project",
        ...     region="us-east1", zone="us-east1-b", network="corp-vpc"))
        ('demo-subnet', 'corp-vpc')
    """
    return naming.subnet_name(cluster) if cluster.network is None else naming.network_name(cluster)


def ip_allocation(cluster: ClusterSpec) -> dict[str, Any]:
    """The GKE cluster's IP allocation policy: the pods and services in the secondary
    ranges of our subnet, or, in a user's network, blocks GKE adds to its subnet.

    Examples:
        >>> from rl_lustre.spec import ClusterSpec
        >>> ip_allocation(ClusterSpec(name="demo", project="my-project", region="us-east1", zone="us-east1-b"))
        {'use_ip_aliases': True, 'cluster_secondary_range_name': 'pods', 'services_secondary_range_name': 'services'}
    """
    if cluster.network is None:
        return {
            "use_ip_aliases": True,
            "cluster_secondary_range_name": PODS_RANGE_NAME,
            "services_secondary_range_name": SERVICES_RANGE_NAME,
        }
    # GKE adds these as secondary ranges of the user's subnet.
    return {"use_ip_aliases": True, "cluster_ipv4_cidr_block": PODS_CIDR, "services_ipv4_cidr_block": SERVICES_CIDR}


def vpc_nodes(cluster: ClusterSpec, created: dict[str, Any]) -> list[PlannedResource]:
    """The ``network`` and ``subnet`` nodes: created (``created``: their action and labels)
    when the cluster names no network, else the user's, used as they are.

    Examples:
        >>> from rl_lustre.spec import ClusterSpec
        >>> spec = ClusterSpec(name="demo", project="my-project", region="us-east1", zone="us-east1-b")
        >>> [(n.key, n.name, n.action) for n in vpc_nodes(spec, {"action": "create"})]
        [('network', 'demo-net', 'create'), ('subnet', 'demo-subnet', 'create')]
        >>> vpc_nodes(spec, {"action": "create"})[0].settings["mtu"]
        8896
    """
    net = naming.network_name(cluster)
    if cluster.network is None:
        fields = created
        # Jumbo frames: Managed Lustre documents up to 10% more throughput at 8896.
        net_settings: dict[str, Any] = {"auto_create_subnetworks": False, "routing_mode": "REGIONAL", "mtu": FABRIC_MTU}
        subnet_settings: dict[str, Any] = {
            "region": cluster.region,
            "ip_cidr_range": SUBNET_CIDR,
            "secondary_ip_ranges": {PODS_RANGE_NAME: PODS_CIDR, SERVICES_RANGE_NAME: SERVICES_CIDR},
            "private_ip_google_access": True,
        }
    else:
        fields = {"action": "use"}
        net_settings = {"existing": True}
        subnet_settings = {"region": cluster.region, "existing": True}
    return [
        PlannedResource(key=NETWORK_KEY, kind="compute.v1.Network", name=net, settings=net_settings, **fields),
        PlannedResource(
            key=SUBNET_KEY,
            kind="compute.v1.Subnetwork",
            name=cluster_subnet(cluster),
            depends_on=(NETWORK_KEY,),
            settings={"network": net, **subnet_settings},
            **fields,
        ),
    ]


def psa_nodes(cluster: ClusterSpec, created: dict[str, Any]) -> list[PlannedResource]:
    """The ``psa-range``, ``psa-peering`` and ``firewall-lustre`` nodes (``created``: their
    action and labels), always created, in our network or the user's.

    In our network the block is ours to pick (:data:`PSA_ADDRESS`), so the range is
    reserved beside the subnet; in a user's network Google picks the block among addresses
    the VPC does not use yet, so it comes after the subnet whose ranges it must avoid. The
    firewall rule's source is the PSA block, known once the range is allocated.

    Examples:
        >>> from rl_lustre.spec import ClusterSpec
        >>> spec = ClusterSpec(name="demo", project="my-project", region="us-east1", zone="us-east1-b")
        >>> [(n.key, n.depends_on) for n in psa_nodes(spec, {"action": "create"})]
        [('psa-range', ('network',)), ('psa-peering', ('psa-range',)), ('firewall-lustre', ('psa-range',))]
    """
    own_network = cluster.network is None
    net = naming.network_name(cluster)
    return [
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
    ]
