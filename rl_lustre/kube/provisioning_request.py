"""Queued provisioning of a flex-start kind: the ProvisioningRequest, its PodTemplate, and
what a pod needs to consume it.

GKE's Dynamic Workload Scheduler with queued provisioning (``queued-provisioning.gke.io``)
books every node of a request at once, or none, on a pool with queued provisioning (the
lane's queued pool, :func:`rl_lustre.naming.gpu_queued_pool_name`, which GKE's autoscaler
scales for no other pod: it is not a rule of the ComputeClass). :func:`provisioning_request`
asks for ``count`` pods shaped as :func:`pod_template` says (the worker's GPU, CPU and memory
requests, the queued pool's ``nodeSelector``, the class's and the GPU tolerations) for at
most ``maxRunDurationSeconds``. Once the request is ``Provisioned``, pods carrying the
annotations of :func:`consume_annotations` land on the booked nodes: ``up()``'s capacity
probes, which select the ComputeClass (the queued pool carries its label and taint), hold
them until the Ray workers take their place.

Examples:
    >>> from rl_lustre import Cluster
    >>> from rl_lustre.spec.lanes import capacity_lanes
    >>> c = Cluster(name="demo", project="my-project", region="us-east1", zone="us-east1-b",
    ...             capacity=("spot", "flex-start"))
    >>> lane = capacity_lanes(c)[1]
    >>> pr = provisioning_request(c, lane)
    >>> pr["spec"]["provisioningClassName"], pr["spec"]["podSets"][0]["count"], pr["spec"]["parameters"]
    ('queued-provisioning.gke.io', 8, {'maxRunDurationSeconds': '604800'})
    >>> pod_template(c, lane, {"limits": {"nvidia.com/gpu": "8"}})["template"]["spec"]["nodeSelector"]
    {'cloud.google.com/gke-nodepool': 'gpu-flex-b-q'}
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .. import naming
from ..catalog import GKE_NODEPOOL_LABEL
from .labels import deployment_labels

if TYPE_CHECKING:
    from ..spec import ClusterSpec
    from ..spec.lanes import Lane

__all__ = [
    "CLASS_ANNOTATION",
    "CONSUME_ANNOTATION",
    "QUEUED_CLASS",
    "consume_annotations",
    "pod_template",
    "provisioning_request",
    "request_name",
    "worker_resources",
]

QUEUED_CLASS = "queued-provisioning.gke.io"
CONSUME_ANNOTATION = "autoscaling.x-k8s.io/consume-provisioning-request"
CLASS_ANNOTATION = "autoscaling.x-k8s.io/provisioning-class-name"


def request_name(cluster: ClusterSpec, lane: Lane) -> str:
    """The ProvisioningRequest (and PodTemplate) of ``lane``'s queued pool."""
    return naming.provisioning_request_name(cluster, naming.gpu_queued_pool_name(cluster, lane.pool_name))


def pod_template(cluster: ClusterSpec, lane: Lane, resources: Mapping[str, Any]) -> dict[str, Any]:
    """The ``v1`` PodTemplate the request books nodes for: one Ray worker's ``resources``
    on ``lane``'s queued pool."""
    from .computeclass import pod_tolerations

    name = request_name(cluster, lane)
    return {
        "apiVersion": "v1",
        "kind": "PodTemplate",
        "metadata": {"name": name, "namespace": cluster.namespace, "labels": deployment_labels(cluster)},
        "template": {
            "spec": {
                "nodeSelector": {GKE_NODEPOOL_LABEL: naming.gpu_queued_pool_name(cluster, lane.pool_name)},
                "tolerations": pod_tolerations(cluster),
                "containers": [
                    {"name": "ray-worker", "image": cluster.image, "resources": copy.deepcopy(dict(resources))}
                ],
            }
        },
    }


def provisioning_request(cluster: ClusterSpec, lane: Lane, count: int | None = None) -> dict[str, Any]:
    """The ``autoscaling.x-k8s.io/v1`` ProvisioningRequest for ``count`` GPU nodes (by default
    ``num_nodes``) of ``lane``'s queued pool."""
    assert lane.capacity.max_run_duration is not None
    name = request_name(cluster, lane)
    return {
        "apiVersion": "autoscaling.x-k8s.io/v1",
        "kind": "ProvisioningRequest",
        "metadata": {"name": name, "namespace": cluster.namespace, "labels": deployment_labels(cluster)},
        "spec": {
            "provisioningClassName": QUEUED_CLASS,
            "parameters": {"maxRunDurationSeconds": str(int(lane.capacity.max_run_duration))},
            "podSets": [{"count": cluster.num_nodes if count is None else count, "podTemplateRef": {"name": name}}],
        },
    }


def consume_annotations(cluster: ClusterSpec, lane: Lane) -> dict[str, str]:
    """What a pod carries to land on the nodes the request booked."""
    return {CONSUME_ANNOTATION: request_name(cluster, lane), CLASS_ANNOTATION: QUEUED_CLASS}


def worker_resources(raycluster: Mapping[str, Any]) -> dict[str, Any]:
    """The resources of the RayCluster's worker container."""
    workers = raycluster["spec"]["workerGroupSpecs"][0]
    return dict(workers["template"]["spec"]["containers"][0].get("resources") or {})
