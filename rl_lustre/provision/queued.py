"""A queued flex-start kind at ``up()``: every node at once through a ProvisioningRequest, on a
pool with queued provisioning beside the ComputeClass (what the class cannot ask for).

:func:`ask_queued` creates the lane's queued pool (:func:`rl_lustre.plan.capacity.queued_pool_settings`;
its nodes carry the class's label and taint, so pods that select the class land there), the
request's PodTemplate and the ``autoscaling.x-k8s.io/v1`` ProvisioningRequest for the nodes
the class has not brought (:mod:`rl_lustre.kube.provisioning_request`), and replaces the
capacity probes still pending with probes that consume the request (its annotations: the
cluster autoscaler leaves such pods to the request). It waits, within the kind's ``wait``,
until the request is ``Provisioned``; ``Failed``, ``CapacityRevoked`` or ``BookingExpired``
end it at once (:func:`rl_lustre.kube.capacity_signals.provisioning_request_state`). A
request that does not deliver is deleted with its pool (:func:`delete_request`) and its
probes; the next stage's class gets new ones.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from ..plankeys import GPU_POOL_KEY

if TYPE_CHECKING:
    from ..spec.lanes import Lane
    from .capacity import Attempt, CapacityPoolDriver
    from .context import Context
    from .step import Step

__all__ = ["ask_queued", "delete_request"]


def ask_queued(
    driver: CapacityPoolDriver, step: Step, api: Any, lane: Lane, attempt: Attempt, resources: dict[str, Any]
) -> bool:
    """Ask for the nodes the class has not brought through ``lane``'s ProvisioningRequest (see
    the module's doc); True once it is Provisioned, else False with ``attempt`` ended."""
    from ..errors import WaitTimeoutError
    from ..gcp._wait import wait_for
    from ..gcp.container_requests import node_pool_request
    from ..kube.capacity_signals import provisioning_request_state
    from ..kube.client import ResourceClient
    from ..kube.provisioning_request import consume_annotations, pod_template, provisioning_request, request_name
    from .gcp_drivers import NodePoolDriver
    from .scaleup import class_nodes, drop_pending_probes, top_up_probes

    ctx = driver.ctx
    spec = ctx.cluster
    node = driver._node(lane, queued=True)
    if ctx.apis.pools.get_or_none(driver._path(node.name)) is None:
        step.requesting()
        preload = NodePoolDriver(ctx, GPU_POOL_KEY).preload_path(step)
        request = node_pool_request(ctx.plan, GPU_POOL_KEY, preload_image=preload, node=node)
        ctx.apis.pools.create(request, cluster=driver.cluster, deployment=ctx.deployment)
    count = max(1, spec.num_nodes - len(class_nodes(api, spec)))
    ns = spec.namespace
    ResourceClient(api, "PodTemplate", ns).create(pod_template(spec, lane, resources))
    requests = ResourceClient(api, "ProvisioningRequest", ns)
    requests.create(provisioning_request(spec, lane, count))
    drop_pending_probes(api, spec)
    top_up_probes(api, spec, resources, consume_annotations(spec, lane))
    name = request_name(spec, lane)
    since = time.strftime("%H:%M:%S")
    seen: dict[str, Any] = {}

    def poll() -> str:
        found = requests.get(name) or {}
        state, signal, message = provisioning_request_state(found)
        seen.update(state=state, signal=signal, message=message)
        return state

    def describe(state: str) -> str:
        return f"ProvisioningRequest {name} {state} since {since}: {seen.get('message') or 'queued'}"

    try:
        wait_for(
            f"{lane.label}: {count} nodes at once (queued provisioning)",
            poll,
            done=lambda s: s not in ("pending", "accepted"),
            describe=describe,
            timeout=lane.capacity.wait * ctx.time_scale,
            backoff=ctx.backoff,
        )
    except WaitTimeoutError:
        attempt.end(
            "timeout",
            f"not provisioned within its wait of {lane.capacity.wait:g}s ({seen.get('message') or 'queued'})",
        )
        drop_pending_probes(api, spec)
        return False
    if seen.get("state") != "provisioned":
        signal = seen.get("signal")
        attempt.end(
            signal.kind if signal is not None else str(seen.get("state")),
            signal.short() if signal is not None else str(seen.get("message")),
            signal,
        )
        drop_pending_probes(api, spec)
        return False
    return True


def delete_request(ctx: Context, lane: Lane) -> None:
    """Delete ``lane``'s ProvisioningRequest and PodTemplate, if its GKE cluster is there."""
    from ..gcp.container_requests import cluster_path
    from ..kube.client import ResourceClient
    from ..kube.provisioning_request import request_name

    gke = ctx.apis.clusters.get_or_none(cluster_path(ctx.plan))
    if gke is None:
        return
    api = ctx.kube_api(gke)
    name = request_name(ctx.cluster, lane)
    for kind in ("ProvisioningRequest", "PodTemplate"):
        ResourceClient(api, kind, ctx.cluster.namespace).delete(name)
