"""The Kubernetes events of a RayCluster's pods, read from inside the cluster by the Ray head.

A stalled run's bundle holds what Kubernetes said about its pods (a node under memory
pressure, a container restarted, a volume that failed to mount, an impending Spot
termination): the events of the RayCluster's pods and of the RayCluster itself.

The head reads them with the standard in-cluster credentials: the API server at
``$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT``, the pod's service account token and
CA under ``/var/run/secrets/kubernetes.io/serviceaccount``. That account is the head's own
(``<cluster>-ray-head``, made by ``up()``: :mod:`rl_lustre.kube.head_access`), bound to a
Role that may only ``get`` and ``list`` pods and events in the cluster's namespace -- read
only, nothing else, nowhere else.

Standard library only (part of the on-cluster package).
"""

from __future__ import annotations

import json
import os
import ssl
import urllib.parse
import urllib.request
from typing import Any

__all__ = ["SERVICE_ACCOUNT_DIR", "in_cluster", "pod_events"]

SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
# KubeRay's label on every pod of a RayCluster.
CLUSTER_LABEL = "ray.io/cluster"


def in_cluster() -> bool:
    """Whether this process runs in a Kubernetes pod with a service account token."""
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and os.path.isfile(
        os.path.join(SERVICE_ACCOUNT_DIR, "token")
    )


def _read(path: str) -> str:
    with open(path) as f:
        return f.read().strip()


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
    sa = SERVICE_ACCOUNT_DIR
    if api is None:
        host, port = os.environ.get("KUBERNETES_SERVICE_HOST", ""), os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        if not host:
            raise OSError("not in a Kubernetes pod: KUBERNETES_SERVICE_HOST is not set")
        api = f"https://{f'[{host}]' if ':' in host else host}:{port}"
    token = token if token is not None else _read(os.path.join(sa, "token"))
    namespace = namespace or _read(os.path.join(sa, "namespace"))
    context = ssl.create_default_context(cafile=None if ca_pem is not None else os.path.join(sa, "ca.crt"))
    if ca_pem is not None:
        context.load_verify_locations(cadata=ca_pem)

    def get(path: str, **params: str) -> list[dict[str, Any]]:
        url = f"{api.rstrip('/')}{path}" + (f"?{urllib.parse.urlencode(params)}" if params else "")
        request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
            items = json.loads(response.read()).get("items")
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
