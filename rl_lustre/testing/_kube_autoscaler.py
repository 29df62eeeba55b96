"""The cluster autoscaler's scale-up of autoscaled GPU node pools (flex-start without queued
provisioning), as :class:`~rl_lustre.testing.kube.KubeFake` simulates it.

``FakeGCP(kube=...)`` registers each RUNNING node pool with autoscaling on (and no queued
provisioning) with a sample of its nodes' labels and its ``total_max_node_count``. Each
pass, GPU pods that are Pending and unschedulable, and whose ``nodeSelector`` such a pool's
nodes match, ask that pool for nodes: the *decider* (``KubeFake.autoscaling``, from the
fake's capacity model; by default granted at once) answers ``granted`` with the Nodes
(``TriggeredScaleUp`` on the pods), ``wait`` (``FailedScaleUp`` "... failed: GCE out of
resources", as GKE's autoscaler says on a stock-out), or ``busy`` (no answer yet: the fake
Google Cloud was busy; nothing is said and the pool is asked again next pass).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from ..catalog import GKE_NODEPOOL_LABEL
from ._kube_controller import Controller, wants_gpu
from ._kube_scheduler import fits_node
from ._kube_store import Obj, labels_of

if TYPE_CHECKING:
    from ._kube_provisioning import Decider

__all__ = ["Autoscaler"]


class Autoscaler(Controller):
    """Scale-up of autoscaled pools for unschedulable GPU pods (see the module's doc)."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.decide: Decider | None = None
        self.pools: dict[str, tuple[dict[str, str], int, str]] = {}
        self._asked: dict[str, float] = {}

    def register(self, pool: str, labels: dict[str, str], maximum: int, zone: str) -> None:
        self.pools[pool] = (labels, maximum, zone)

    def forget(self, pool: str) -> None:
        self.pools.pop(pool, None)
        self._asked.pop(pool, None)

    def step(self) -> None:
        if not self.pools:
            return
        pending = [p for p in self.store.find("Pod") if _unschedulable_gpu(p)]
        for pool, (labels, maximum, zone) in list(self.pools.items()):
            wanting = [p for p in pending if fits_node(p.get("spec") or {}, labels)]
            have = sum(1 for n in self.store.find("Node") if labels_of(n).get(GKE_NODEPOOL_LABEL) == pool)
            need = min(len(wanting), maximum - have)
            if need <= 0:
                self._asked.pop(pool, None)
                continue
            asked = self._asked.setdefault(pool, time.monotonic())
            decide = self.decide or (lambda name, count, at: ("granted", "", []))
            state, _message, nodes = decide(pool, have + need, asked)
            if state == "busy":
                continue
            if state == "granted" and nodes:
                for node in nodes:
                    self.register_node(node)
                for pod in wanting[:need]:
                    self.event(
                        pod,
                        "TriggeredScaleUp",
                        f"pod triggered scale-up: [{{{pool} {have}->{have + need} (max: {maximum})}}]",
                        component="cluster-autoscaler",
                    )
                self._asked.pop(pool, None)
            elif state != "granted":
                for pod in wanting:
                    self.event(
                        pod,
                        "FailedScaleUp",
                        f"Node scale up in zones {zone} associated with this pod "
                        "failed: GCE out of resources. Pod is at risk of not being scheduled.",
                        warning=True,
                        component="cluster-autoscaler",
                    )


def _unschedulable_gpu(pod: Obj) -> bool:
    if (pod.get("spec") or {}).get("nodeName") or pod["metadata"].get("deletionTimestamp"):
        return False
    conds = (pod.get("status") or {}).get("conditions") or []
    return wants_gpu(pod) and any(c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable" for c in conds)
