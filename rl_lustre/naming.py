"""Names of the resources a deployment creates, derived from the ``Cluster`` in one place.

The plan, the provisioning graph and the Kubernetes manifests all use these, so a
resource is always found again under the name it was created with.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .spec import ClusterSpec


def network_name(cluster: ClusterSpec) -> str:
    return cluster.network_name


def subnet_name(cluster: ClusterSpec) -> str:
    return f"{cluster.name}-subnet"


def gvnic_network_name(cluster: ClusterSpec) -> str:
    """The second gVNIC VPC of ``fabric="rdma"`` (node NIC eth1)."""
    return f"{cluster.name}-gvnic-net"


def gvnic_subnet_name(cluster: ClusterSpec) -> str:
    return f"{cluster.name}-gvnic-sub"


def rdma_network_name(cluster: ClusterSpec) -> str:
    """The RoCE VPC of ``fabric="rdma"`` (GPU NICs eth2...)."""
    return f"{cluster.name}-rdma-net"


def rdma_subnet_name(cluster: ClusterSpec, index: int) -> str:
    """The RoCE subnet of GPU NIC ``index``."""
    return f"{cluster.name}-rdma-sub-{index}"


def psa_range_name(cluster: ClusterSpec) -> str:
    return f"{cluster.name}-psa"


def firewall_name(cluster: ClusterSpec) -> str:
    return f"{cluster.name}-allow-lustre"


def cpu_pool_name(cluster: ClusterSpec) -> str:
    """The on-demand CPU pool that hosts the Ray head."""
    return "ray-head-pool"


def gpu_pool_name(cluster: ClusterSpec) -> str:
    """The (Spot) GPU pool that hosts the Ray workers."""
    return "gpu-pool"


def pv_name(cluster: ClusterSpec) -> str:
    return f"{cluster.name}-lustre-pv"


def pvc_name(cluster: ClusterSpec) -> str:
    """Per deployment: two deployments in one namespace (a shared cluster) must not share it."""
    return f"{cluster.name}-lustre-pvc"


def secret_name(cluster: ClusterSpec) -> str:
    return f"{cluster.name}-job-secrets"


def prepull_name(cluster: ClusterSpec) -> str:
    return f"{cluster.name}-image-prepull"


def prefetch_name(cluster: ClusterSpec) -> str:
    return f"{cluster.name}-model-prefetch"


def raycluster_name(cluster: ClusterSpec) -> str:
    return cluster.name
