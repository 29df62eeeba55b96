"""All the controllers :class:`~rl_lustre.testing.kube.KubeFake` simulates, one pass at a time.

They are level-triggered like the real ones: each pass looks at the store and moves
every object one step towards where it should be, so a fault knob changed mid-test
takes effect on the next pass. In pass order: Spot nodes coming back, the garbage
collector (``_kube_gc``), the PV binder (``_kube_binder``), the KubeRay operator
(``_kube_operator``), ProvisioningRequests (``_kube_provisioning``), the node pools and the
cluster autoscaler (``_kube_node_groups``, ``_kube_autoscaler``), the node, DaemonSet and
Job controllers (``_kube_workloads``), the Deployment and ReplicaSet controllers
(``_kube_apps``), the scheduler and kubelet (``_kube_kubelet``), the RayCluster status.
"""

from __future__ import annotations

from ..catalog import GKE_NODEPOOL_LABEL
from ._kube_apps import Apps
from ._kube_autoscaler import Autoscaler
from ._kube_binder import VolumeBinder
from ._kube_controller import Controller, Memory
from ._kube_faults import KubeFaults, KubeTimings
from ._kube_gc import GarbageCollector
from ._kube_kubelet import Kubelet
from ._kube_operator import KubeRayOperator
from ._kube_provisioning import ProvisioningRequests
from ._kube_quota import install as install_quota
from ._kube_spot import RayletStarter, SpotCapacity
from ._kube_store import Obj, Store, labels_of
from ._kube_workloads import Workloads


class Controllers(Controller):
    """All simulated controllers; :meth:`step` runs one pass."""

    def __init__(
        self,
        store: Store,
        faults: KubeFaults,
        timings: KubeTimings,
        raylets: RayletStarter | None = None,
    ) -> None:
        super().__init__(store, faults, timings, Memory())
        install_quota(store)
        self.spot = SpotCapacity(store, raylets)
        self.workloads = Workloads(store, faults, timings, self.memory)
        self.apps = Apps(store, faults, timings, self.memory)
        self.apps.install(store)
        self.gc = GarbageCollector(store, faults, timings, self.memory, self.spot)
        self.binder = VolumeBinder(store, faults, timings, self.memory)
        self.operator = KubeRayOperator(store, faults, timings, self.memory)
        self.provisioning = ProvisioningRequests(store, register=self.workloads.register_node)
        self.autoscaler = Autoscaler(store, faults, timings, self.memory, spot=self.spot)
        self.kubelet = Kubelet(store, faults, timings, self.memory, self.spot, self.workloads)
        self.kubelet.has_pools = lambda: bool(self.autoscaler.groups)
        # Node pools whose preempted nodes come back (as new nodes) with the capacity.
        self._replace_nodes: list[tuple[str, dict[str, str]]] = []

    def reset(self) -> None:
        self.memory.clear()
        self.workloads.reset()
        self.spot.back_at = None
        self._replace_nodes.clear()
        self.autoscaler.groups.clear()

    def step(self) -> None:
        if self._replace_nodes and not self.spot.gpu_capacity_gone():
            for pool, labels in self._replace_nodes:
                self.workloads.add_nodes(pool, 1, labels)
            self._replace_nodes.clear()
        self.gc.step()
        self.binder.step()
        self.operator.reconcile()
        self.provisioning.step()
        self.autoscaler.step()
        self.workloads.step()
        self.apps.step()
        self.kubelet.step()
        self.operator.update_status()

    def preempt(self, pods: list[Obj], back_after: float | None) -> None:
        """Preempt the Spot nodes of ``pods``; see :mod:`rl_lustre.testing._kube_spot`."""
        for pod in pods:
            node = self.store.get("Node", None, (pod.get("spec") or {}).get("nodeName") or "")
            # A pool FakeGCP registered re-creates its VMs itself (_kube_node_groups).
            if node is not None and labels_of(node).get(GKE_NODEPOOL_LABEL) not in self.autoscaler.groups:
                labels = {
                    k: v for k, v in labels_of(node).items() if k not in ("kubernetes.io/hostname", GKE_NODEPOOL_LABEL)
                }
                self._replace_nodes.append((labels_of(node).get(GKE_NODEPOOL_LABEL, "gpu"), labels))
        self.spot.preempt(pods, back_after, self.event)
