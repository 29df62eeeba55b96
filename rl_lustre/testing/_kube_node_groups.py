"""GKE node pools as :class:`~rl_lustre.testing.kube.KubeFake`'s cluster autoscaler sees them:
node groups with a target size, and what happens to their VMs without a pod asking.

``FakeGCP(kube=...)`` registers every RUNNING node pool as a :class:`NodeGroup`: its VMs'
Node as GKE registers one (labels, taints, allocatable: the template the autoscaler
simulates pods on), its autoscaling bounds, whether it is queued (nodes only for a
ProvisioningRequest) and, for flex-start, how long its nodes run. Each pass
(:class:`NodeGroups.step`):

- **re-creation**: a group has fewer VMs than its target after a preemption, whose VM its
  managed instance group re-creates (a preemption does not lower a pool's size: Compute
  Engine's "Spot VMs" page). The VM is asked of the capacity decider once per simulated
  minute: granted, it joins as a new Node; refused for lack of capacity, the group records
  the error, which the autoscaler reads as a failed scale-up of that pool
  (:mod:`rl_lustre.testing._kube_autoscaler`), and the instance group keeps trying: when the
  capacity is back the VM joins, needed or not;
- **run duration**: a flex-start node (a pool with ``max_run_duration``) ends its run that
  long after it joined, as GKE ends flex-start VMs (GKE's "About flex-start provisioning"):
  its pods fail (reason ``Terminated``, a ``DisruptionTarget`` condition) and the Node goes,
  and the group's target with it. Its Node carries GKE's annotation
  ``node.gke.io/machine-termination-datetime`` (the end, in real time, RFC 3339) from the
  start: the name GKE's cluster autoscaler reads the end of such a node from (no GKE page
  documents it; see :data:`rl_lustre.catalog.GKE_TERMINATION_ANNOTATION`);
- **consolidation**: in an autoscaled group, a Ready node no pod but DaemonSet pods uses is
  removed once it has been unneeded for its ComputeClass's
  ``autoscalingPolicy.consolidationDelayMinutes`` (GKE's ComputeClass reference), or the
  cluster autoscaler's default of 10 minutes for a node of no class, never below the
  group's minimum (GKE's "About GKE cluster autoscaling").

Minutes are the fake's: ``KubeTimings.minute`` wall seconds each.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable
from typing import Any

import attrs

from ..catalog import COMPUTE_CLASS_LABEL, GKE_NODEPOOL_LABEL, GKE_SPOT_LABEL, GKE_TERMINATION_ANNOTATION
from ._kube_controller import Controller
from ._kube_store import Obj, labels_of

__all__ = ["DEFAULT_CONSOLIDATION_MINUTES", "NodeGroup", "NodeGroups"]

# The cluster autoscaler's scale-down-unneeded-time (GKE: "About GKE cluster autoscaling").
DEFAULT_CONSOLIDATION_MINUTES = 10.0
# (pool, count, asked_at) -> ("granted" | "wait" | "failed" | "busy", message, nodes)
Decider = Callable[[str, int, float], tuple[str, str, list[Obj]]]


@attrs.define
class NodeGroup:
    """One node pool (see the module's doc).

    Attributes:
        name: the pool's name.
        zone: where its VMs are.
        make: the Node of its ``index``-th VM.
        minimum: the fewest nodes the autoscaler leaves.
        maximum: the most nodes the autoscaler adds up to.
        autoscaled: the autoscaler may change its size.
        queued: queued provisioning: nodes only for a ProvisioningRequest.
        lifetime: a flex-start node's run, seconds (None: no end).
        target: the VMs its instance group should have.
    """

    name: str
    zone: str
    make: Callable[[int], Obj]
    minimum: int = 0
    maximum: int = 0
    autoscaled: bool = False
    queued: bool = False
    lifetime: float | None = None
    target: int = 0
    next_index: int = 0
    # A scale-up under way: how many VMs, since when (monotonic).
    asking: int = 0
    asked_at: float | None = None
    # The instance group's re-creation of lost VMs: since when, last asked, its last error.
    recreating_since: float | None = None
    recreate_asked: float = 0.0
    error: str = ""
    # The autoscaler's backoff after a failed scale-up of this group.
    backoff_until: float = 0.0
    failures: int = 0

    @property
    def template(self) -> Obj:
        """A Node of the group, as the autoscaler simulates pods on it."""
        return self.make(0)

    @property
    def spot(self) -> bool:
        return labels_of(self.template).get(GKE_SPOT_LABEL) == "true"

    def new_nodes(self, count: int) -> list[Obj]:
        """``count`` Nodes with names no VM of the group had."""
        out = []
        for _ in range(count):
            out.append(self.make(self.next_index))
            self.next_index += 1
        return out


class NodeGroups(Controller):
    """The node pools' own behaviour each pass: re-creation, run duration, consolidation."""

    def __init__(self, *args: Any, spot: Any) -> None:
        super().__init__(*args)
        self.spot = spot
        self.decide: Decider | None = None
        self.groups: dict[str, NodeGroup] = {}
        self._unneeded: dict[str, float] = {}
        self._joined: dict[str, float] = {}

    def minutes(self, value: float) -> float:
        """``value`` simulated minutes, in wall seconds."""
        return value * self.timings.minute

    def register(self, group: NodeGroup, nodes: list[Obj]) -> None:
        """A RUNNING pool and the Nodes it came with."""
        group.target = len(nodes)
        group.next_index = max(group.next_index, len(nodes))
        self.groups[group.name] = group
        for node in nodes:
            self.join(group, node)

    def update(self, group: NodeGroup) -> None:
        """A pool changed in place: its template and bounds (its VMs and target stay)."""
        old = self.groups.get(group.name)
        if old is None:
            return
        old.make, old.minimum, old.maximum, old.autoscaled = group.make, group.minimum, group.maximum, group.autoscaled

    def pool_updated(self, group: NodeGroup, template: Obj) -> None:
        """A pool changed in place (its nodes' labels and taints, its autoscaling): its running
        Nodes get the labels and taints of ``template`` (a Node of the pool as it is now), as
        GKE applies them, and its node group the new bounds."""
        labels = {k: v for k, v in template["metadata"]["labels"].items() if k != "kubernetes.io/hostname"}
        taints = list(template["spec"].get("taints") or [])
        self.update(group)

        def change(o: Obj) -> None:
            o["metadata"]["labels"] = {**o["metadata"].get("labels", {}), **labels}
            o.setdefault("spec", {})["taints"] = list(taints)

        for node in self.nodes_of(group.name):
            self.store.update("Node", None, node["metadata"]["name"], change)

    def forget(self, name: str) -> None:
        self.groups.pop(name, None)

    def nodes_of(self, name: str) -> list[Obj]:
        return [n for n in self.store.find("Node") if labels_of(n).get(GKE_NODEPOOL_LABEL) == name]

    def join(self, group: NodeGroup, node: Obj) -> Obj:
        """A VM of ``group`` joins the cluster as ``node`` (with its end, for flex-start)."""
        if group.lifetime is not None:
            end = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=group.lifetime)
            annotations = node["metadata"].setdefault("annotations", {})
            annotations[GKE_TERMINATION_ANNOTATION] = end.isoformat(timespec="seconds").replace("+00:00", "Z")
        stored = self.register_node(node)
        self._joined[stored["metadata"]["uid"]] = time.monotonic()
        return stored

    def add(self, group: NodeGroup, count: int) -> list[Obj]:
        """Grow ``group`` by ``count`` VMs that join at once."""
        group.target += count
        return [self.join(group, n) for n in group.new_nodes(count)]

    def step(self) -> None:
        for group in list(self.groups.values()):
            self._recreate(group)
            self._end_runs(group)
            self._consolidate(group)

    def _recreate(self, group: NodeGroup) -> None:
        have = len(self.nodes_of(group.name))
        missing = group.target - have - (group.asking if group.asked_at is not None else 0)
        if missing <= 0:
            group.recreating_since, group.error = None, ""
            return
        now = time.monotonic()
        if group.recreating_since is None:
            group.recreating_since = now
        if now - group.recreate_asked < self.minutes(1.0) and group.recreate_asked:
            return
        group.recreate_asked = now
        if group.spot and self.spot.gpu_capacity_gone():
            group.error = f"Instance re-creation in zone {group.zone} failed: GCE out of resources."
            return
        decide = self.decide or (lambda pool, count, at: ("granted", "", []))
        state, message, _ = decide(group.name, have + missing, group.recreating_since)
        if state == "granted":
            for node in group.new_nodes(missing):
                self.join(group, node)
            group.recreating_since, group.error = None, ""
        elif state == "failed":
            group.error = message or f"Instance re-creation in zone {group.zone} failed: GCE out of resources."

    def _end_runs(self, group: NodeGroup) -> None:
        if group.lifetime is None:
            return
        run = group.lifetime / 60.0 * self.timings.minute
        now = time.monotonic()
        for node in self.nodes_of(group.name):
            joined = self._joined.get(node["metadata"]["uid"])
            if joined is None or now - joined < run:
                continue
            pods = [
                p
                for p in self.store.find("Pod")
                if (p.get("spec") or {}).get("nodeName") == node["metadata"]["name"]
                and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
            ]
            self.spot.end_nodes(
                pods,
                self.event,
                node=node,
                reason="FlexStartRunEnded",
                message=f"Node {node['metadata']['name']} reached its flex-start max run duration "
                f"({group.lifetime:g}s): GKE removes it",
            )
            group.target = max(0, group.target - 1)

    def _consolidate(self, group: NodeGroup) -> None:
        if not group.autoscaled:
            return
        now = time.monotonic()
        busy_nodes = {
            (p.get("spec") or {}).get("nodeName")
            for p in self.store.find("Pod")
            if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
            and not p["metadata"].get("deletionTimestamp")
            and not any(o.get("kind") == "DaemonSet" for o in p["metadata"].get("ownerReferences") or [])
        }
        for node in sorted(self.nodes_of(group.name), key=lambda n: n["metadata"]["name"]):
            uid = node["metadata"]["uid"]
            ready = any(
                c.get("type") == "Ready" and c.get("status") == "True"
                for c in (node.get("status") or {}).get("conditions") or []
            )
            if node["metadata"]["name"] in busy_nodes or not ready:
                self._unneeded.pop(uid, None)
                continue
            since = self._unneeded.setdefault(uid, now)
            if now - since < self.minutes(self._delay(node)) or group.target <= group.minimum:
                continue
            name = node["metadata"]["name"]
            self.event(
                node,
                "ScaleDown",
                f"Scale-down: removing empty node {name} (unneeded for {self._delay(node):g} minutes)",
                component="cluster-autoscaler",
            )
            self.event(node, "RemovingNode", f"Node {name} event: Removing Node {name} from Controller")
            self.store.remove(node)
            self._unneeded.pop(uid, None)
            group.target = max(group.minimum, group.target - 1)

    def _delay(self, node: Obj) -> float:
        """Minutes an unneeded node waits: its ComputeClass's consolidation delay, or the default."""
        cls = labels_of(node).get(COMPUTE_CLASS_LABEL)
        found = self.store.get("ComputeClass", None, cls) if cls else None
        policy = ((found or {}).get("spec") or {}).get("autoscalingPolicy") or {}
        return float(policy.get("consolidationDelayMinutes") or DEFAULT_CONSOLIDATION_MINUTES)
