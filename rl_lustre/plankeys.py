"""Every plan key: the stable id of each node of a deployment's plan, in one place.

A plan key (``"gpu-pool"``) names a *node of the plan*; the provisioning executor maps it,
with the node's kind, to the driver that creates the resource, and the cost, the
inventory, the manifests and the backends find a node again by it. It is not the name
of the resource in its API: the GKE node pool behind the ``"gpu-pool"`` node is named
by :func:`rl_lustre.naming.gpu_pool_name` (which happens to spell ``gpu-pool`` too),
the one behind ``"cpu-pool"`` is ``ray-head-pool`` (:func:`rl_lustre.naming.cpu_pool_name`).
Names come from :mod:`rl_lustre.naming`, keys from here.

Each constant is named after its key (``GKE_CLUSTER_KEY = "gke-cluster"``); keys that
come in families (one subnet per RoCE NIC, two Kubernetes objects per extra node
network) are made by the functions below. ``tests/test_layers.py`` fails when another
module of the package, the fakes included, spells one of these keys (but the six that are
also ordinary words and API field names, ``network``, ``subnet``, ``lustre``, ``pv``,
``pvc`` and ``secret``: use the constants for those all the same).

Why a top-level module and not ``plan/keys.py``: importing any module under ``plan/``
runs ``plan/__init__.py``, which builds plans and so imports ``kube.manifests``; the
manifests (and ``kube.fabric``) are keyed by plan key too, so they would import the plan
package that imports them, an import cycle. This module imports nothing, so every layer
from the specs up may use it.

Examples:
    >>> from rl_lustre import Cluster
    >>> plan = Cluster(name="demo", project="my-project", region="us-east1", zone="us-east1-b").plan()
    >>> plan.get(GKE_CLUSTER_KEY).kind, plan.get(rdma_subnet_key(7)).name
    ('container.v1.Cluster', 'demo-rdma-sub-7')
    >>> podnet_key("rdma-0") in plan.get(RAYCLUSTER_KEY).depends_on
    True
"""

from __future__ import annotations

__all__ = [
    "COMPUTE_CLASS_KEY",
    "CPU_POOL_KEY",
    "FIREWALL_LUSTRE_KEY",
    "GKE_CLUSTER_KEY",
    "GPU_POOL_KEY",
    "GVNIC_NETWORK_KEY",
    "GVNIC_SUBNET_KEY",
    "HEAD_ACCOUNT_KEY",
    "HEAD_BINDING_KEY",
    "HEAD_NODES_BINDING_KEY",
    "HEAD_NODES_ROLE_KEY",
    "HEAD_ROLE_KEY",
    "IMAGE_PREPULL_KEY",
    "KEEPER_KEY",
    "LUSTRE_KEY",
    "MODEL_PREFETCH_KEY",
    "NCCL_INSTALLER_KEY",
    "NETWORK_KEY",
    "NODE_SA_KEY",
    "PRELOAD_IMAGE_KEY",
    "PSA_PEERING_KEY",
    "PSA_RANGE_KEY",
    "PVC_KEY",
    "PV_KEY",
    "RAYCLUSTER_KEY",
    "RAY_HEAD_KEY",
    "RDMA_NETWORK_KEY",
    "RESULTS_EXPORT_KEY",
    "SECRET_KEY",
    "SUBNET_KEY",
    "VOLUME_DIR_KEY",
    "WARM_EXPORT_KEY",
    "WARM_IMPORT_KEY",
    "netparams_key",
    "podnet_key",
    "rdma_subnet_key",
]

# -- GKE: the network and the Lustre branch ------------------------------------------------
NETWORK_KEY = "network"
SUBNET_KEY = "subnet"
PSA_RANGE_KEY = "psa-range"
PSA_PEERING_KEY = "psa-peering"
FIREWALL_LUSTRE_KEY = "firewall-lustre"
LUSTRE_KEY = "lustre"
WARM_IMPORT_KEY = "warm-import"
WARM_EXPORT_KEY = "warm-export"
# Where the runs' results go at down() (Cluster.results): a bucket, used, never created.
RESULTS_EXPORT_KEY = "results-export"

# -- GKE: the cluster, its nodes' account, its node pools and the preloaded image ----------
NODE_SA_KEY = "node-sa"
GKE_CLUSTER_KEY = "gke-cluster"
CPU_POOL_KEY = "cpu-pool"
GPU_POOL_KEY = "gpu-pool"
PRELOAD_IMAGE_KEY = "preload-image"

# -- GKE: the GPUDirect-RDMA fabric (fabric="rdma") ----------------------------------------
GVNIC_NETWORK_KEY = "gvnic-network"
GVNIC_SUBNET_KEY = "gvnic-subnet"
RDMA_NETWORK_KEY = "rdma-network"
NCCL_INSTALLER_KEY = "nccl-installer"

# -- GKE: the Kubernetes objects -----------------------------------------------------------
PV_KEY = "pv"
PVC_KEY = "pvc"
SECRET_KEY = "secret"
RAYCLUSTER_KEY = "raycluster"
# The keeper's Deployment (and its ServiceAccount, Role, RoleBinding, ConfigMap): rl_lustre.kube.keeper.
KEEPER_KEY = "keeper"
# The Ray head's service account, and the Role and RoleBinding that let it read its pods' events.
HEAD_ACCOUNT_KEY = "head-account"
HEAD_ROLE_KEY = "head-role"
HEAD_BINDING_KEY = "head-role-binding"
# ... and the ClusterRole and ClusterRoleBinding that let it get Nodes (when a flex-start node ends).
HEAD_NODES_ROLE_KEY = "head-nodes-role"
HEAD_NODES_BINDING_KEY = "head-nodes-role-binding"
COMPUTE_CLASS_KEY = "compute-class"
IMAGE_PREPULL_KEY = "image-prepull"
MODEL_PREFETCH_KEY = "model-prefetch"

# -- The local backend ---------------------------------------------------------------------
VOLUME_DIR_KEY = "volume-dir"
RAY_HEAD_KEY = "ray-head"


def rdma_subnet_key(index: int) -> str:
    """The plan key of the RoCE subnet of GPU NIC ``index`` (``rdma-subnet-0`` ... ``rdma-subnet-7`` on A4).

    Examples:
        >>> rdma_subnet_key(3)
        'rdma-subnet-3'
    """
    return f"rdma-subnet-{index}"


def netparams_key(network: str) -> str:
    """The plan key of the GKENetworkParamSet of the node network ``network`` (``gvnic-1``, ``rdma-0``).

    Examples:
        >>> netparams_key("rdma-0")
        'netparams-rdma-0'
    """
    return f"netparams-{network}"


def podnet_key(network: str) -> str:
    """The plan key of the pod Network (``networking.gke.io/v1``) of the node network ``network``.

    Examples:
        >>> podnet_key("gvnic-1")
        'podnet-gvnic-1'
    """
    return f"podnet-{network}"
