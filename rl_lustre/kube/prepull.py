"""The image pre-pull DaemonSet, as a plain dict, and how to read its progress.

:func:`prepull_daemonset` is an ``apps/v1`` DaemonSet on the GPU nodes of the deployment's
ComputeClass, whichever pool they came from (and the CPU pool, where the Ray head and the
prefetch Job need the same image), whose only container is the job image doing nothing
(``sleep infinity``, a few MiB, no GPU): each node pulls the multi-GB image as soon as it
joins, while Lustre is still being created. Its
pod on a node is Ready once the image is there (:func:`daemonset_progress`). It is
removed once the RayCluster's workers run (they hold the image from then on).

No remote call and no Kubernetes client import here; the driver in
:mod:`rl_lustre.provision.startup` applies, watches and deletes it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .. import naming
from ..catalog import COMPUTE_CLASS_LABEL, GKE_NODEPOOL_LABEL
from .labels import deployment_labels

if TYPE_CHECKING:
    from ..spec import ClusterSpec

__all__ = ["daemonset_progress", "prepull_daemonset", "prepull_node_count", "prepull_pools"]

_PREPULL_LABEL = "rl-lustre/prepull"


def prepull_daemonset(cluster: ClusterSpec) -> dict[str, Any]:
    """The image pre-pull DaemonSet for ``cluster``'s GPU and CPU pools.

    Examples:
        >>> from rl_lustre import Cluster
        >>> ds = prepull_daemonset(Cluster(name="demo", project="my-project", region="us-east1",
        ...                                zone="us-east1-b", preload_image=False))
        >>> pod = ds["spec"]["template"]["spec"]
        >>> pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        ... # doctest: +NORMALIZE_WHITESPACE
        [{'matchExpressions': [{'key': 'cloud.google.com/compute-class', 'operator': 'In', 'values': ['demo-gpus']}]},
         {'matchExpressions': [{'key': 'cloud.google.com/gke-nodepool', 'operator': 'In',
                                'values': ['ray-head-pool']}]}]
        >>> pod["containers"][0]["image"]
        'nvcr.io/nvidia/nemo-rl:v0.4.0'
    """
    from .computeclass import pod_tolerations

    compute_class_name = naming.compute_class_name(cluster)
    labels = deployment_labels(cluster)
    name = naming.prepull_name(cluster)
    selector = {_PREPULL_LABEL: name}
    # Terms are ORed: the class's GPU nodes (every GPU pool's), and the CPU pool by name.
    terms = []
    if not cluster.preload_image:
        terms.append(
            {"matchExpressions": [{"key": COMPUTE_CLASS_LABEL, "operator": "In", "values": [compute_class_name]}]}
        )
    if not cluster.head_on_gpu_pool:
        terms.append(
            {
                "matchExpressions": [
                    {"key": GKE_NODEPOOL_LABEL, "operator": "In", "values": [naming.cpu_pool_name(cluster)]}
                ]
            }
        )
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": cluster.namespace, "labels": dict(labels)},
        "spec": {
            "selector": {"matchLabels": dict(selector)},
            "template": {
                "metadata": {"labels": {**labels, **selector}},
                "spec": {
                    "affinity": {
                        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}
                    },
                    "tolerations": pod_tolerations(cluster),
                    "terminationGracePeriodSeconds": 0,
                    "containers": [
                        {
                            "name": "pull",
                            "image": cluster.image,
                            "imagePullPolicy": "IfNotPresent",
                            # Holds the image on the node; asks for no GPU and almost nothing else.
                            "command": ["sleep", "infinity"],
                            "resources": {"requests": {"cpu": "1m", "memory": "8Mi"}, "limits": {"memory": "64Mi"}},
                        }
                    ],
                },
            },
        },
    }


def prepull_pools(cluster: ClusterSpec) -> list[str]:
    """The nodes that pre-pull the image: the GPU nodes of the deployment's ComputeClass
    (whichever pool they are in) unless they boot with the image preloaded
    (``Cluster.preload_image``), and the CPU pool when the Ray head runs there (it is created
    with the cluster and does not wait for a preload image)."""
    pools = [] if cluster.preload_image else [f"the GPU nodes of ComputeClass {naming.compute_class_name(cluster)}"]
    if not cluster.head_on_gpu_pool:
        pools.append(naming.cpu_pool_name(cluster))
    return pools


def prepull_node_count(cluster: ClusterSpec) -> int:
    """How many nodes the pre-pull covers once the pools are up (the CPU pool has one node)."""
    return (0 if cluster.preload_image else cluster.num_nodes) + (0 if cluster.head_on_gpu_pool else 1)


def daemonset_progress(ds: Mapping[str, Any] | None, nodes: int) -> tuple[int, int]:
    """``(nodes that hold the image, nodes it should be on)`` from a DaemonSet's status.

    Examples:
        >>> daemonset_progress({"metadata": {"generation": 1}, "status": {"observedGeneration": 1,
        ...     "desiredNumberScheduled": 8, "numberReady": 5}}, 8)
        (5, 8)
    """
    if ds is None:
        return 0, nodes
    status = ds.get("status") or {}
    generation = (ds.get("metadata") or {}).get("generation")
    if generation is not None and int(status.get("observedGeneration") or 0) < int(generation):
        return 0, nodes
    return int(status.get("numberReady") or 0), max(int(status.get("desiredNumberScheduled") or 0), nodes)
