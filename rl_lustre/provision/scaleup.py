"""The first GPU nodes of a deployment: capacity probes that select the ComputeClass, and the
wait for the nodes GKE's cluster autoscaler brings for them.

GKE's cluster autoscaler adds nodes only for pods that are pending for them, and the Ray
workers exist only once the volume is there (the RayCluster mounts it). So ``up()`` creates
one *capacity probe* per worker (:func:`probe_pods`): a ``pause`` pod that asks for one Ray
worker's resources and selects the deployment's ComputeClass, as the workers will. The
autoscaler brings nodes for them from the class's rules in order, while Managed Lustre is
still being created, and the image pre-pull runs on them. The probes hold the nodes until
the RayCluster's workers take their place (:func:`release_probes`, when the RayCluster is
applied): the nodes are never empty long enough for the class's one-minute consolidation.

:func:`wait_for_nodes` waits until the class's Ready GPU nodes number ``num_nodes``. The
probes' Events are read each poll (:func:`rl_lustre.kube.capacity_signals.classify_event`):
a ``FailedScaleUp`` of one rule (a stock-out, a quota) is only reported, since the
autoscaler moves on to the next rule at once; a ``NotTriggerScaleUp`` saying the
autoscaler has nothing left to try (every rule backing off after a failed scale-up, or none
can take the pod) ends the wait at once. A ProvisioningRequest's nodes are consumed by
probes that carry its annotations (:func:`rl_lustre.kube.provisioning_request.consume_annotations`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .. import naming
from ..catalog import COMPUTE_CLASS_LABEL, GKE_NODEPOOL_LABEL
from ..kube.readiness import condition_true, seconds

if TYPE_CHECKING:
    from ..kube.capacity_signals import Signal
    from ..spec import ClusterSpec
    from .capacity import Attempt
    from .context import Context
    from .step import Step

__all__ = [
    "PROBE_COMPONENT",
    "class_nodes",
    "drop_pending_probes",
    "probe_pods",
    "probes_of",
    "release_probes",
    "top_up_probes",
    "wait_for_nodes",
]

PROBE_COMPONENT = "capacity-probe"
_COMPONENT_LABEL = "app.kubernetes.io/component"
# Signals that say the autoscaler has nothing left to try for the probes now.
_ENDING = ("backoff", "misconfigured")


def probe_pods(
    cluster: ClusterSpec,
    resources: Mapping[str, Any],
    *,
    count: int | None = None,
    first: int = 0,
    annotations: Mapping[str, str] | None = None,
) -> list[dict[str, Any]]:
    """``count`` (by default ``num_nodes``) pending ``v1`` Pods that ask for the GPU nodes of
    the deployment's ComputeClass, one Ray worker's ``resources`` each.

    Examples:
        >>> from rl_lustre import Cluster
        >>> c = Cluster(name="demo", project="my-project", region="us-east1", zone="us-east1-b", num_nodes=2,
        ...             fabric="tcp")
        >>> pods = probe_pods(c, {"limits": {"nvidia.com/gpu": 8}})
        >>> [p["metadata"]["name"] for p in pods], pods[0]["spec"]["nodeSelector"]
        (['demo-capacity-probe-0', 'demo-capacity-probe-1'], {'cloud.google.com/compute-class': 'demo-gpus'})
    """
    import copy

    from ..kube.computeclass import pod_selector, pod_tolerations
    from ..kube.fabric import PAUSE_IMAGE
    from ..kube.labels import deployment_labels

    labels = {**deployment_labels(cluster), _COMPONENT_LABEL: PROBE_COMPONENT}
    return [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{cluster.name}-{PROBE_COMPONENT}-{i}",
                "namespace": cluster.namespace,
                "labels": dict(labels),
                **({"annotations": dict(annotations)} if annotations else {}),
            },
            "spec": {
                "nodeSelector": pod_selector(cluster),
                "tolerations": pod_tolerations(cluster),
                "terminationGracePeriodSeconds": 0,
                "containers": [{"name": "probe", "image": PAUSE_IMAGE, "resources": copy.deepcopy(dict(resources))}],
            },
        }
        for i in range(first, first + (cluster.num_nodes if count is None else count))
    ]


def probes_of(
    api: Any, cluster: ClusterSpec, *, pending_only: bool = False, deleting: bool = False
) -> list[dict[str, Any]]:
    """The deployment's capacity probes (``deleting``: those being deleted too); ``pending_only``:
    not on a node yet."""
    from ..kube.client import ResourceClient

    pods = ResourceClient(api, "Pod", cluster.namespace)
    found = pods.list(label_selector=f"{_COMPONENT_LABEL}={PROBE_COMPONENT}")[0]
    return [
        p
        for p in found
        if p["metadata"]["name"].startswith(f"{cluster.name}-{PROBE_COMPONENT}-")
        and (deleting or not p["metadata"].get("deletionTimestamp"))
        and not (pending_only and (p.get("spec") or {}).get("nodeName"))
    ]


def top_up_probes(
    api: Any, cluster: ClusterSpec, resources: Mapping[str, Any], annotations: Mapping[str, str] | None = None
) -> int:
    """Create probes (consuming a ProvisioningRequest with ``annotations``) until there are
    ``num_nodes``; returns how many were created."""
    from ..kube.client import ResourceClient

    have = probes_of(api, cluster)
    taken = {p["metadata"]["name"] for p in probes_of(api, cluster, deleting=True)}
    missing = cluster.num_nodes - len(have)
    if missing <= 0:
        return 0
    first = 0
    while any(f"{cluster.name}-{PROBE_COMPONENT}-{i}" in taken for i in range(first, first + missing)):
        first += cluster.num_nodes
    pods = ResourceClient(api, "Pod", cluster.namespace)
    for pod in probe_pods(cluster, resources, count=missing, first=first, annotations=annotations):
        pods.create(pod)
    return missing


def drop_pending_probes(api: Any, cluster: ClusterSpec) -> int:
    """Delete the probes not on a node yet; returns how many."""
    from ..kube.client import ResourceClient

    pods = ResourceClient(api, "Pod", cluster.namespace)
    pending = probes_of(api, cluster, pending_only=True)
    for p in pending:
        pods.delete(p["metadata"]["name"])
    return len(pending)


def class_nodes(api: Any, cluster: ClusterSpec) -> list[dict[str, Any]]:
    """The Ready nodes of the deployment's ComputeClass (every GPU pool's), not being deleted."""
    from ..kube.client import ResourceClient

    found = ResourceClient(api, "Node", None).list(
        label_selector=f"{COMPUTE_CLASS_LABEL}={naming.compute_class_name(cluster)}"
    )[0]
    return [n for n in found if condition_true(n, "Ready") and not n["metadata"].get("deletionTimestamp")]


def release_probes(api: Any, cluster: ClusterSpec, *, wait: float = 0.0) -> int:
    """Delete the capacity probes (the Ray workers take their nodes now); returns how many.
    With ``wait``, until they are gone (at most that many seconds): the workers then find
    the nodes free, and no worker waits Pending for the cluster autoscaler to act on."""
    from ..kube.client import ResourceClient

    pods = ResourceClient(api, "Pod", cluster.namespace)
    mine = probes_of(api, cluster)
    for p in mine:
        pods.delete(p["metadata"]["name"])
    deadline = time.monotonic() + wait
    while mine and probes_of(api, cluster, deleting=True) and time.monotonic() < deadline:
        time.sleep(0.05)
    return len(mine)


def _event_time(event: Mapping[str, Any]) -> float:
    for key in ("eventTime", "firstTimestamp", "lastTimestamp"):
        at = seconds(event.get(key))
        if at is not None:
            return at
    return time.time()


def wait_for_nodes(ctx: Context, step: Step, attempt: Attempt, budget: float, *, what: str) -> bool:
    """Wait, within ``budget`` seconds (of the policy's waits), until the class's Ready GPU nodes
    number ``num_nodes``: True then, else False with ``attempt`` ended (``backoff``,
    ``misconfigured``, ``timeout``). ``what``: the rules the class tries, for the progress line."""
    from ..errors import WaitTimeoutError
    from ..gcp._wait import wait_for
    from ..kube.capacity_signals import classify_event
    from ..kube.client import ResourceClient
    from ..plankeys import GKE_CLUSTER_KEY

    api = ctx.kube_api(step.records[GKE_CLUSTER_KEY].value)
    ns = ctx.cluster.namespace
    wanted = ctx.cluster.num_nodes
    events = ResourceClient(api, "Event", ns)
    since = time.strftime("%H:%M:%S")
    # What the autoscaler said before this wait (of rules the class no longer has) is not news.
    before = {(e["metadata"].get("uid"), e.get("count"), e.get("lastTimestamp")) for e in events.list()[0]}
    seen: dict[str, Any] = {"ready": 0, "said": [], "signal": None, "pools": {}}

    def poll() -> str:
        nodes = class_nodes(api, ctx.cluster)
        seen["ready"] = len(nodes)
        seen["pools"] = {n["metadata"]["labels"].get(GKE_NODEPOOL_LABEL, "?") for n in nodes}
        if seen["ready"] >= wanted:
            return "granted"
        probes = {p["metadata"]["uid"] for p in probes_of(api, ctx.cluster)}
        for event in sorted(events.list()[0], key=_event_time):
            if (event.get("involvedObject") or {}).get("uid") not in probes or (
                event["metadata"].get("uid"),
                event.get("count"),
                event.get("lastTimestamp"),
            ) in before:
                continue
            signal: Signal | None = classify_event(
                str(event.get("reason") or ""),
                str(event.get("message") or ""),
                source="pod event",
                at=_event_time(event),
            )
            if signal is None:
                continue
            if signal.short() not in seen["said"]:
                seen["said"].append(signal.short())
            if signal.kind in _ENDING:
                seen["signal"] = signal
                return "failed"
        return "waiting"

    def describe(state: str) -> str:
        said = f"; it says {seen['said'][-1]}" if seen["said"] else ""
        return (
            f"{seen['ready']}/{wanted} GPU nodes Ready, waiting since {since} for the cluster autoscaler "
            f"(ComputeClass {naming.compute_class_name(ctx.cluster)}: {what}){said}"
        )

    try:
        state = wait_for(
            f"{wanted} GPU nodes from the cluster autoscaler",
            poll,
            done=lambda s: s != "waiting",
            describe=describe,
            timeout=budget * ctx.time_scale,
            backoff=ctx.backoff,
        )
    except WaitTimeoutError:
        attempt.end(
            "timeout",
            f"{seen['ready']} of {wanted} nodes within its waits of {budget:g}s"
            + (f" ({seen['said'][-1]})" if seen["said"] else ""),
        )
        return False
    step.check()
    if state == "granted":
        return True
    signal = seen["signal"]
    reason = "; ".join(seen["said"][-3:]) or signal.short(400)
    attempt.end(signal.kind, reason, signal)
    return False
