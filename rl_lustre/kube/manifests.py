"""The Kubernetes objects a GKE deployment applies, as plain dicts, in apply order.

:func:`build_manifests` puts them together: the fabric's objects with ``fabric="rdma"``
(:mod:`rl_lustre.kube.fabric`), the capacity policy's ComputeClass
(:mod:`rl_lustre.kube.computeclass`), the PersistentVolume and PersistentVolumeClaim of the
Lustre volume (:mod:`rl_lustre.kube.persistent_volume`), the Secret for the job secrets
(:mod:`rl_lustre.kube.secret`), the Ray head's read-only access to its pods and their
events (:mod:`rl_lustre.kube.head_access`) and the ``ray.io/v1`` RayCluster
(:mod:`rl_lustre.kube.raycluster`), every one labelled by :func:`deployment_labels`. It
makes no remote call and imports no Kubernetes client.

Where it departs from the reference workflow, on purpose:

- the Ray head runs on the on-demand CPU pool, so a Spot preemption cannot kill the
  job driver (``Cluster.head_on_gpu_pool=True`` restores the reference placement);
- ``rayVersion`` is the Ray inside the image, not a free-standing number;
- secrets reach the pods through ``secretKeyRef``, never the job's runtime env;
- the PersistentVolume is ``Retain``: deleting it never deletes checkpoints;
- the workers select the GPU nodes by the deployment's ComputeClass, not by one pool: GKE's
  cluster autoscaler brings them from the capacity policy's pools in order, every time.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from ..plankeys import COMPUTE_CLASS_KEY, PV_KEY, PVC_KEY, RAYCLUSTER_KEY, SECRET_KEY
from .computeclass import compute_class_manifest
from .head_access import head_access_manifests
from .labels import deployment_labels
from .persistent_volume import pv_manifest, pvc_manifest
from .raycluster import raycluster_manifest
from .secret import secret_manifest

if TYPE_CHECKING:
    from ..spec import ClusterSpec

__all__ = [
    "build_manifests",
    "deployment_labels",
    "deployment_manifests",
    "keyed_manifests",
]


def build_manifests(
    cluster: ClusterSpec,
    *,
    secret_values: Mapping[str, str] | None = None,
    redact: bool = True,
) -> list[dict[str, Any]]:
    """The Kubernetes objects of a GKE deployment, in apply order.

    With ``fabric="rdma"`` first the fabric's objects (see
    :func:`rl_lustre.kube.fabric.fabric_manifests`), then the capacity policy's ComputeClass
    (:mod:`rl_lustre.kube.computeclass`), the PersistentVolume (Lustre CSI driver),
    PersistentVolumeClaim, Secret, the head's ServiceAccount, Role, RoleBinding, ClusterRole
    and ClusterRoleBinding (:mod:`rl_lustre.kube.head_access`) and ``ray.io/v1`` RayCluster. Before the
    Lustre instance exists its IP is
    :data:`~rl_lustre.kube.persistent_volume.PLACEHOLDER_IP` and the PersistentVolume
    carries :data:`~rl_lustre.kube.persistent_volume.PENDING_ANNOTATION`.

    Examples:
        >>> from rl_lustre import Cluster
        >>> from rl_lustre.kube.manifests import build_manifests
        >>> c = Cluster(name="demo", project="my-project", region="us-east1", zone="us-east1-b",
        ...             fabric="tcp")
        >>> gpus, pv, pvc, secret, *head_access, ray = build_manifests(c, secret_values={"HF_TOKEN": "hf_x"})
        >>> pv["spec"]["csi"]["volumeHandle"], secret["stringData"]
        ('my-project/us-east1-b/demo-lustre', {'HF_TOKEN': '<redacted>'})

    Args:
        cluster: a GKE ``Cluster``.
        secret_values: values of the cluster's ``secrets``, by name. Only the names
            given become Secret keys; a name not in ``cluster.secrets`` is an error.
            When omitted, every name in ``cluster.secrets`` is shown (redacted).
        redact: replace secret values with ``'<redacted>'``. With ``redact=False`` the
            values are :class:`~rl_lustre.kube.secret.SecretValue` strings: real when
            serialised, redacted when printed.

    Raises:
        ConfigError: a local cluster (it has no Kubernetes objects), labels Kubernetes
            rejects, a RayCluster that KubeRay's CRD schema rejects, a secret value for a
            name the cluster does not declare, or Ray token auth asked of an image whose
            Ray predates it.
        GCPError: the Lustre API reported a mount point that is not ``IP@tcp:/fsname``.
    """
    return list(keyed_manifests(cluster, secret_values=secret_values, redact=redact).values())


def keyed_manifests(
    cluster: ClusterSpec,
    *,
    secret_values: Mapping[str, str] | None = None,
    redact: bool = True,
) -> dict[str, dict[str, Any]]:
    """:func:`build_manifests` by the plan key of each object, in the same order: what the
    provisioning driver of a plan node applies is ``keyed_manifests(...)[node.key]``.

    Examples:
        >>> from rl_lustre import Cluster
        >>> c = Cluster(name="demo", project="my-project", region="us-east1", zone="us-east1-b",
        ...             fabric="tcp", secrets=("HF_TOKEN",))
        >>> {key: m["kind"] for key, m in keyed_manifests(c).items()}  # doctest: +NORMALIZE_WHITESPACE
        {'compute-class': 'ComputeClass', 'pv': 'PersistentVolume', 'pvc': 'PersistentVolumeClaim', 'secret': 'Secret',
         'head-account': 'ServiceAccount', 'head-role': 'Role', 'head-role-binding': 'RoleBinding',
         'head-nodes-role': 'ClusterRole', 'head-nodes-role-binding': 'ClusterRoleBinding', 'raycluster': 'RayCluster'}
    """
    if cluster.backend != "gke":
        raise ConfigError(
            "Cluster",
            "backend",
            cluster.backend,
            "a local cluster runs Ray on this machine and has no Kubernetes objects; "
            "manifests exist only for backend='gke'",
        )
    from .fabric import fabric_manifests_by_key

    labels = deployment_labels(cluster)
    ray_cluster = raycluster_manifest(cluster, labels)
    return {
        **fabric_manifests_by_key(cluster, labels),
        COMPUTE_CLASS_KEY: compute_class_manifest(cluster, labels),
        PV_KEY: pv_manifest(cluster, labels),
        PVC_KEY: pvc_manifest(cluster, labels),
        SECRET_KEY: secret_manifest(cluster, labels, secret_values, redact),
        **head_access_manifests(cluster, labels),
        RAYCLUSTER_KEY: ray_cluster,
    }


def deployment_manifests(cluster: ClusterSpec) -> list[dict[str, Any]]:
    """Every Kubernetes object ``up()`` applies, in apply order (secret values redacted).

    :func:`build_manifests`'s objects and, where the cluster asks for them, the image
    pre-pull DaemonSet (:mod:`rl_lustre.kube.prepull`, applied once the node pools exist,
    before the PersistentVolume) and the model prefetch Job (:mod:`rl_lustre.kube.prefetch`,
    once the claim and the Secret exist); then the RayCluster, and after it the keeper's objects
    (:func:`rl_lustre.kube.keeper.keeper_manifests`), the last.

    Examples:
        >>> from rl_lustre import Cluster
        >>> c = Cluster(name="demo", project="my-project", region="us-east1", zone="us-east1-b", fabric="tcp")
        >>> [m["kind"] for m in deployment_manifests(c)]  # doctest: +NORMALIZE_WHITESPACE
        ['ComputeClass', 'DaemonSet', 'PersistentVolume', 'PersistentVolumeClaim', 'Secret', 'ServiceAccount', 'Role',
         'RoleBinding', 'ClusterRole', 'ClusterRoleBinding', 'Job', 'RayCluster', 'ServiceAccount', 'Role',
         'RoleBinding', 'ConfigMap', 'Deployment']
    """
    from .keeper import keeper_manifests
    from .prefetch import prefetch_job
    from .prepull import prepull_daemonset

    core = build_manifests(cluster)
    ray_cluster, pv_at = core[-1], next(i for i, m in enumerate(core) if m["kind"] == "PersistentVolume")
    prepull = [prepull_daemonset(cluster)] if cluster.prepull_image else []
    prefetch = [prefetch_job(cluster)] if cluster.prefetch_models else []
    return [*core[:pv_at], *prepull, *core[pv_at:-1], *prefetch, ray_cluster, *keeper_manifests(cluster)]
