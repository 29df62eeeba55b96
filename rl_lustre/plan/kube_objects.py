"""The Kubernetes objects of a GKE plan: the capacity policy's ComputeClass, the volume's
PersistentVolume and claim, the Secret with the job secrets, and the RayCluster.

Each node shows what the object is (:mod:`rl_lustre.kube.manifests` builds the object
itself, keyed by the same plan key) and waits for what it needs: the PersistentVolume
only for the API server and the Lustre instance's address, the RayCluster for everything
its pods use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import naming
from ..catalog import COMPUTE_CLASS_LABEL, GKE_ACCELERATOR_LABEL, GPU_RESOURCE, LUSTRE_CSI_DRIVER
from ..kube.computeclass import pod_selector
from ..kube.fabric import worker_fabric_summary
from ..kube.head_access import NODE_RULES, RULES
from ..plankeys import (
    COMPUTE_CLASS_KEY,
    CPU_POOL_KEY,
    GKE_CLUSTER_KEY,
    GPU_POOL_KEY,
    HEAD_ACCOUNT_KEY,
    HEAD_BINDING_KEY,
    HEAD_NODES_BINDING_KEY,
    HEAD_NODES_ROLE_KEY,
    HEAD_ROLE_KEY,
    LUSTRE_KEY,
    PV_KEY,
    PVC_KEY,
    RAYCLUSTER_KEY,
    SECRET_KEY,
)
from .fabric import ray_dependency_keys
from .graph import PlannedResource

if TYPE_CHECKING:
    from ..spec import ClusterSpec

__all__ = ["compute_class", "head_access_nodes", "ray_cluster", "secret", "volume_claim_nodes"]


def compute_class(cluster: ClusterSpec, created: dict[str, Any]) -> PlannedResource:
    """The ``compute-class`` node (``created``: its action and labels): the capacity policy as a
    GKE ComputeClass (:mod:`rl_lustre.kube.computeclass`), the order in which GKE's cluster
    autoscaler brings GPU nodes each time the Ray workers need them, and what rl_lustre
    decided in it.

    Examples:
        >>> from rl_lustre.spec import ClusterSpec
        >>> spec = ClusterSpec(name="demo", project="my-project", region="us-east1", zone="us-east1-b",
        ...                    capacity=("spot", "on-demand"), fabric="tcp")
        >>> node = compute_class(spec, {"action": "create"})
        >>> node.kind, node.name
        ('cloud.google.com/v1/ComputeClass', 'demo-gpus')
        >>> node.settings["priorities"]
        ('gpu-pool: spot in us-east1-b', 'gpu-ondemand-b: on-demand in us-east1-b')
    """
    from ..kube.computeclass import ACTIVE_MIGRATION, CONSOLIDATION_DELAY_MINUTES, WHEN_UNSATISFIABLE
    from .capacity import capacity_lanes

    lanes = capacity_lanes(cluster)
    queued = [la for la in lanes if la.queued]
    settings: dict[str, Any] = {
        "scope": "cluster",
        "priorities": [f"{la.pool_name}: {la.label}" for la in lanes],
        "when_unsatisfiable": f"{WHEN_UNSATISFIABLE}: a node of the cluster's default configuration (ScaleUpAnyway) "
        "has no GPU; the workers wait Pending, bounded by up()'s waits and the run's capacity_timeout",
        "active_migration": f"{'on' if ACTIVE_MIGRATION else 'off'}: moving one worker of a run's gang restarts the "
        "whole run from its checkpoint; a run stays on the nodes it has",
        "consolidation_delay_minutes": f"{CONSOLIDATION_DELAY_MINUTES}: a GPU node no pod uses (a Spot VM brought back "
        "while the run is elsewhere) is removed after a minute, not the autoscaler's ten",
        "node_pool_auto_creation": "off: only the deployment's own pools (RDMA NICs, preload disk, node account)",
        "wait": "flex-start: GKE's capacityCheckWaitTimeSeconds, how long it waits for flex-start before the next "
        "rule; other kinds fall back at once on a stock-out; every kind's wait adds to how long up() waits for the "
        "GPU nodes before on_no_capacity",
        "selected_by": "the Ray workers (and the image pre-pull) by nodeSelector cloud.google.com/compute-class",
    }
    if queued:
        settings["queued_flex_start"] = (
            "no rule: GKE's autoscaler does not scale a queued pool for pending pods. up() asks for all nodes at "
            "once through a ProvisioningRequest once the rules before it have no capacity; afterwards (a lost node) "
            "the rule of the flex-start kind is the autoscaler's flex-start, node by node"
        )
    if cluster.capacity_zones == "region":
        settings["zones"] = "the rules of the region's other zones are added at up(), once they are found"
    return PlannedResource(
        key=COMPUTE_CLASS_KEY,
        kind="cloud.google.com/v1/ComputeClass",
        name=naming.compute_class_name(cluster),
        depends_on=(GKE_CLUSTER_KEY,),
        settings=settings,
        **created,
    )


def volume_claim_nodes(cluster: ClusterSpec, created: dict[str, Any]) -> list[PlannedResource]:
    """The ``pv`` and ``pvc`` nodes (``created``: their action and labels): the volume as a
    cluster-wide PersistentVolume of the Lustre CSI driver, and the claim the pods mount.

    The PersistentVolume needs only the API server and the instance's address, not the
    node pools, so it is made while the pools are still coming up.

    Examples:
        >>> from rl_lustre.spec import ClusterSpec
        >>> spec = ClusterSpec(name="demo", project="my-project", region="us-east1", zone="us-east1-b")
        >>> [(n.key, n.kind, n.depends_on) for n in volume_claim_nodes(spec, {"action": "create"})]
        [('pv', 'v1/PersistentVolume', ('lustre', 'gke-cluster')), ('pvc', 'v1/PersistentVolumeClaim', ('pv',))]
    """
    vol = cluster.volume
    assert vol is not None
    assert vol.capacity_gib is not None
    return [
        PlannedResource(
            key=PV_KEY,
            kind="v1/PersistentVolume",
            name=naming.pv_name(cluster),
            depends_on=(LUSTRE_KEY, GKE_CLUSTER_KEY),
            settings={
                "scope": "cluster",
                "csi_driver": LUSTRE_CSI_DRIVER,
                "volume_handle": naming.lustre_volume_handle(vol),
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


def secret(cluster: ClusterSpec, created: dict[str, Any]) -> PlannedResource | None:
    """The ``secret`` node (``created``: its action and labels), None when the cluster has
    no secrets. The plan names the secrets only: their values are read from the
    environment at ``up()`` and never enter the plan.

    Examples:
        >>> from rl_lustre.spec import ClusterSpec
        >>> spec = ClusterSpec(name="demo", project="my-project", region="us-east1", zone="us-east1-b")
        >>> secret(spec, {"action": "create"}).settings["keys"]
        ('HF_TOKEN', 'WANDB_API_KEY')
        >>> import attrs
        >>> secret(attrs.evolve(spec, secrets=()), {"action": "create"}) is None
        True
    """
    if not cluster.secrets:
        return None
    return PlannedResource(
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


def head_access_nodes(cluster: ClusterSpec, created: dict[str, Any]) -> list[PlannedResource]:
    """The Ray head's service account, its Role (get and list pods and events in the
    namespace) and RoleBinding, what a stalled run's diagnostics read with, and its
    ClusterRole (get Nodes) and ClusterRoleBinding, what the supervisor reads a flex-start
    node's end with (:mod:`rl_lustre.kube.head_access`).

    Examples:
        >>> from rl_lustre.spec import ClusterSpec
        >>> spec = ClusterSpec(name="demo", project="my-project", region="us-east1", zone="us-east1-b")
        >>> account, role, binding, nodes_role, nodes_binding = head_access_nodes(spec, {"action": "create"})
        >>> account.key, role.depends_on, binding.key, binding.depends_on
        ('head-account', ('gke-cluster',), 'head-role-binding', ('head-account', 'head-role'))
        >>> nodes_role.name, nodes_role.settings["rules"]
        ('demo-ray-head.default', ({'apiGroups': ('',), 'resources': ('nodes',), 'verbs': ('get',)},))
        >>> nodes_binding.depends_on
        ('head-account', 'head-nodes-role')
    """
    name, namespace = naming.head_account_name(cluster), cluster.namespace
    cluster_wide = naming.head_nodes_role_name(cluster)
    return [
        PlannedResource(
            key=HEAD_ACCOUNT_KEY,
            kind="v1/ServiceAccount",
            name=name,
            depends_on=(GKE_CLUSTER_KEY,),
            settings={"namespace": namespace, "for": "the Ray head pod"},
            **created,
        ),
        PlannedResource(
            key=HEAD_ROLE_KEY,
            kind="rbac.authorization.k8s.io/v1/Role",
            name=name,
            depends_on=(GKE_CLUSTER_KEY,),
            settings={"namespace": namespace, "rules": [dict(r) for r in RULES]},
            **created,
        ),
        PlannedResource(
            key=HEAD_BINDING_KEY,
            kind="rbac.authorization.k8s.io/v1/RoleBinding",
            name=name,
            depends_on=(HEAD_ACCOUNT_KEY, HEAD_ROLE_KEY),
            settings={"namespace": namespace, "role": name, "service_account": name},
            **created,
        ),
        PlannedResource(
            key=HEAD_NODES_ROLE_KEY,
            kind="rbac.authorization.k8s.io/v1/ClusterRole",
            name=cluster_wide,
            depends_on=(GKE_CLUSTER_KEY,),
            settings={"rules": [dict(r) for r in NODE_RULES], "why": "when a flex-start node ends, read from its Node"},
            **created,
        ),
        PlannedResource(
            key=HEAD_NODES_BINDING_KEY,
            kind="rbac.authorization.k8s.io/v1/ClusterRoleBinding",
            name=cluster_wide,
            depends_on=(HEAD_ACCOUNT_KEY, HEAD_NODES_ROLE_KEY),
            settings={"role": cluster_wide, "service_account": f"{namespace}/{name}"},
            **created,
        ),
    ]


def ray_cluster(cluster: ClusterSpec, created: dict[str, Any]) -> PlannedResource:
    """The ``raycluster`` node (``created``: its action and labels): the Ray head on the CPU
    pool (or the GPU pool with ``head_on_gpu_pool``), the workers on the GPU pool, the
    volume mounted, the secrets as environment variables, the fabric's NICs.

    It waits for the claim, the Secret, both pools and, with ``fabric="rdma"``, the pod
    networks and the NCCL plugin installer (:func:`rl_lustre.plan.fabric.ray_dependency_keys`).

    Examples:
        >>> from rl_lustre.spec import ClusterSpec
        >>> spec = ClusterSpec(name="demo", project="my-project", region="us-east1", zone="us-east1-b",
        ...                    fabric="tcp")
        >>> node = ray_cluster(spec, {"action": "create"})
        >>> node.depends_on, node.settings["head"]["node_pool"]
        (('pvc', 'secret', 'cpu-pool', 'gpu-pool', 'head-role-binding', 'head-nodes-role-binding'), 'ray-head-pool')
    """
    head_pool = (
        f"a GPU node of ComputeClass {naming.compute_class_name(cluster)}"
        if cluster.head_on_gpu_pool
        else naming.cpu_pool_name(cluster)
    )
    secrets = (SECRET_KEY,) if cluster.secrets else ()
    return PlannedResource(
        key=RAYCLUSTER_KEY,
        kind="ray.io/v1/RayCluster",
        name=naming.raycluster_name(cluster),
        depends_on=(
            PVC_KEY,
            *secrets,
            CPU_POOL_KEY,
            GPU_POOL_KEY,
            HEAD_BINDING_KEY,
            HEAD_NODES_BINDING_KEY,
            *ray_dependency_keys(cluster),
        ),
        settings={
            "namespace": cluster.namespace,
            "image": cluster.image,
            "ray_version": cluster.ray_version,
            "head": {"node_pool": head_pool, "spot": cluster.spot and cluster.head_on_gpu_pool},
            "workers": {
                "replicas": cluster.num_nodes,
                "gpus_per_worker": cluster.gpus_per_node,
                "compute_class": naming.compute_class_name(cluster),
                "node_selector": {**pod_selector(cluster), GKE_ACCELERATOR_LABEL: cluster.accelerator_type},
                "tolerations": [COMPUTE_CLASS_LABEL, GPU_RESOURCE],
            },
            "volume": {"claim": naming.pvc_name(cluster), "mount_path": cluster.mount_path},
            "shm": "memory-backed emptyDir at /dev/shm",
            **worker_fabric_summary(cluster),
            "head_service": cluster.head_service,
            **(
                {"secrets": {"secret": naming.secret_name(cluster), "env_from_secret_key_ref": list(cluster.secrets)}}
                if cluster.secrets
                else {}
            ),
        },
        **created,
    )
