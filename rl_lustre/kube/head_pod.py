"""Whether a RayCluster's Ray head was lost since the RayCluster was made, from its head pod.

A Ray head lost without GCS fault tolerance starts again with an empty job table: the runs
it held are in flight on the volume only, until the cluster's keeper resubmits them. A
client that submits a job whose run may be one of those must read the run's directory
first (never start it twice); on GKE that read is a helper job on the head. This module
tells, with two reads of the Kubernetes API, when that read can be skipped: the head pod
never restarted (its containers' ``restartCount``) and is the one KubeRay made with the
RayCluster (created within :data:`FIRST_POD_WITHIN` seconds of it), so no head was lost.

Examples:
    >>> head_replaced({"status": {"containerStatuses": [{"restartCount": 1}]}}, None)
    True
    >>> pod = {"metadata": {"creationTimestamp": "2026-01-01T00:00:05Z"}, "status": {}}
    >>> head_replaced(pod, {"metadata": {"creationTimestamp": "2026-01-01T00:00:00Z"}})
    False
    >>> head_replaced({**pod, "metadata": {"creationTimestamp": "2026-01-01T02:00:00Z"}},
    ...               {"metadata": {"creationTimestamp": "2026-01-01T00:00:00Z"}})
    True
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from ..oncluster.nodeends import rfc3339

__all__ = ["FIRST_POD_WITHIN", "HeadWatch", "head_replaced", "read_head_replaced"]

# KubeRay makes the first head pod in its first reconcile of the RayCluster: seconds after it.
FIRST_POD_WITHIN = 120.0


def _stamp(obj: Mapping[str, Any] | None) -> float | None:
    return rfc3339(((obj or {}).get("metadata") or {}).get("creationTimestamp"))


def head_replaced(pod: Mapping[str, Any], raycluster: Mapping[str, Any] | None) -> bool | None:
    """Whether the head in ``pod`` was lost since ``raycluster`` was made (a container
    restarted in place, or a pod made later than the first); None: cannot be told."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    if any(int(s.get("restartCount") or 0) > 0 for s in statuses):
        return True
    created, born = _stamp(pod), _stamp(raycluster)
    if created is None or born is None:
        return None
    return created - born > FIRST_POD_WITHIN


def read_head_replaced(api: Any, namespace: str, pod: str, raycluster: str) -> bool | None:
    """:func:`head_replaced` of the head pod ``pod`` of RayCluster ``raycluster``, read now
    through the ``ApiClient`` ``api``; None when either cannot be read."""
    from .client import ResourceClient

    try:
        found = ResourceClient(api, "Pod", namespace).get(pod)
        owner = ResourceClient(api, "RayCluster", namespace).get(raycluster)
    except Exception:  # any failure: the caller reads the volume instead
        return None
    return None if found is None else head_replaced(found, owner)


class HeadWatch:
    """:func:`read_head_replaced` through a port-forward's pod, asked at most every ``every``
    seconds (a batch of submits reads the pods once)."""

    def __init__(self, every: float = 15.0) -> None:
        self.every = every
        self._last: tuple[float, str, bool | None] | None = None

    def replaced(self, forward: Any, namespace: str, raycluster: str) -> bool | None:
        """Whether the head behind ``forward`` (a :class:`~.portforward.PortForward`) was lost."""
        pod = forward.pod
        if pod is None:
            return None
        last = self._last
        if last is not None and last[1] == pod and time.monotonic() - last[0] < self.every:
            return last[2]
        answer = read_head_replaced(forward.api, namespace, pod, raycluster)
        self._last = (time.monotonic(), pod, answer)
        return answer
