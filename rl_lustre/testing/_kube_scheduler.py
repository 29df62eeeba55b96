"""Where :class:`~rl_lustre.testing.kube.KubeFake`'s scheduler puts a pod, and what it says
when it cannot: the default kube-scheduler's filters, with its words (Kubernetes 1.35).

Per registered Node, in the scheduler's order (the first that fails is the node's reason):

- ``spec.unschedulable`` (cordoned): ``node(s) were unschedulable``;
- taints with effect ``NoSchedule`` or ``NoExecute`` the pod does not tolerate:
  ``node(s) had untolerated taint(s)``;
- ``nodeSelector`` and required node affinity: ``node(s) didn't match Pod's node
  affinity/selector``;
- resources: the pod's requests (each container's requests, or its limits where it sets
  no request, as the API server defaults them; the largest init container; one pod)
  against the node's ``status.allocatable`` less what its other non-terminated pods
  request: ``Insufficient cpu``, ``Insufficient nvidia.com/gpu``, ``Too many pods``, one
  per resource that does not fit.

A pod that fits no node gets the scheduler's message, e.g. ``0/3 nodes are available: 1
node(s) didn't match Pod's node affinity/selector, 2 Insufficient nvidia.com/gpu. no new
claims to deallocate, preemption: 0/3 nodes are available: 1 Preemption is not helpful for
scheduling, 2 No preemption victims found for incoming pod.``: a node that failed on
something preemption cannot change (a taint, the selector, a request above the node's
whole allocatable) is "not helpful"; one that would fit once other pods went has "no
victims" (the fake runs no lower-priority pods). Among the nodes that fit, the one with the
fewest pods is chosen (then by name).

:func:`place` is held to the real scheduler in ``tests/test_kube_real.py``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ._kube_store import Obj, labels_of

__all__ = ["SELECTOR", "TAINTS", "fits_node", "place", "pod_requests", "quantity", "untolerated"]

TAINTS = "node(s) had untolerated taint(s)"
SELECTOR = "node(s) didn't match Pod's node affinity/selector"
_CORDONED = "node(s) were unschedulable"
_TERMINAL = ("Succeeded", "Failed")
_SUFFIXES = {
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
    "m": 1e-3,
}
# What a Node without status.allocatable offers (kwok's default for the Nodes it plays).
_UNSET_ALLOCATABLE = {"cpu": "1k", "memory": "1Ti", "pods": "1M", "ephemeral-storage": "1Pi"}


def quantity(value: Any) -> float:
    """A Kubernetes quantity as a number (``"100m"`` → 0.1, ``"1Gi"`` → 2**30).

    Examples:
        >>> quantity("223370m"), quantity("8"), quantity("1Gi"), quantity("5587Gi") > quantity("5Ti")
        (223.37, 8.0, 1073741824.0, True)
    """
    text = str(value).strip()
    for suffix in sorted(_SUFFIXES, key=len, reverse=True):
        if text.endswith(suffix) and text[: -len(suffix)].replace(".", "", 1).lstrip("-").isdigit():
            return float(text[: -len(suffix)]) * _SUFFIXES[suffix]
    return float(text)


def pod_requests(pod: Mapping[str, Any]) -> dict[str, float]:
    """What ``pod`` asks of a node: the sum of its containers' requests (limits where a
    container sets none, as the API server defaults them), at least its largest init
    container's, and one ``pods``."""

    def of(container: Mapping[str, Any]) -> dict[str, float]:
        resources = container.get("resources") or {}
        merged = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        return {k: quantity(v) for k, v in merged.items()}

    spec = pod.get("spec") or {}
    total: dict[str, float] = {}
    for c in spec.get("containers") or []:
        for k, v in of(c).items():
            total[k] = total.get(k, 0.0) + v
    for c in spec.get("initContainers") or []:
        for k, v in of(c).items():
            total[k] = max(total.get(k, 0.0), v)
    total["pods"] = 1.0
    return total


def untolerated(pod_spec: Mapping[str, Any], node: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The node's ``NoSchedule``/``NoExecute`` taints that no toleration of the pod covers."""
    tolerations = pod_spec.get("tolerations") or []

    def tolerates(t: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
        if t.get("effect") and t.get("effect") != taint.get("effect"):
            return False
        if not t.get("key"):
            return t.get("operator") == "Exists"
        if t.get("key") != taint.get("key"):
            return False
        return t.get("operator") == "Exists" or (t.get("value") or "") == (taint.get("value") or "")

    return [
        taint
        for taint in (node.get("spec") or {}).get("taints") or []
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not any(tolerates(t, taint) for t in tolerations)
    ]


def fits_node(pod_spec: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """Whether a node with ``labels`` matches the pod's ``nodeSelector`` and required node
    affinity (``In``, ``NotIn``, ``Exists``, ``DoesNotExist`` terms; any term may match)."""
    if any(labels.get(k) != v for k, v in (pod_spec.get("nodeSelector") or {}).items()):
        return False
    required = ((pod_spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = required.get("nodeSelectorTerms") or []

    def holds(expr: Mapping[str, Any]) -> bool:
        key, op, values = str(expr.get("key")), str(expr.get("operator")), expr.get("values") or []
        if op in ("In", "NotIn"):
            return (labels.get(key) in values) == (op == "In")
        return (key in labels) == (op == "Exists") if op in ("Exists", "DoesNotExist") else False

    return not terms or any(all(holds(e) for e in t.get("matchExpressions") or []) for t in terms)


def _allocatable(node: Mapping[str, Any]) -> dict[str, float]:
    given = (node.get("status") or {}).get("allocatable") or _UNSET_ALLOCATABLE
    return {k: quantity(v) for k, v in given.items()}


def _failures(pod: Obj, node: Obj, others: Iterable[Obj]) -> tuple[list[str], bool]:
    """``(reasons, unresolvable)`` why ``pod`` cannot go to ``node`` (none: it fits)."""
    spec = pod.get("spec") or {}
    if (node.get("spec") or {}).get("unschedulable"):
        return [_CORDONED], True
    if untolerated(spec, node):
        return [TAINTS], True
    if not fits_node(spec, labels_of(node)):
        return [SELECTOR], True
    free = _allocatable(node)
    total = dict(free)
    for other in others:
        for k, v in pod_requests(other).items():
            free[k] = free.get(k, 0.0) - v
    wanted = pod_requests(pod)
    short = sorted(k for k, v in wanted.items() if v > 0 and v > free.get(k, 0.0) + 1e-9)
    if not short:
        return [], False
    reasons = ["Too many pods" if k == "pods" else f"Insufficient {k}" for k in short]
    # Preemption cannot help a request above what the node offers at all.
    return reasons, any(wanted[k] > total.get(k, 0.0) + 1e-9 for k in short)


def place(pod: Obj, nodes: Sequence[Obj], pods: Iterable[Obj]) -> tuple[str | None, str]:
    """``(node name, "")`` for the node the scheduler puts ``pod`` on, or ``(None, why)``
    with the scheduler's own message when none fits."""
    by_node: dict[str, list[Obj]] = {}
    for other in pods:
        where = (other.get("spec") or {}).get("nodeName")
        if (
            where
            and (other.get("status") or {}).get("phase") not in _TERMINAL
            and other["metadata"].get("uid") != pod["metadata"].get("uid")
        ):
            by_node.setdefault(str(where), []).append(other)
    counts: dict[str, int] = {}
    preemption: dict[str, int] = {}
    fitting = []
    for node in nodes:
        name = node["metadata"]["name"]
        reasons, unresolvable = _failures(pod, node, by_node.get(name, []))
        if not reasons:
            fitting.append(name)
            continue
        for reason in reasons:
            counts[reason] = counts.get(reason, 0) + 1
        verdict = (
            "Preemption is not helpful for scheduling"
            if unresolvable
            else "No preemption victims found for incoming pod"
        )
        preemption[verdict] = preemption.get(verdict, 0) + 1
    if fitting:
        return min(fitting, key=lambda n: (len(by_node.get(n, [])), n)), ""
    n = len(nodes)
    listed = ", ".join(sorted(f"{c} {r}" for r, c in counts.items()))
    after = ", ".join(sorted(f"{c} {r}" for r, c in preemption.items()))
    return None, (
        f"0/{n} nodes are available: {listed}. no new claims to deallocate, "
        f"preemption: 0/{n} nodes are available: {after}."
    )
