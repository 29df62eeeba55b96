"""The GKE node pools of a deployment, as plan nodes: the CPU pool and the GPU pools, and the
service account their nodes run as.

- ``node-sa``: unless ``node_service_account`` names the user's own, an IAM service account
  made for the deployment (``rl-<name>-nodes``, :func:`rl_lustre.naming.node_service_account_id`)
  with GKE's minimal node role on the project (:func:`node_roles`); created before the
  cluster, deleted with its roles after the pools.

- ``cpu-pool``: one on-demand node of ``head_machine_type``, created with the GKE
  cluster as its initial pool; it hosts the system pods and the Ray head (unless
  ``head_on_gpu_pool``).
- ``gpu-pool``: the GPU pools of the capacity policy, one per kind and zone
  (:mod:`rl_lustre.plan.capacity`), each a rule of the deployment's ComputeClass
  (:mod:`rl_lustre.kube.computeclass`): nodes of ``machine_type`` with their GPUs and driver,
  Spot, reserved, flex-start or on-demand, the GPU taint and the class's label and taint,
  gVNIC, surge-free upgrades, the local SSDs as ephemeral storage, the extra NICs of the
  RDMA fabric (:mod:`rl_lustre.plan.fabric`) and the preload image as a secondary boot disk
  (:mod:`rl_lustre.plan.preload`); they host the Ray workers, up to ``num_nodes`` in all.

:func:`rl_lustre.gcp.container_requests.node_pool_request` turns either node into the GKE request.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .. import naming
from ..catalog import GPU_MACHINE_TYPES, GPU_RESOURCE
from ..plankeys import COMPUTE_CLASS_KEY, CPU_POOL_KEY, GKE_CLUSTER_KEY, GPU_POOL_KEY, NODE_SA_KEY
from .capacity import Lane, capacity_lanes, lane_pool_settings, queued_pool_settings
from .fabric import extra_networks, fabric_nodes, gpu_pool_subnet_keys
from .graph import PlannedResource
from .preload import gpu_node_preload, preload_keys

if TYPE_CHECKING:
    from ..spec import ClusterSpec

__all__ = [
    "GPU_TAINT",
    "cpu_pool",
    "gpu_node_settings",
    "gpu_pool",
    "gpu_pool_depends_on",
    "node_account",
    "node_identity",
    "node_roles",
]

GPU_TAINT = {"key": GPU_RESOURCE, "value": "present", "effect": "NO_SCHEDULE"}

# The minimal role of a GKE node's account (GKE's hardening guide): write logs, metrics and
# resource metadata, read monitoring config. The A4 blueprint's node account gets the same
# as separate roles (logging.logWriter, monitoring.metricWriter, monitoring.viewer,
# stackdriver.resourceMetadata.writer), plus two that ours gets only where they are needed.
NODE_ROLE = "roles/container.defaultNodeServiceAccount"
REGISTRY_READER_ROLE = "roles/artifactregistry.reader"


def node_roles(cluster: ClusterSpec) -> dict[str, str]:
    """The project roles of the deployment's own node account, each with why a node needs it.

    Examples:
        >>> from rl_lustre.spec import ClusterSpec
        >>> spec = ClusterSpec(name="d", project="my-project", region="us-east1", zone="us-east1-b")
        >>> list(node_roles(spec))
        ['roles/container.defaultNodeServiceAccount']
        >>> import attrs
        >>> list(node_roles(attrs.evolve(spec, image="us-docker.pkg.dev/my-project/rl/nemo-rl:v0.4.0",
        ...                                          ray_version="2.46.0")))
        ['roles/container.defaultNodeServiceAccount', 'roles/artifactregistry.reader']
    """
    from ..catalog import google_registry, split_host

    roles = {NODE_ROLE: "GKE's minimal node role: the kubelet's logs, metrics and resource metadata"}
    if google_registry(split_host(cluster.image)[0]):
        roles[REGISTRY_READER_ROLE] = (
            f"the nodes pull {cluster.image} from Artifact Registry (an image in another "
            "project needs this role granted there)"
        )
    return roles


def node_account(cluster: ClusterSpec, created: dict[str, Any]) -> PlannedResource | None:
    """The ``node-sa`` node: the service account both pools run as, made for this deployment
    (None when ``node_service_account`` names the user's own)."""
    if cluster.node_service_account:
        return None
    account_id = naming.node_service_account_id(cluster.name)
    return PlannedResource(
        key=NODE_SA_KEY,
        kind="iam.v1.ServiceAccount",
        name=naming.node_service_account_email(cluster),
        settings={
            "project": cluster.project,
            "account_id": account_id,
            "display_name": f"rl_lustre GKE nodes of {cluster.name}",
            "description": f"GKE nodes of rl_lustre deployment {cluster.name}, with the ownership labels",
            "project_roles": node_roles(cluster),
            "not_granted": {
                "roles/storage.objectAdmin": (
                    "the A4 blueprint's, for its Cloud Storage FUSE buckets: rl_lustre mounts none (warm start is "
                    "Managed Lustre's own import and export)"
                )
            },
            "used_by": "every node pool (cloud-platform scope); deleted by down() after them, with its roles",
        },
        **created,
    )


def node_identity(cluster: ClusterSpec) -> dict[str, Any]:
    """Who the nodes of every pool run as: ``node_service_account`` (the user's own), or the
    account ``up()`` makes for the deployment (``node-sa``), with the cloud-platform scope
    (what the account may do is its IAM roles' business).

    Examples:
        >>> from rl_lustre.spec import ClusterSpec
        >>> spec = ClusterSpec(name="d", project="my-project", region="us-east1", zone="us-east1-b")
        >>> node_identity(spec)["service_account"]
        'rl-d-nodes@my-project.iam.gserviceaccount.com'
        >>> import attrs
        >>> node_identity(attrs.evolve(spec, node_service_account="rl-nodes@my-project.iam.gserviceaccount.com"))
        ... # doctest: +ELLIPSIS
        {'service_account': 'rl-nodes@my-project.iam.gserviceaccount.com', ...}
    """
    if cluster.node_service_account:
        return {
            "service_account": cluster.node_service_account,
            "oauth_scopes": ["cloud-platform"],
            "service_account_note": "the user's own: rl_lustre never creates, changes or deletes it",
        }
    return {
        "service_account": naming.node_service_account_email(cluster),
        "oauth_scopes": ["cloud-platform"],
        "service_account_note": f"this deployment's own ({NODE_SA_KEY}), with {NODE_ROLE}",
    }


def node_account_keys(cluster: ClusterSpec) -> tuple[str, ...]:
    """The plan key of the account the pools run as, when the deployment makes it."""
    return () if cluster.node_service_account else (NODE_SA_KEY,)


def cpu_pool(cluster: ClusterSpec, created: dict[str, Any]) -> PlannedResource:
    """The ``cpu-pool`` node (``created``: its action and labels)."""
    return PlannedResource(
        key=CPU_POOL_KEY,
        kind="container.v1.NodePool",
        name=naming.cpu_pool_name(cluster),
        depends_on=(GKE_CLUSTER_KEY, *node_account_keys(cluster)),
        settings={
            "machine_type": cluster.head_machine_type,
            "location": cluster.zone,
            "node_count": 1,
            "provisioning": "on-demand",
            "spot": False,
            "hosts": ["system pods", *([] if cluster.head_on_gpu_pool else ["Ray head"])],
            **node_identity(cluster),
            "created_with": f"{GKE_CLUSTER_KEY}, as its initial node pool",
        },
        **created,
    )


def gpu_node_settings(cluster: ClusterSpec) -> dict[str, Any]:
    """What every GPU node of the deployment is, whichever pool it is in: machine, GPUs
    and driver, the GPU taint, gVNIC, the local SSDs, the fabric's extra NICs.

    The one place a GPU pool's node config is decided: ``gpu-pool`` and every other GPU
    pool a plan makes (replacement or fallback pools) start from these settings, so a
    node setting added here (the preloaded image's secondary boot disk, say) reaches
    every GPU node.
    """
    known = GPU_MACHINE_TYPES.get(cluster.machine_type)
    node: dict[str, Any] = {
        "machine_type": cluster.machine_type,
        "accelerator": {
            "type": cluster.accelerator_type,
            "count": cluster.gpus_per_node,
            "gpu_driver_version": "LATEST",
        },
        "taints": [GPU_TAINT],
        "gvnic": True,
        **node_identity(cluster),
    }
    if known is not None:
        node["vcpus_per_node"] = known.vcpus
        if known.local_ssds and cluster.fabric == "rdma":
            # Image layers, emptyDirs, /tmp and Ray's spill go to the local SSDs, not the boot disk.
            node["ephemeral_storage_local_ssd_count"] = known.local_ssds
    extra = extra_networks(cluster)
    if extra:
        by_key = {n.key: n for n in fabric_nodes(cluster, {})}
        node["additional_node_networks"] = [
            {
                "network": by_key[n["network_key"]].name,
                "subnetwork": by_key[n["subnet_key"]].name,
                "interface": n["interface"],
            }
            for n in extra
        ]
    preload = gpu_node_preload(cluster)
    if preload is not None:
        node["preload"] = preload
    return node


def gpu_pool_depends_on(cluster: ClusterSpec) -> tuple[str, ...]:
    """The plan keys every GPU pool waits for (the GKE cluster, the fabric's subnets, the
    node account, the preload image its nodes boot with)."""
    return (GKE_CLUSTER_KEY, *node_account_keys(cluster), *gpu_pool_subnet_keys(cluster), *preload_keys(cluster))


def gpu_pool(
    cluster: ClusterSpec,
    created: dict[str, Any],
    lane: Lane | None = None,
    *,
    zones: Sequence[str] | None = None,
    queued: bool = False,
) -> PlannedResource:
    """The ``gpu-pool`` node (``created``: its action and labels): every GPU pool of the capacity
    policy, one per kind and zone (:func:`~rl_lustre.spec.lanes.capacity_lanes` over
    ``zones``), each a rule of the deployment's ComputeClass; its settings are the first pool's,
    and list the others. With ``lane``, that lane's pool alone (``queued``: its queued
    flex-start pool), as ``up()`` creates it."""
    lanes = capacity_lanes(cluster, zones)
    first = lane or lanes[0]
    kind = queued_pool_settings(cluster, first) if queued else lane_pool_settings(cluster, first)
    name = kind.pop("name", first.pool_name)
    taint = kind.pop("class_taint")
    pool_settings: dict[str, Any] = {
        **gpu_node_settings(cluster),
        **kind,
        "taints": [GPU_TAINT, taint],
        # The nodes the deployment runs (node_count is what the pool starts with).
        "nodes": cluster.num_nodes,
        # One node at a time, never a surge node: a spare A4 is rarely to be had.
        "upgrade_settings": {"strategy": "SURGE", "max_surge": 0, "max_unavailable": 1},
        "hosts": ["Ray workers", *(["Ray head"] if cluster.head_on_gpu_pool else [])],
    }
    if lane is None:
        more = (
            [
                "then the same kinds in the region's other zones that offer the machine type and Managed Lustre "
                "(found at up())"
            ]
            if cluster.capacity_zones == "region"
            else []
        )
        pool_settings["pools"] = [_pool_line(cluster, la) for la in lanes] + more
        pool_settings["capacity_policy"] = {
            "decided_by": f"GKE's cluster autoscaler, by ComputeClass {naming.compute_class_name(cluster)}, "
            "each time nodes are needed (up(), a lost node, a flex-start node's end)",
            "on_no_capacity": cluster.on_no_capacity,
        }
    return PlannedResource(
        key=GPU_POOL_KEY,
        kind="container.v1.NodePool",
        name=name,
        depends_on=(*gpu_pool_depends_on(cluster), COMPUTE_CLASS_KEY),
        settings=pool_settings,
        **created,
    )


def _pool_line(cluster: ClusterSpec, lane: Lane) -> str:
    """``gpu-spot-c: spot in us-east1-c, 0 to 8 nodes (rule 1)``."""
    size = f"{cluster.num_nodes} nodes held" if lane.kind == "reservation" else f"0 to {cluster.num_nodes} nodes"
    queued = (
        f"; at up() all at once through a ProvisioningRequest on {naming.gpu_queued_pool_name(cluster, lane.pool_name)}"
        if lane.queued
        else ""
    )
    return f"{lane.pool_name}: {lane.label}, {size} (rule {lane.index}){queued}"
