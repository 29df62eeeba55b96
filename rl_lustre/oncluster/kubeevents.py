"""The Kubernetes events of a RayCluster's pods, read from inside the cluster by the Ray head.

A stalled run's bundle holds what Kubernetes said about its pods (a node under memory
pressure, a container restarted, a volume that failed to mount, an impending Spot
termination): the events of the RayCluster's pods and of the RayCluster itself.

The head reads them with the standard in-cluster credentials (:mod:`.incluster`). That
account is the head's own (``<cluster>-ray-head``, made by ``up()``:
:mod:`rl_lustre.kube.head_access`), bound to a Role that may only ``get`` and ``list`` pods
and events in the cluster's namespace -- read only, nothing else (but the Nodes it may
``get``, for :mod:`.nodeends`).

Standard library only (part of the on-cluster package).
"""

from __future__ import annotations

import urllib.parse
from typing import Any

from .incluster import SERVICE_ACCOUNT_DIR, connect, in_cluster, own_namespace

__all__ = ["SERVICE_ACCOUNT_DIR", "in_cluster", "pod_events"]

# KubeRay's label on every pod of a RayCluster.
CLUSTER_LABEL = "ray.io/cluster"


def pod_events(
    raycluster: str,
    namespace: str | None = None,
    *,
    api: str | None = None,
    token: str | None = None,
    ca_pem: str | None = None,
    timeout: float = 10.0,
) -> dict[str, Any]:
    """The RayCluster's pods (name, node, phase) and the events about them and about the
    RayCluster, oldest first. ``api``, ``token`` and ``ca_pem`` default to the pod's own
    (in-cluster) credentials; ``namespace`` to the pod's.

    Raises:
        OSError: no credentials, or the API server could not be read (``HTTPError`` for a
            refusal, e.g. a service account without the Role).
    """
    kube = connect(api=api, token=token, ca_pem=ca_pem, timeout=timeout)
    namespace = namespace or own_namespace()

    def get(path: str, **params: str) -> list[dict[str, Any]]:
        items = kube.get(path, **params).get("items")
        return items if isinstance(items, list) else []

    base = f"/api/v1/namespaces/{urllib.parse.quote(namespace)}"
    pods = get(f"{base}/pods", labelSelector=f"{CLUSTER_LABEL}={raycluster}")
    names = {str((p.get("metadata") or {}).get("name")) for p in pods}

    def about(e: dict[str, Any]) -> tuple[str, str]:
        obj = e.get("involvedObject") or {}
        return str(obj.get("kind")), str(obj.get("name"))

    events = [e for e in get(f"{base}/events") if about(e)[1] in names or about(e) == ("RayCluster", raycluster)]

    def when(e: dict[str, Any]) -> str:
        return str(e.get("lastTimestamp") or e.get("eventTime") or e.get("firstTimestamp") or "")

    return {
        "namespace": namespace,
        "ray_cluster": raycluster,
        "pods": [
            {
                "name": (p.get("metadata") or {}).get("name"),
                "node": (p.get("spec") or {}).get("nodeName"),
                "phase": (p.get("status") or {}).get("phase"),
            }
            for p in pods
        ],
        "events": [
            {
                "at": when(e),
                "object": "/".join(about(e)),
                "type": e.get("type"),
                "reason": e.get("reason"),
                "message": e.get("message"),
                "count": e.get("count"),
            }
            for e in sorted(events, key=when)
        ],
    }
