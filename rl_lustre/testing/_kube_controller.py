"""What every simulated controller of :class:`~rl_lustre.testing.kube.KubeFake` shares.

A :class:`Controller` sees the store, the fault knobs and timings, how long each object
has existed (:class:`Memory`, shared by all, so that the garbage collector can forget an
object another controller has seen) and records Events once per (object, reason,
message) as the real event recorder dedupes them. Below it: the pod and condition facts
more than one controller reads.
"""

from __future__ import annotations

import copy
import time

import attrs

from ..catalog import GKE_ACCELERATOR_LABEL, GPU_RESOURCE
from ._kube_faults import KubeFaults, KubeTimings
from ._kube_store import Obj, Store, now_rfc3339, random_suffix

GPU = GPU_RESOURCE


@attrs.define
class Memory:
    """What the controllers remember between passes."""

    # uid (or "deleted:<uid>") -> monotonic time of the first sighting.
    born: dict[str, float] = attrs.Factory(dict)
    # (uid, reason, message) of every Event recorded.
    recorded: set[tuple[str, str, str]] = attrs.Factory(set)

    def clear(self) -> None:
        self.born.clear()
        self.recorded.clear()


class Controller:
    """One simulated controller: ``step()`` moves every object it owns one step on."""

    def __init__(self, store: Store, faults: KubeFaults, timings: KubeTimings, memory: Memory) -> None:
        self.store = store
        self.faults = faults
        self.timings = timings
        self.memory = memory

    def _age(self, obj: Obj) -> float:
        """Seconds since this controller set first saw ``obj``."""
        uid = obj["metadata"]["uid"]
        return time.monotonic() - self.memory.born.setdefault(uid, time.monotonic())

    def register_node(self, node: Obj) -> Obj:
        """Create ``node`` as a VM that joins the cluster does, unless a Node of its name is there:
        ``Ready`` (when its status says nothing of it), with the node lifecycle controller's
        ``RegisteredNode`` and the kubelet's ``NodeReady`` Events. Returns the stored Node."""
        name = node["metadata"]["name"]
        existing = self.store.get("Node", None, name)
        if existing is not None:
            return existing
        node = copy.deepcopy(node)
        status = node.setdefault("status", {})
        if not any(c.get("type") == "Ready" for c in status.get("conditions") or []):
            status["conditions"] = [
                *(status.get("conditions") or []),
                {"type": "Ready", "status": "True", "reason": "KubeletReady", "lastTransitionTime": now_rfc3339()},
            ]
        stored = self.store.create(node)
        self.event(
            stored,
            "RegisteredNode",
            f"Node {name} event: Registered Node {name} in Controller",
            component="node-controller",
        )
        self.event(stored, "NodeReady", f"Node {name} status is now: NodeReady", component="kubelet")
        return stored

    def event(self, involved: Obj, reason: str, message: str, *, warning: bool = False, component: str = "") -> None:
        """Record an Event once per (object, reason, message), as the event recorder dedupes them."""
        meta = involved["metadata"]
        key = (meta["uid"], reason, message)
        if key in self.memory.recorded:
            return
        self.memory.recorded.add(key)
        stamp = now_rfc3339()
        self.store.create(
            {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {
                    "name": f"{meta['name']}.{random_suffix(16)}",
                    "namespace": meta.get("namespace") or "default",
                },
                "involvedObject": {
                    "apiVersion": involved["apiVersion"],
                    "kind": involved["kind"],
                    "name": meta["name"],
                    "namespace": meta.get("namespace") or "",
                    "uid": meta["uid"],
                    "resourceVersion": meta.get("resourceVersion", ""),
                },
                "reason": reason,
                "message": message,
                "type": "Warning" if warning else "Normal",
                "source": {"component": component or "kube-fake"},
                "reportingComponent": component or "kube-fake",
                "reportingInstance": "",
                "firstTimestamp": stamp,
                "lastTimestamp": stamp,
                "count": 1,
            }
        )


def containers(pod: Obj) -> list[Obj]:
    return list((pod.get("spec") or {}).get("containers") or [])


def wants_gpu(pod: Obj) -> bool:
    for c in containers(pod):
        res = c.get("resources") or {}
        if GPU in (res.get("limits") or {}) or GPU in (res.get("requests") or {}):
            return True
    return GKE_ACCELERATOR_LABEL in ((pod.get("spec") or {}).get("nodeSelector") or {})


def condition(ctype: str, status: bool, reason: str = "", message: str = "", *, always_message: bool = False) -> Obj:
    cond: Obj = {"type": ctype, "status": "True" if status else "False", "lastTransitionTime": now_rfc3339()}
    if reason:
        cond["reason"] = reason
    if message or always_message:
        cond["message"] = message
    return cond


def same_conditions(old: list[Obj], new: list[Obj]) -> list[Obj]:
    """``new``, keeping each unchanged condition's original transition time."""
    before = {c["type"]: c for c in old}
    merged = []
    for cond in new:
        prev = before.get(cond["type"])
        if prev and all(prev.get(k) == cond.get(k) for k in ("status", "reason", "message")):
            merged.append(prev)
        else:
            merged.append(cond)
    return merged


def pod_ready(pod: Obj) -> bool:
    status = pod.get("status") or {}
    return status.get("phase") == "Running" and any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or []
    )
