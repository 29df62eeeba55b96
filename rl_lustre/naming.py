"""Names of the resources a deployment creates, derived from the ``Cluster`` in one place.

The spec, the plan, the provisioning graph, the Kubernetes manifests and the backends
all use these, so a resource is always found again under the name it was created with,
and finding one (the GKE cluster a submit talks to, say) needs no plan.

    >>> from rl_lustre.spec import ClusterSpec
    >>> c = ClusterSpec(name="demo", project="my-project", region="us-east1", zone="us-east1-b")
    >>> gke_cluster_path(c), head_service_name(c), default_volume_name(c)
    ('projects/my-project/locations/us-east1/clusters/demo', 'demo-head-svc', 'demo-lustre')
    >>> node_pool_path(c, gpu_pool_name(c))
    'projects/my-project/locations/us-east1/clusters/demo/nodePools/gpu-pool'
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .spec import ClusterSpec, VolumeSpec


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


# IAM's rule for a service account id (the part of its e-mail before the @).
SERVICE_ACCOUNT_ID_PATTERN = r"[a-z][a-z0-9-]{4,28}[a-z0-9]"
SERVICE_ACCOUNT_ID_RULE = (
    "must give a service account id of 6-30 characters [a-z][a-z0-9-]*[a-z0-9] "
    "('rl-<name>-nodes', or 'rl-<first 20 characters>-<hash>' for a longer name)"
)


def node_service_account_id(deployment: str) -> str:
    """The id of the service account a deployment's nodes run as (when it is not given
    one): ``rl-<name>-nodes``, or for a name longer than 21 characters its first 20 and a
    hash of the whole, so that two long names never share an account.

    Examples:
        >>> node_service_account_id("demo"), node_service_account_id("a-rather-long-deployment-name-here")
        ('rl-demo-nodes', 'rl-a-rather-long-deploy-412a53')
        >>> node_service_account_id("Demo_1")  # doctest: +NORMALIZE_WHITESPACE
        Traceback (most recent call last):
        ...
        rl_lustre.errors.ConfigError: Cluster.name='Demo_1': must give a service account id of 6-30 characters
        [a-z][a-z0-9-]*[a-z0-9] ('rl-<name>-nodes', or 'rl-<first 20 characters>-<hash>' for a longer name)
    """
    import hashlib
    import re

    account = f"rl-{deployment}-nodes"
    if len(account) > 30:
        account = f"rl-{deployment[:20].rstrip('-')}-{hashlib.sha256(deployment.encode()).hexdigest()[:6]}"
    if re.fullmatch(SERVICE_ACCOUNT_ID_PATTERN, account) is None:
        from .errors import ConfigError

        raise ConfigError("Cluster", "name", deployment, SERVICE_ACCOUNT_ID_RULE)
    return account


def service_account_email(project: str, account_id: str) -> str:
    """The e-mail of the service account ``account_id`` of ``project`` (a domain-scoped
    project ``example.com:p`` has ``...@p.example.com.iam.gserviceaccount.com``).

    Examples:
        >>> service_account_email("my-project", "rl-demo-nodes")
        'rl-demo-nodes@my-project.iam.gserviceaccount.com'
    """
    domain, _, project_id = project.rpartition(":")
    return f"{account_id}@{project_id}{'.' + domain if domain else ''}.iam.gserviceaccount.com"


def node_service_account_email(cluster: ClusterSpec) -> str:
    """The account both node pools run as: ``node_service_account`` (yours), else ours."""
    if cluster.node_service_account:
        return cluster.node_service_account
    return service_account_email(str(cluster.project), node_service_account_id(cluster.name))


def cpu_pool_name(cluster: ClusterSpec) -> str:
    """The on-demand CPU pool that hosts the Ray head."""
    return "ray-head-pool"


def gpu_pool_name(cluster: ClusterSpec) -> str:
    """The (Spot) GPU pool that hosts the Ray workers."""
    return "gpu-pool"


_LANE_POOL_KIND = {"reservation": "resv", "spot": "spot", "flex-start": "flex", "on-demand": "ondemand"}


def gpu_lane_pool_name(cluster: ClusterSpec, kind: str, zone: str) -> str:
    """The GPU pool of a capacity lane after the first (``gpu-flex-c``: flex-start in zone ``-c``)."""
    return f"gpu-{_LANE_POOL_KIND[kind]}-{zone.rsplit('-', 1)[1]}"


def gpu_standby_pool_name(cluster: ClusterSpec) -> str:
    """The flex-start pool beside a Spot GPU pool that replaces lost Spot nodes."""
    return "gpu-standby"


def gpu_queued_pool_name(cluster: ClusterSpec, pool: str) -> str:
    """The queued flex-start pool beside the class pool ``pool`` of a flex-start lane: its nodes
    come only through a ProvisioningRequest (``gpu-flex-c-q``)."""
    return f"{pool}-q"


def compute_class_name(cluster: ClusterSpec) -> str:
    """The GKE ComputeClass of the deployment's GPU pools (cluster-scoped: one per deployment)."""
    return f"{cluster.name}-gpus"


def provisioning_request_name(cluster: ClusterSpec, pool: str) -> str:
    """The ProvisioningRequest (and its PodTemplate) of a queued flex-start pool."""
    return f"{cluster.name}-{pool}"


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


def keeper_name(cluster: ClusterSpec) -> str:
    """The keeper's Deployment, ServiceAccount, Role and RoleBinding (``<name>-keeper``)."""
    return f"{cluster.name}-keeper"


def keeper_code_name(cluster: ClusterSpec) -> str:
    """The ConfigMap holding the on-cluster package the keeper runs (``<name>-keeper-code``)."""
    return f"{cluster.name}-keeper-code"


def teardown_job_name(cluster: ClusterSpec) -> str:
    """The Job that marks the runs in flight stopped by teardown (``<name>-teardown``)."""
    return f"{cluster.name}-teardown"


def head_account_name(cluster: ClusterSpec) -> str:
    """The Ray head pod's service account, and its Role and RoleBinding (read pods and events)."""
    return f"{cluster.name}-ray-head"


def head_nodes_role_name(cluster: ClusterSpec) -> str:
    """The ClusterRole and ClusterRoleBinding that let the Ray head's service account get Nodes
    (``<name>-ray-head.<namespace>``). Cluster-scoped, so the namespace is part of the name: two
    deployments of one name in two namespaces of a cluster must not share them. Neither part
    has a dot (DNS-1123 labels), so no two deployments give one name; at most 63 + 9 + 1 + 63
    characters, well within the 253 of a Kubernetes object's name.

    Examples:
        >>> from rl_lustre.spec import ClusterSpec
        >>> head_nodes_role_name(ClusterSpec(name="demo", project="my-project", region="us-east1",
        ...                                  zone="us-east1-b", namespace="rl"))
        'demo-ray-head.rl'
    """
    return f"{head_account_name(cluster)}.{cluster.namespace}"


def network_path(project: str, network: str) -> str:
    """``projects/P/global/networks/NAME``: a VPC network's full resource name."""
    return f"projects/{project}/global/networks/{network}"


def lustre_volume_handle(volume: VolumeSpec) -> str:
    """``PROJECT/ZONE/NAME``: how the Lustre CSI driver names an instance (a PV's ``volumeHandle``)."""
    return f"{volume.project}/{volume.zone}/{volume.name}"


def head_service_name(cluster: ClusterSpec) -> str:
    """The Kubernetes service KubeRay creates for the RayCluster's head (``<name>-head-svc``)."""
    return head_service_of(raycluster_name(cluster))


def head_service_of(raycluster: str) -> str:
    """The service KubeRay creates for the head of the RayCluster named ``raycluster``."""
    return f"{raycluster}-head-svc"


def default_volume_name(cluster: ClusterSpec) -> str:
    """The Managed Lustre instance a cluster gets when it is given no volume."""
    return f"{cluster.name}-lustre"


def gke_cluster_name(cluster: ClusterSpec) -> str:
    return cluster.name


def gke_cluster_location(cluster: ClusterSpec) -> str:
    """Where the GKE cluster lives: it is regional, its nodes in ``cluster.zone``."""
    assert cluster.region is not None, "a GKE deployment has a region"
    return cluster.region


def gke_cluster_path(cluster: ClusterSpec) -> str:
    """``projects/P/locations/REGION/clusters/NAME``: the GKE cluster's full resource name."""
    return container_cluster_path(str(cluster.project), gke_cluster_location(cluster), gke_cluster_name(cluster))


def container_cluster_path(project: str, location: str, name: str) -> str:
    """The full resource name of the GKE cluster ``name`` in ``location`` of ``project``."""
    return f"projects/{project}/locations/{location}/clusters/{name}"


def node_pool_path(cluster: ClusterSpec, pool: str) -> str:
    """The full resource name of the node pool ``pool`` of the cluster's GKE cluster."""
    return f"{gke_cluster_path(cluster)}/nodePools/{pool}"


def preload_family(image: str) -> str:
    """The family of the preload disk images of ``image`` (any digest): known offline.

    Examples:
        >>> preload_family("nvcr.io/nvidia/nemo-rl:v0.4.0")
        'rlp-cf48404da8'
    """
    import hashlib

    return "rlp-" + hashlib.sha256(image.partition("@")[0].encode()).hexdigest()[:10]


def preload_image_name(image: str, digest: str) -> str:
    """The preload disk image of ``image`` at ``digest`` (27 characters: GKE is reported
    to refuse secondary boot disk images named longer than 39)."""
    return f"{preload_family(image)}-{digest.removeprefix('sha256:')[:12]}"


def preload_builder_name(digest: str) -> str:
    """The temporary VM that builds the preload image of ``digest``; its data disk is
    ``<this>-data``."""
    return f"rlp-build-{digest.removeprefix('sha256:')[:12]}"
