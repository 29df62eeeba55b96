"""When a deployment's objects are ready, as their controllers report it: a RayCluster by
KubeRay's status, a claim by its phase, any object by a condition; and the API's time
stamps as seconds. No remote call.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["claim_bound", "condition_true", "raycluster_ready", "seconds", "spec_worker_replicas", "termination_end"]


def seconds(stamp: Any) -> float | None:
    """An RFC 3339 time stamp of the Kubernetes API as seconds since the epoch (read as the
    supervisor reads a node's end: :func:`rl_lustre.oncluster.nodeends.rfc3339`).

    Examples:
        >>> seconds("2025-12-01T20:41:03Z"), seconds("2025-12-01T20:41:03.250000Z"), seconds(None)
        (1764621663.0, 1764621663.25, None)
    """
    from ..oncluster.nodeends import rfc3339

    return rfc3339(stamp)


def termination_end(nodes: Iterable[Mapping[str, Any]]) -> float | None:
    """The earliest time GKE says it ends one of ``nodes`` (its annotation
    :data:`rl_lustre.catalog.GKE_TERMINATION_ANNOTATION`, which GKE puts on nodes whose run is
    bounded: flex-start), as seconds since the epoch; None when no node says. Each node is read
    as the supervisor reads it (:func:`rl_lustre.oncluster.nodeends.termination_time`).

    Examples:
        >>> from rl_lustre.catalog import GKE_TERMINATION_ANNOTATION as END
        >>> termination_end([{"metadata": {"annotations": {END: "2026-12-13T01:00:00Z"}}},
        ...                  {"metadata": {"annotations": {END: "2026-12-12T01:00:00Z"}}}, {"metadata": {}}])
        1797037200.0
        >>> termination_end([{"metadata": {"annotations": {END: "soon"}}}]) is None
        True
    """
    from ..oncluster.nodeends import termination_time

    return min((t for t in map(termination_time, nodes) if t is not None), default=None)


def condition_true(obj: Mapping[str, Any], kind: str) -> bool:
    """Whether ``obj``'s status has condition ``kind`` with status ``"True"`` (a Node's ``Ready``).

    Examples:
        >>> condition_true({"status": {"conditions": [{"type": "Ready", "status": "True"}]}}, "Ready")
        True
        >>> condition_true({"status": {}}, "Ready")
        False
    """
    return any(
        c.get("type") == kind and c.get("status") == "True" for c in (obj.get("status") or {}).get("conditions") or []
    )


def spec_worker_replicas(spec: Mapping[str, Any]) -> int:
    """The worker pods KubeRay wants for ``spec``: each group's ``replicas`` held to
    ``[minReplicas, maxReplicas]``, times ``numOfHosts`` (0 for a suspended group)."""
    total = 0
    for group in spec.get("workerGroupSpecs") or []:
        if group.get("suspend"):
            continue
        low, high = int(group.get("minReplicas") or 0), group.get("maxReplicas")
        replicas = group.get("replicas")
        want = low if replicas is None or int(replicas) < low else int(replicas)
        if high is not None:
            want = min(want, int(high))
        total += want * int(group.get("numOfHosts") or 1)
    return total


def raycluster_ready(rc: Mapping[str, Any] | None) -> bool:
    """Whether a RayCluster is ready, as KubeRay reports it.

    ``HeadPodReady`` and ``RayClusterProvisioned`` both True when KubeRay sets
    conditions (v1.2+), otherwise ``status.state == "ready"``, and as many ready workers
    as desired. A status older than the spec (``observedGeneration``) counts only when
    the worker count it desires is the spec's: KubeRay writes ``observedGeneration`` only
    along with another status change, so after a pod-template-only change (image, env),
    which recreates no pod, it stays behind for good.

    Examples:
        >>> raycluster_ready({"metadata": {"generation": 1}, "status": {"state": "ready"}})
        True
        >>> raycluster_ready({"status": {"state": "ready", "conditions": [
        ...     {"type": "HeadPodReady", "status": "True"},
        ...     {"type": "RayClusterProvisioned", "status": "False"}]}})
        False
        >>> old = {"observedGeneration": 1, "state": "ready", "desiredWorkerReplicas": 2, "readyWorkerReplicas": 2}
        >>> raycluster_ready({"metadata": {"generation": 2}, "spec": {"workerGroupSpecs": [{"replicas": 2}]},
        ...                   "status": old})   # the template changed: the same pods serve it
        True
        >>> raycluster_ready({"metadata": {"generation": 2}, "spec": {"workerGroupSpecs": [{"replicas": 3}]},
        ...                   "status": old})   # scaled: not until KubeRay has caught up
        False
    """
    if rc is None:
        return False
    status = rc.get("status") or {}
    generation = (rc.get("metadata") or {}).get("generation")
    observed = status.get("observedGeneration")
    # RayClusterProvisioned and state stay set after the first time all pods were
    # ready, so a scale-up is ready only once the new workers are too.
    desired, ready = status.get("desiredWorkerReplicas"), status.get("readyWorkerReplicas")
    stale = generation is not None and observed is not None and int(observed) < int(generation)
    if stale and (desired is None or int(desired) != spec_worker_replicas(rc.get("spec") or {})):
        return False
    if desired is not None and int(ready or 0) < int(desired):
        return False
    conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
    if "HeadPodReady" in conditions or "RayClusterProvisioned" in conditions:
        return conditions.get("HeadPodReady") == "True" and conditions.get("RayClusterProvisioned") == "True"
    return status.get("state") == "ready"


def claim_bound(pvc: Mapping[str, Any] | None) -> bool:
    """Whether a PersistentVolumeClaim is Bound."""
    return pvc is not None and (pvc.get("status") or {}).get("phase") == "Bound"
