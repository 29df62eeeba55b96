"""GKE's cluster autoscaler's scale-up, as :class:`~rl_lustre.testing.kube.KubeFake` simulates it:
nodes for Pending pods, from the pools of their ComputeClass in its order.

Each pass, pods that are Pending and unschedulable (and fit no Node there is) ask for nodes,
one node per pod, from the node pools FakeGCP registered (:mod:`rl_lustre.testing._kube_node_groups`):

- **a pod that selects a ComputeClass** (``nodeSelector`` ``cloud.google.com/compute-class``;
  GKE's "About custom ComputeClasses") gets nodes from the class's ``priorities``, tried in
  order. The fake plays ``nodepools`` rules (the class's node pool auto-creation is off): a
  pool named there is used only when its nodes carry the class's label and ``NoSchedule`` taint
  (how a pool made by hand joins a class), when the pod fits its nodes (selector, taints,
  allocatable), when it is not queued (GKE scales a queued pool only for a
  ProvisioningRequest) and has room, and is not backing off. The capacity decider answers
  each scale-up: ``granted`` (the nodes join; ``TriggeredScaleUp`` on the pods), ``wait``
  (under way), ``failed`` (a stock-out: ``FailedScaleUp`` "... failed: GCE out of
  resources", the pool backs off 5 minutes, doubling to 30, as the cluster autoscaler's node
  groups do, and the next rule is tried in the same pass: GKE moves on at once, GKE's
  "Troubleshoot custom ComputeClasses"), or ``busy`` (no answer: asked again next pass). A
  pool whose instance group cannot re-create a lost VM (a Spot stock-out) counts as a failed
  scale-up. A rule that waits (flex-start, in Dynamic Workload Scheduler's queue) is tried
  until its ``capacityCheckWaitTimeSeconds``, any other scale-up for 15 minutes (the cluster
  autoscaler's max node provisioning time), then the next. When no rule can be met,
  ``whenUnsatisfiable`` decides (default ``DoNotScaleUp``, as from GKE 1.33):
  ``DoNotScaleUp`` leaves the pods Pending (``NotTriggerScaleUp``); ``ScaleUpAnyway``
  creates a node of the cluster's default configuration (an ``e2-standard-2``, no GPU,
  labelled with the class), when the pod fits one;
- **any other pod that wants a GPU** gets nodes from an autoscaled pool whose nodes fit it,
  as before ComputeClasses (the flex-start standby pool of older deployments);
- **a pod that consumes a ProvisioningRequest** (its ``autoscaling.x-k8s.io/consume-provisioning-request``
  annotation) is left to the request (:mod:`rl_lustre.testing._kube_provisioning`).

Minutes are the fake's: ``KubeTimings.minute`` wall seconds each.
"""

from __future__ import annotations

import time
from typing import Any

from ..catalog import COMPUTE_CLASS_LABEL, GKE_FLEX_START_LABEL
from ._kube_controller import wants_gpu
from ._kube_kinds import KindInfo, register_kind
from ._kube_node_groups import NodeGroup, NodeGroups
from ._kube_scheduler import place
from ._kube_store import Obj, labels_of

__all__ = ["Autoscaler"]

register_kind(KindInfo("ComputeClass", "cloud.google.com/v1", "computeclasses", False, status=True, builtin=False))

BACKOFF_MINUTES = (5.0, 10.0, 20.0, 30.0)
MAX_NODE_PROVISION_MINUTES = 15.0
DEFAULT_WHEN_UNSATISFIABLE = "DoNotScaleUp"
_CONSUMES = "autoscaling.x-k8s.io/consume-provisioning-request"
# The node GKE creates with whenUnsatisfiable: ScaleUpAnyway (the cluster's default configuration).
_DEFAULT_NODE = {"cpu": "1930m", "memory": "5929036Ki", "ephemeral-storage": "47060071478", "pods": "110"}


class Autoscaler(NodeGroups):
    """Scale-up of the node pools for Pending pods (see the module's doc); the pools' own
    behaviour (re-creation, run duration, consolidation) is :class:`NodeGroups`'."""

    def __init__(self, *args: Any, spot: Any) -> None:
        super().__init__(*args, spot=spot)
        self._defaults = 0

    def step(self) -> None:
        super().step()
        pending = [p for p in self.store.find("Pod") if _unschedulable(p)]
        if not pending or (not self.groups and not any(_class_of(p) for p in pending)):
            return
        nodes, pods = self.store.find("Node"), self.store.find("Pod")
        # The scheduler places a pod that fits a Node now on its next pass: no node for it.
        waiting = [p for p in pending if not place(p, nodes, pods)[0]]
        by_class: dict[str | None, list[Obj]] = {}
        for pod in waiting:
            by_class.setdefault(_class_of(pod), []).append(pod)
        for cls, group_pods in by_class.items():
            if cls is None:
                self._without_class([p for p in group_pods if wants_gpu(p)])
            else:
                self._for_class(cls, group_pods)

    def _ask(self, group: NodeGroup, pods: list[Obj], room: int) -> tuple[str, str, int]:
        """Ask the decider for up to ``room`` more VMs of ``group`` for ``pods``:
        ``(state, message, nodes covered)``."""
        now = time.monotonic()
        if group.asked_at is None:
            group.asking, group.asked_at = min(room, len(pods)), now
        else:
            # Pods that came while a scale-up is in flight join it (the autoscaler sizes a
            # scale-up for every pending pod the group can take), rather than being left out.
            group.asking = max(group.asking, min(room, len(pods)))
        decide = self.decide or (lambda pool, count, at: ("granted", "", []))
        if group.spot and self.spot.gpu_capacity_gone():
            state, message = "failed", f"Node scale up in zones {group.zone} associated with this pod failed"
        else:
            state, message, _ = decide(group.name, group.target + group.asking, group.asked_at)
        covered = group.asking
        if state == "granted":
            self.add(group, covered)
            group.asking, group.asked_at, group.failures = 0, None, 0
            for pod in pods[:covered]:
                self.event(
                    pod,
                    "TriggeredScaleUp",
                    f"pod triggered scale-up: [{{{group.name} {group.target - covered}->{group.target} "
                    f"(max: {group.maximum})}}]",
                    component="cluster-autoscaler",
                )
        elif state == "failed":
            self._back_off(group)
        return state, message, covered

    def _back_off(self, group: NodeGroup) -> None:
        group.backoff_until = time.monotonic() + self.minutes(
            BACKOFF_MINUTES[min(group.failures, len(BACKOFF_MINUTES) - 1)]
        )
        group.failures += 1
        group.asking, group.asked_at = 0, None

    def _failed(self, pods: list[Obj], group: NodeGroup, message: str) -> None:
        text = message if "failed" in message else ""
        for pod in pods:
            self.event(
                pod,
                "FailedScaleUp",
                text
                or f"Node scale up in zones {group.zone} associated with this pod failed: GCE out of resources. "
                "Pod is at risk of not being scheduled.",
                warning=True,
                component="cluster-autoscaler",
            )

    def _for_class(self, cls: str, pods: list[Obj]) -> None:
        cc = self.store.get("ComputeClass", None, cls)
        if cc is None:
            for pod in pods:
                self.event(
                    pod,
                    "NotTriggerScaleUp",
                    f"pod didn't trigger scale-up: ComputeClass {cls} not found",
                    component="cluster-autoscaler",
                )
            return
        spec = cc.get("spec") or {}
        left = list(pods)
        why: list[str] = []
        now = time.monotonic()
        for rule in spec.get("priorities") or []:
            if not left:
                return
            names = rule.get("nodepools") or []
            if not names:
                why.append("node group(s) of other rules not simulated (node pool auto-creation is off)")
                continue
            for name in sorted(names):
                group = self.groups.get(name)
                if group is None:
                    why.append("node group(s) not found")
                    continue
                if not _joins(group, cls):
                    why.append("node(s) didn't match Pod's node affinity/selector")
                    continue
                if group.queued or place(left[0], [group.template], [])[0] is None:
                    why.append(
                        "not ready for scale-up"
                        if group.queued
                        else "node(s) didn't match Pod's node affinity/selector"
                    )
                    continue
                if now < group.backoff_until:
                    why.append("in backoff after failed scale-up")
                    continue
                if group.error:
                    # Its instance group cannot re-create a lost VM: a failed scale-up of this pool.
                    self._failed(left, group, group.error)
                    self._back_off(group)
                    why.append("in backoff after failed scale-up")
                    continue
                room = group.maximum - group.target if group.autoscaled else 0
                upcoming = group.target - len(self.nodes_of(name))
                if room <= 0 and group.asked_at is None:
                    if upcoming > 0:  # its instance group is re-creating VMs: they are for these pods
                        left = left[upcoming:]
                        continue
                    why.append("max node group size reached")
                    continue
                state, message, covered = self._ask(group, left, room)
                if state == "busy":
                    return
                if state == "failed":
                    self._failed(left, group, message)
                    why.append("in backoff after failed scale-up")
                    continue
                if state == "wait":
                    limit = rule.get("capacityCheckWaitTimeSeconds")
                    waited = now - (group.asked_at or now)
                    flex = labels_of(group.template).get(GKE_FLEX_START_LABEL) == "true"
                    patience = (
                        self.minutes(float(limit) / 60.0)
                        if flex and limit is not None
                        else self.minutes(MAX_NODE_PROVISION_MINUTES)
                    )
                    if waited >= patience:
                        self._back_off(group)
                        self._failed(
                            left,
                            group,
                            f"Node scale up in zones {group.zone} associated with this pod failed: no capacity "
                            f"within {waited / self.timings.minute:.0f} minutes ({message})",
                        )
                        continue
                    for pod in left[:covered]:
                        self.event(
                            pod,
                            "TriggeredScaleUp",
                            f"pod triggered scale-up: [{{{name} {group.target}->{group.target + covered} "
                            f"(max: {group.maximum})}}]",
                            component="cluster-autoscaler",
                        )
                left = left[covered:]
        if left:
            self._unsatisfiable(cls, spec, left, why)

    def _unsatisfiable(self, cls: str, spec: Obj, pods: list[Obj], why: list[str]) -> None:
        how = spec.get("whenUnsatisfiable") or DEFAULT_WHEN_UNSATISFIABLE
        if how == "ScaleUpAnyway":
            node = self._default_node(cls)
            if place(pods[0], [node], [])[0] is not None:
                self._defaults += 1
                self.register_node(node)
                for pod in pods[:1]:
                    self.event(
                        pod,
                        "TriggeredScaleUp",
                        f"pod triggered scale-up: no rule of ComputeClass {cls} can be met; whenUnsatisfiable "
                        "ScaleUpAnyway: a node of the cluster's default configuration (e2-standard-2)",
                        component="cluster-autoscaler",
                    )
                return
            why = [*why, "node(s) of the default configuration (e2-standard-2) had Insufficient resources"]
        counts: dict[str, int] = {}
        for reason in why:
            counts[reason] = counts.get(reason, 0) + 1
        said = ", ".join(f"{n} {reason}" for reason, n in counts.items()) or "no rules"
        for pod in pods:
            self.event(
                pod,
                "NotTriggerScaleUp",
                f"pod didn't trigger scale-up: {said} (no rule of ComputeClass {cls} can be met; {how})",
                component="cluster-autoscaler",
            )

    def _default_node(self, cls: str) -> Obj:
        name = f"gke-{cls}-default-{self._defaults:04x}"
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "labels": {
                    "kubernetes.io/hostname": name,
                    "node.kubernetes.io/instance-type": "e2-standard-2",
                    "cloud.google.com/machine-family": "e2",
                    COMPUTE_CLASS_LABEL: cls,
                },
            },
            "spec": {"taints": [{"key": COMPUTE_CLASS_LABEL, "value": cls, "effect": "NoSchedule"}]},
            "status": {"capacity": {**_DEFAULT_NODE, "cpu": "2"}, "allocatable": dict(_DEFAULT_NODE)},
        }

    def _without_class(self, pods: list[Obj]) -> None:
        """GPU pods of no class: an autoscaled pool whose nodes fit them (see the module's doc)."""
        now = time.monotonic()
        for _, group in sorted(self.groups.items()):
            if not pods:
                return
            if not group.autoscaled or group.queued or now < group.backoff_until:
                continue
            fitting = [p for p in pods if place(p, [group.template], [])[0] is not None]
            room = group.maximum - group.target
            if not fitting or (room <= 0 and group.asked_at is None):
                continue
            state, message, covered = self._ask(group, fitting, room)
            if state == "failed":
                self._failed(fitting, group, message)
            if state in ("granted", "wait"):
                done = {p["metadata"]["uid"] for p in fitting[:covered]}
                pods = [p for p in pods if p["metadata"]["uid"] not in done]


def _class_of(pod: Obj) -> str | None:
    return ((pod.get("spec") or {}).get("nodeSelector") or {}).get(COMPUTE_CLASS_LABEL)


def _joins(group: NodeGroup, cls: str) -> bool:
    """A pool made by hand joins a class by its nodes' label and NoSchedule taint."""
    template = group.template
    taints = (template.get("spec") or {}).get("taints") or []
    return labels_of(template).get(COMPUTE_CLASS_LABEL) == cls and any(
        t.get("key") == COMPUTE_CLASS_LABEL and t.get("value") == cls and t.get("effect") == "NoSchedule"
        for t in taints
    )


def _unschedulable(pod: Obj) -> bool:
    if (pod.get("spec") or {}).get("nodeName") or pod["metadata"].get("deletionTimestamp"):
        return False
    if _CONSUMES in (pod["metadata"].get("annotations") or {}):
        return False  # the ProvisioningRequest's to bring nodes for, not the scale-up loop's
    conds = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable" for c in conds)
