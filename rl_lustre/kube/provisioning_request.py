"""Queued provisioning of a flex-start pool: the ProvisioningRequest, its PodTemplate, and
what the Ray workers need to consume it.

GKE's Dynamic Workload Scheduler with queued provisioning (``queued-provisioning.gke.io``)
books every node of a request at once, or none: :func:`provisioning_request` asks for
``num_nodes`` pods shaped as :func:`pod_template` says (the worker's GPU, CPU and memory
requests, the pool's ``nodeSelector``, the GPU toleration) for at most
``maxRunDurationSeconds``. Once the request is ``Provisioned``, pods carrying the
annotations of :func:`consume_annotations` (and the pool's ``nodeSelector``) land on the
booked nodes; :func:`consume_in_raycluster` adds them to the RayCluster's workers.

Examples:
    >>> from rl_lustre import Cluster
    >>> from rl_lustre.plan.capacity import capacity_lanes
    >>> c = Cluster(name="demo", project="my-project", region="us-east1", zone="us-east1-b",
    ...             capacity=("spot", "flex-start"))
    >>> lane = capacity_lanes(c)[1]
    >>> pr = provisioning_request(c, lane)
    >>> pr["spec"]["provisioningClassName"], pr["spec"]["podSets"][0]["count"], pr["spec"]["parameters"]
    ('queued-provisioning.gke.io', 8, {'maxRunDurationSeconds': '604800'})
    >>> pod_template(c, lane, {"limits": {"nvidia.com/gpu": "8"}})["template"]["spec"]["nodeSelector"]
    {'cloud.google.com/gke-nodepool': 'gpu-flex-b'}
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .. import naming
from ..catalog import GKE_NODEPOOL_LABEL, GPU_RESOURCE
from .labels import deployment_labels

if TYPE_CHECKING:
    from ..plan.capacity import Lane
    from ..spec import ClusterSpec

__all__ = [
    "CLASS_ANNOTATION",
    "CONSUME_ANNOTATION",
    "QUEUED_CLASS",
    "consume_annotations",
    "consume_in_raycluster",
    "pod_template",
    "provisioning_request",
]

QUEUED_CLASS = "queued-provisioning.gke.io"
CONSUME_ANNOTATION = "autoscaling.x-k8s.io/consume-provisioning-request"
CLASS_ANNOTATION = "autoscaling.x-k8s.io/provisioning-class-name"
TOLERATIONS = [{"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}]


def pod_template(cluster: ClusterSpec, lane: Lane, resources: Mapping[str, Any]) -> dict[str, Any]:
    """The ``v1`` PodTemplate the request books nodes for: one Ray worker's ``resources``
    on ``lane``'s pool."""
    name = naming.provisioning_request_name(cluster, lane.pool_name)
    return {
        "apiVersion": "v1",
        "kind": "PodTemplate",
        "metadata": {"name": name, "namespace": cluster.namespace, "labels": deployment_labels(cluster)},
        "template": {
            "spec": {
                "nodeSelector": {GKE_NODEPOOL_LABEL: lane.pool_name},
                "tolerations": copy.deepcopy(TOLERATIONS),
                "containers": [
                    {"name": "ray-worker", "image": cluster.image, "resources": copy.deepcopy(dict(resources))}
                ],
            }
        },
    }


def provisioning_request(cluster: ClusterSpec, lane: Lane) -> dict[str, Any]:
    """The ``autoscaling.x-k8s.io/v1`` ProvisioningRequest for every GPU node of ``lane``'s pool."""
    assert lane.capacity.max_run_duration is not None
    name = naming.provisioning_request_name(cluster, lane.pool_name)
    return {
        "apiVersion": "autoscaling.x-k8s.io/v1",
        "kind": "ProvisioningRequest",
        "metadata": {"name": name, "namespace": cluster.namespace, "labels": deployment_labels(cluster)},
        "spec": {
            "provisioningClassName": QUEUED_CLASS,
            "parameters": {"maxRunDurationSeconds": str(int(lane.capacity.max_run_duration))},
            "podSets": [{"count": cluster.num_nodes, "podTemplateRef": {"name": name}}],
        },
    }


def consume_annotations(cluster: ClusterSpec, lane: Lane) -> dict[str, str]:
    """What a pod carries to land on the nodes the request booked."""
    return {
        CONSUME_ANNOTATION: naming.provisioning_request_name(cluster, lane.pool_name),
        CLASS_ANNOTATION: QUEUED_CLASS,
    }


def worker_resources(raycluster: Mapping[str, Any]) -> dict[str, Any]:
    """The resources of the RayCluster's worker container."""
    workers = raycluster["spec"]["workerGroupSpecs"][0]
    return dict(workers["template"]["spec"]["containers"][0].get("resources") or {})


def consume_in_raycluster(raycluster: dict[str, Any], cluster: ClusterSpec, lane: Lane) -> None:
    """Point the RayCluster's workers at ``lane``'s booked nodes (in place): the annotations
    and the pool's ``nodeSelector``."""
    for group in raycluster["spec"]["workerGroupSpecs"]:
        meta = group["template"].setdefault("metadata", {})
        meta.setdefault("annotations", {}).update(consume_annotations(cluster, lane))
        group["template"]["spec"].setdefault("nodeSelector", {})[GKE_NODEPOOL_LABEL] = lane.pool_name
