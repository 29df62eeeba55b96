"""Waiting for an autoscaled lane's nodes: flex-start without queued provisioning.

Such a pool is created with 0 nodes; GKE's cluster autoscaler adds nodes only for pods
that are pending for them. So :func:`wait_for_scale_up` creates one *capacity probe* per
node (a ``pause`` pod asking for one Ray worker's resources, on the lane's pool only) and
waits, within the lane's ``wait``, until ``num_nodes`` of the pool's Nodes are Ready. The
probes' Events are read each poll: the autoscaler's ``FailedScaleUp`` ("Node scale up in
zones Z associated with this pod failed: GCE out of resources", or "... GCE quota exceeded")
and ``NotTriggerScaleUp`` "... in backoff after failed scale-up", classified by
:func:`rl_lustre.kube.capacity_signals.classify_event`, end the lane at once (one poll
after the signal). ``NotTriggerScaleUp`` for a selector or size problem is only reported:
right after the pool is created the autoscaler may not know it yet, and the lane's ``wait``
bounds it. The probes are deleted however the wait ends; nodes left empty are removed by
the autoscaler (after its scale-down delay, 10 minutes on GKE), by then the Ray workers,
applied next, are on them.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .. import naming
from ..catalog import GKE_NODEPOOL_LABEL
from ..kube.readiness import condition_true, seconds
from ..plankeys import GKE_CLUSTER_KEY

if TYPE_CHECKING:
    from ..plan.capacity import Lane
    from ..spec import ClusterSpec
    from .capacity import Attempt
    from .context import Context
    from .step import Step

__all__ = ["PROBE_COMPONENT", "probe_pods", "wait_for_scale_up"]

PROBE_COMPONENT = "capacity-probe"
_COMPONENT_LABEL = "app.kubernetes.io/component"
# Signals that end the lane: the autoscaler tried and failed, or backs off after failing.
_ENDING = ("stockout", "quota", "backoff")


def probe_pods(cluster: ClusterSpec, lane: Lane, resources: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One pending ``v1`` Pod per node of ``lane``'s pool: what makes the autoscaler scale it up.

    Examples:
        >>> from rl_lustre import Capacity, Cluster
        >>> from rl_lustre.plan.capacity import capacity_lanes
        >>> c = Cluster(name="demo", project="my-project", region="us-east1", zone="us-east1-b", num_nodes=2,
        ...             fabric="tcp", capacity=("spot", Capacity("flex-start", queued=False)))
        >>> pods = probe_pods(c, capacity_lanes(c)[1], {"limits": {"nvidia.com/gpu": 8}})
        >>> [p["metadata"]["name"] for p in pods], pods[0]["spec"]["nodeSelector"]
        (['demo-gpu-flex-b-probe-0', 'demo-gpu-flex-b-probe-1'], {'cloud.google.com/gke-nodepool': 'gpu-flex-b'})
    """
    from ..kube.fabric import PAUSE_IMAGE
    from ..kube.labels import deployment_labels
    from ..kube.provisioning_request import TOLERATIONS

    base = naming.provisioning_request_name(cluster, lane.pool_name)
    labels = {**deployment_labels(cluster), _COMPONENT_LABEL: PROBE_COMPONENT}
    return [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"{base}-probe-{i}", "namespace": cluster.namespace, "labels": labels},
            "spec": {
                "nodeSelector": {GKE_NODEPOOL_LABEL: lane.pool_name},
                "tolerations": copy.deepcopy(TOLERATIONS),
                "terminationGracePeriodSeconds": 0,
                "containers": [{"name": "probe", "image": PAUSE_IMAGE, "resources": copy.deepcopy(dict(resources))}],
            },
        }
        for i in range(cluster.num_nodes)
    ]


def _event_time(event: Mapping[str, Any]) -> float:
    for key in ("eventTime", "firstTimestamp", "lastTimestamp"):
        at = seconds(event.get(key))
        if at is not None:
            return at
    return time.time()


def wait_for_scale_up(ctx: Context, step: Step, lane: Lane, attempt: Attempt) -> bool:
    """Have the autoscaler bring ``lane``'s nodes; True once ``num_nodes`` are Ready, else
    False with ``attempt`` ended (``stockout``, ``quota``, ``backoff``, ``timeout``)."""
    from ..errors import WaitTimeoutError
    from ..gcp._wait import wait_for
    from ..kube.capacity_signals import Signal, classify_event
    from ..kube.client import ResourceClient
    from ..kube.provisioning_request import worker_resources
    from ..plankeys import RAYCLUSTER_KEY

    api = ctx.kube_api(step.records[GKE_CLUSTER_KEY].value)
    ns = ctx.cluster.namespace
    wanted = ctx.cluster.num_nodes
    pods = ResourceClient(api, "Pod", ns)
    probes = probe_pods(ctx.cluster, lane, worker_resources(ctx.manifest(RAYCLUSTER_KEY)))
    uids = {pods.create(p)["metadata"]["uid"] for p in probes}
    nodes, events = ResourceClient(api, "Node", None), ResourceClient(api, "Event", ns)
    since = time.strftime("%H:%M:%S")
    seen: dict[str, Any] = {"ready": 0, "said": "", "signal": None}

    def poll() -> str:
        found = nodes.list(label_selector=f"{GKE_NODEPOOL_LABEL}={lane.pool_name}")[0]
        seen["ready"] = sum(1 for n in found if condition_true(n, "Ready"))
        if seen["ready"] >= wanted:
            return "granted"
        for event in sorted(events.list()[0], key=_event_time):
            if (event.get("involvedObject") or {}).get("uid") not in uids:
                continue
            signal: Signal | None = classify_event(
                str(event.get("reason") or ""),
                str(event.get("message") or ""),
                source="pod event",
                at=_event_time(event),
            )
            if signal is not None:
                seen["said"] = signal.short()
                if signal.kind in _ENDING:
                    seen["signal"] = signal
                    return "failed"
        return "waiting"

    def describe(state: str) -> str:
        return (
            f"{lane.label}: {seen['ready']}/{wanted} nodes Ready, waiting since {since} for the cluster "
            f"autoscaler to scale up pool {lane.pool_name}" + (f"; it says {seen['said']}" if seen["said"] else "")
        )

    try:
        state = wait_for(
            f"{lane.label}: {wanted} nodes from the cluster autoscaler (flex-start)",
            poll,
            done=lambda s: s != "waiting",
            describe=describe,
            timeout=lane.capacity.wait * ctx.time_scale,
            backoff=ctx.backoff,
        )
    except WaitTimeoutError:
        attempt.end(
            "timeout",
            f"{seen['ready']} of {wanted} nodes within its wait of {lane.capacity.wait:g}s"
            + (f" ({seen['said']})" if seen["said"] else ""),
        )
        return False
    finally:
        for p in probes:
            pods.delete(p["metadata"]["name"])
    if state == "granted":
        return True
    signal = seen["signal"]
    attempt.end(signal.kind, signal.short(400), signal)
    return False
