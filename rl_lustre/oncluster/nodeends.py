"""When GKE ends a node, as the node itself says: read by the Ray head from the Kubernetes Node.

GKE puts on a node whose run is bounded (flex-start's ``max_run_duration``) the annotation
:data:`TERMINATION_ANNOTATION`, the time it will end the node, RFC 3339 in UTC. No GKE
documentation page names it (searched: "About flex-start provisioning",
".../how-to/provisioningrequest", "Manage GKE node disruption for GPUs and TPUs"): the name is
the one GKE's cluster autoscaler reads (its constant ``InstanceTerminationAnnotationKey``, "the
time of the termination configured for a node", beside the label
``cloud.google.com/gke-max-run-duration-seconds``). So it is preferred where present, never
needed: without it, a node's end is computed (:mod:`.lifetimes`).

Both sides read it: ``up()`` for the nodes it brings (:func:`rl_lustre.kube.readiness.termination_end`),
the supervisor for the nodes an attempt may run on, whenever they came (a ComputeClass's
fallback mid-run), with :func:`read_ends`: ``GET /api/v1/nodes/<name>`` as the head's service
account (:mod:`rl_lustre.kube.head_access`: a ClusterRole that may ``get`` Nodes, nothing else),
a Ray node's name being its Kubernetes node's on our RayCluster. A failure (not in a pod, a
403, a timeout) is returned as a reason, never raised: the end is then computed.

    >>> termination_time({"metadata": {"annotations": {TERMINATION_ANNOTATION: "2026-12-12T01:00:00Z"}}})
    1797037200.0
    >>> rfc3339("2025-12-01T20:41:03.250000Z"), rfc3339("2025-12-01T20:41:03"), rfc3339("soon"), rfc3339(None)
    (1764621663.25, 1764621663.0, None, None)

Standard library only (part of the on-cluster package).
"""

from __future__ import annotations

import dataclasses
import datetime
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

__all__ = ["TERMINATION_ANNOTATION", "Read", "read_ends", "reader", "rfc3339", "termination_time"]

TERMINATION_ANNOTATION = "node.gke.io/machine-termination-datetime"
# Per request, and for all the nodes of an attempt: an attempt's start waits at most this long.
_TIMEOUT = 3.0
_BUDGET = 6.0


def rfc3339(stamp: Any) -> float | None:
    """An RFC 3339 time stamp (the Kubernetes API's) as seconds since the epoch; None if it is not one."""
    if not isinstance(stamp, str) or not stamp:
        return None
    try:
        parsed = datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return None
    if parsed.tzinfo is None:  # no offset: UTC, as Kubernetes writes its times
        return (parsed - datetime.datetime(1970, 1, 1)).total_seconds()
    return parsed.timestamp()


def termination_time(node: Mapping[str, Any]) -> float | None:
    """When GKE says it ends ``node`` (a Kubernetes Node as a dict), or None: it does not say."""
    annotations = (node.get("metadata") or {}).get("annotations") or {}
    return rfc3339(annotations.get(TERMINATION_ANNOTATION))


@dataclasses.dataclass(frozen=True)
class Read:
    """The ends read (by node name; nodes without the annotation are not in it) and, if the
    reading stopped, why."""

    ends: dict[str, float]
    failed: str = ""


def read_ends(
    names: Iterable[str],
    *,
    credentials: str | None = None,
    api: str | None = None,
    token: str | None = None,
    ca_pem: str | None = None,
    timeout: float = _TIMEOUT,
    budget: float = _BUDGET,
) -> Read:
    """The ends GKE put on the Kubernetes Nodes ``names``, read with this pod's credentials
    (``credentials``: their directory, by default the standard one) or ``api``, ``token`` and
    ``ca_pem``. Never raises: the first failure (a refusal, a timeout, not in a pod) stops the
    reading and says why; a node that is gone (404) or carries no end is not in :attr:`Read.ends`."""
    import urllib.error
    import urllib.parse

    from .incluster import SERVICE_ACCOUNT_DIR, connect, in_cluster

    credentials = credentials or SERVICE_ACCOUNT_DIR
    names = list(dict.fromkeys(names))
    if not names:
        return Read({})
    if api is None and not in_cluster(credentials):
        return Read({}, "not in a Kubernetes pod (no in-cluster credentials)")
    try:
        kube = connect(api=api, token=token, ca_pem=ca_pem, credentials=credentials, timeout=timeout)
    except (OSError, ValueError) as exc:
        return Read({}, f"no in-cluster credentials ({type(exc).__name__}: {exc})")
    ends: dict[str, float] = {}
    stop = time.monotonic() + budget
    for name in names:
        if time.monotonic() > stop:
            return Read(ends, f"out of time ({budget:g}s) before Node {name}")
        try:
            node = kube.get(f"/api/v1/nodes/{urllib.parse.quote(name, safe='')}")
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                continue
            why = " (the head's service account may not get Nodes)" if exc.code == 403 else ""
            return Read(ends, f"GET Node {name}: HTTP {exc.code} {exc.reason}{why}")
        except (OSError, ValueError) as exc:
            return Read(ends, f"GET Node {name}: {type(exc).__name__}: {exc}")
        end = termination_time(node) if isinstance(node, dict) else None
        if end is not None:
            ends[name] = end
    return Read(ends)


def reader(credentials: str | None, say: Callable[[str], None]) -> Callable[[list[str]], dict[str, float]]:
    """:func:`read_ends` for :func:`.lifetimes.attempt_end`: a failure said once per call.

    >>> lines = []
    >>> reader("/nonexistent", lines.append)(["gke-c-gpu-a-1"]), lines  # doctest: +ELLIPSIS
    ({}, ['the end of gke-c-gpu-a-1 is computed, not read from its Node: not in a Kubernetes pod ...'])
    """

    def read(names: list[str]) -> dict[str, float]:
        got = read_ends(names, credentials=credentials)
        if got.failed:
            say(f"the end of {', '.join(names)} is computed, not read from its Node: {got.failed}")
        return got.ends

    return read
