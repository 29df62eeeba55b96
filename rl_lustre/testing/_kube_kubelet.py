"""The scheduler and the kubelet of :class:`~rl_lustre.testing.kube.KubeFake`.

A pod is scheduled after :attr:`KubeTimings.schedule` (onto a Node that fits, see
``_kube_workloads``) unless its claims are unbound, Spot capacity is gone or
:attr:`KubeFaults.unschedulable` holds; it then runs and goes Ready after its image pulls
(begun once it is on the node) and then :attr:`KubeTimings.start`, or fails as :class:`KubeFaults` asks
(``ErrImagePull``/``ImagePullBackOff``, ``CrashLoopBackOff``). A worker pod backed by a real
raylet (``_kube_spot``) goes Ready once that raylet runs.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from ..catalog import COMPUTE_CLASS_LABEL
from ._kube_controller import (
    Controller,
    Memory,
    condition,
    containers,
    pod_ready,
    same_conditions,
    wants_gpu,
)
from ._kube_faults import AUTOSCALER_EVENTS, UNSCHEDULABLE_MESSAGES, KubeFaults, KubeTimings
from ._kube_spot import SpotCapacity
from ._kube_store import Obj, Store, labels_of, now_rfc3339
from ._kube_workloads import JOB_NAME_LABEL, Workloads


class Kubelet(Controller):
    """Pods from Pending to Running (or to the failure a fault asks for)."""

    def __init__(
        self,
        store: Store,
        faults: KubeFaults,
        timings: KubeTimings,
        memory: Memory,
        spot: SpotCapacity,
        workloads: Workloads,
    ) -> None:
        super().__init__(store, faults, timings, memory)
        self.spot = spot
        self.workloads = workloads
        self.has_pools: Callable[[], bool] = lambda: False
        self._ips = 0

    def step(self) -> None:
        for pod in self.store.find("Pod"):
            if not pod["metadata"].get("deletionTimestamp"):
                self._advance_pod(pod)

    def _advance_pod(self, pod: Obj) -> None:
        age = self._age(pod)
        status = pod.get("status") or {}
        if status.get("phase") in ("Succeeded", "Failed"):
            return
        meta = pod["metadata"]
        ns, name = meta.get("namespace"), meta["name"]
        scheduled = bool((pod.get("spec") or {}).get("nodeName"))
        if not scheduled:
            if age < self.timings.schedule:
                return
            blocked = self._unschedulable(pod)
            picked, why = (None, "") if blocked is not None else self.workloads.pick_node(pod)
            if blocked is None and why:
                blocked = why, None  # Nodes are there, and none fits (the scheduler's own words)
            if blocked is None and picked is None and self.has_pools():
                # A cluster of node pools (FakeGCP's): no Node yet is no Node, not one to invent.
                blocked = "no nodes available to schedule pods", None
            if blocked is not None:
                message, autoscaler = blocked
                self._set_status(
                    pod,
                    {
                        "phase": "Pending",
                        "qosClass": status.get("qosClass", "Burstable"),
                        "conditions": [condition("PodScheduled", False, "Unschedulable", message)],
                    },
                )
                self.event(pod, "FailedScheduling", message, warning=True, component="default-scheduler")
                if autoscaler is not None:
                    self.event(
                        pod,
                        autoscaler[0],
                        autoscaler[1],
                        warning=autoscaler[0] == "FailedScaleUp",
                        component="cluster-autoscaler",
                    )
                return
            self._ips += 1
            # Without any registered Node the fake invents one for the pod.
            node = picked or f"gke-fake-{'gpu' if wants_gpu(pod) else 'cpu'}-pool-{self._ips % 7}"

            def schedule(o: Obj) -> None:
                o["spec"]["nodeName"] = node
                o["status"] = {
                    "phase": "Pending",
                    "qosClass": status.get("qosClass", "Burstable"),
                    "conditions": [condition("PodScheduled", True)],
                }

            self.store.update("Pod", ns, name, schedule)
            self.event(pod, "Scheduled", f"Successfully assigned {ns}/{name} to {node}", component="default-scheduler")
            return
        start = self._start_time(pod)
        bad = [c for c in containers(pod) if self._image_fails(c.get("image", ""))]
        # The kubelet pulls what the node lacks as soon as the pod is bound to it; the
        # containers start once the images are there (a pull, then ``start``: not both after it).
        pulled = None if bad else self.workloads.pulled_at(pod)
        if age < self.timings.schedule + start:
            return
        if not bad and self.faults.crash_loop is None and not self.spot.ready(pod):
            return  # the raylet behind this worker pod is still starting
        if bad:
            self._image_pull_failed(pod, bad, backoff=age >= self.timings.schedule + 2 * start)
            return
        if pulled is None or time.monotonic() < pulled + start:
            return  # the kubelet is pulling an image the node does not have yet
        if self.faults.crash_loop is not None:
            self._crash_looping(pod)
        else:
            self._running(pod)

    def _start_time(self, pod: Obj) -> float:
        """How long the pod's containers take to start once their images are on the node."""
        if self.timings.job_start is not None and JOB_NAME_LABEL in labels_of(pod):
            return self.timings.job_start
        return self.timings.start

    def _unschedulable(self, pod: Obj) -> tuple[str, tuple[str, str] | None] | None:
        ns = pod["metadata"].get("namespace")
        for vol in (pod.get("spec") or {}).get("volumes") or []:
            claim = (vol.get("persistentVolumeClaim") or {}).get("claimName")
            if not claim:
                continue
            pvc = self.store.get("PersistentVolumeClaim", ns, claim)
            if pvc is None:
                return (
                    f'0/3 nodes are available: persistentvolumeclaim "{claim}" not found. no new claims to '
                    "deallocate, preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."
                ), None
            if (pvc.get("status") or {}).get("phase") != "Bound":
                return (
                    "0/3 nodes are available: pod has unbound immediate PersistentVolumeClaims. no new claims to "
                    "deallocate, preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."
                ), None
        # Without pools of FakeGCP's, Spot capacity is one switch; with them, the autoscaler and
        # the pools' instance groups decide what nodes there are (_kube_autoscaler).
        selects_class = COMPUTE_CLASS_LABEL in ((pod.get("spec") or {}).get("nodeSelector") or {})
        if wants_gpu(pod) and not selects_class and self.spot.gpu_capacity_gone() and not self._other_gpu_node(pod):
            return UNSCHEDULABLE_MESSAGES["spot-stockout"], AUTOSCALER_EVENTS.get("spot-stockout")
        fault = self.faults.unschedulable
        if fault is not None and wants_gpu(pod):
            return UNSCHEDULABLE_MESSAGES[fault], AUTOSCALER_EVENTS.get(fault)
        return None

    def _other_gpu_node(self, pod: Obj) -> bool:
        """A Ready GPU node that is not Spot fits the pod (a flex-start or reserved node: Spot's
        stock-out does not keep the pod from it)."""
        from ..catalog import GKE_SPOT_LABEL
        from ._kube_scheduler import fits_node

        spec = pod.get("spec") or {}
        return any(
            GKE_SPOT_LABEL not in labels_of(n)
            and fits_node(spec, labels_of(n))
            and "nvidia.com/gpu" in ((n.get("status") or {}).get("allocatable") or {})
            for n in self.store.find("Node")
        )

    def _image_fails(self, image: str) -> bool:
        knob = self.faults.image_pull
        return knob is True or (isinstance(knob, str) and knob == image)

    def _set_status(self, pod: Obj, status: Obj) -> None:
        def put(o: Obj) -> None:
            old = o.get("status") or {}
            merged = dict(status)
            merged["conditions"] = same_conditions(old.get("conditions") or [], status.get("conditions") or [])
            if old.get("startTime"):
                merged.setdefault("startTime", old["startTime"])
            o["status"] = merged

        self.store.update("Pod", pod["metadata"].get("namespace"), pod["metadata"]["name"], put)

    def _base_status(self, pod: Obj, *, ready: bool, phase: str) -> Obj:
        old = pod.get("status") or {}
        ip = old.get("podIP") or f"10.8.{self._ips // 250}.{self._ips % 250 + 2}"
        not_ready = "" if ready else "ContainersNotReady"
        return {
            "phase": phase,
            "qosClass": old.get("qosClass", "Burstable"),
            "hostIP": "10.128.0.2",
            "podIP": ip,
            "podIPs": [{"ip": ip}],
            "startTime": old.get("startTime") or now_rfc3339(),
            "conditions": [
                condition("PodScheduled", True),
                condition("Initialized", True),
                condition("ContainersReady", ready, not_ready),
                condition("Ready", ready, not_ready),
            ],
        }

    def _image_pull_failed(self, pod: Obj, bad: list[Obj], *, backoff: bool) -> None:
        status = self._base_status(pod, ready=False, phase="Pending")
        statuses = []
        for c in containers(pod):
            image = c.get("image", "")
            if c in bad:
                reason = "ImagePullBackOff" if backoff else "ErrImagePull"
                message = (
                    f'Back-off pulling image "{image}"'
                    if backoff
                    else f'failed to pull and unpack image "{image}": failed to resolve reference "{image}": not found'
                )
                state: Obj = {"waiting": {"reason": reason, "message": message}}
                self.event(pod, "Pulling", f'Pulling image "{image}"', component="kubelet")
                self.event(
                    pod,
                    "Failed",
                    f'Failed to pull image "{image}": rpc error: code = NotFound desc = failed to pull and unpack '
                    f'image "{image}": failed to resolve reference "{image}": {image}: not found',
                    warning=True,
                    component="kubelet",
                )
                if backoff:
                    self.event(pod, "BackOff", f'Back-off pulling image "{image}"', component="kubelet")
            else:
                state = {"waiting": {"reason": "PodInitializing"}}
            statuses.append(
                {
                    "name": c["name"],
                    "image": image,
                    "imageID": "",
                    "ready": False,
                    "restartCount": 0,
                    "started": False,
                    "state": state,
                }
            )
        status["containerStatuses"] = statuses
        self._set_status(pod, status)

    def _crash_looping(self, pod: Obj) -> None:
        status = self._base_status(pod, ready=False, phase="Running")
        name = pod["metadata"]["name"]
        statuses = []
        for c in containers(pod):
            statuses.append(
                {
                    "name": c["name"],
                    "image": c.get("image", ""),
                    "imageID": f"sha256:{'0' * 64}",
                    "ready": False,
                    "restartCount": 3,
                    "started": False,
                    "state": {
                        "waiting": {
                            "reason": "CrashLoopBackOff",
                            "message": f"back-off 40s restarting failed container={c['name']} pod={name}",
                        }
                    },
                    "lastState": {
                        "terminated": {
                            "exitCode": 1,
                            "reason": "Error",
                            "message": self.faults.crash_loop,
                            "startedAt": now_rfc3339(),
                            "finishedAt": now_rfc3339(),
                        }
                    },
                }
            )
            self.event(
                pod,
                "BackOff",
                f"Back-off restarting failed container {c['name']} in pod {name}",
                warning=True,
                component="kubelet",
            )
        status["containerStatuses"] = statuses
        self._set_status(pod, status)

    def _running(self, pod: Obj) -> None:
        if pod_ready(pod):
            return
        status = self._base_status(pod, ready=True, phase="Running")
        # A container restarted in place keeps its count and why it last ended.
        before = {c.get("name"): c for c in (pod.get("status") or {}).get("containerStatuses") or []}
        statuses = []
        for c in containers(pod):
            image = c.get("image", "")
            old = before.get(c["name"]) or {}
            statuses.append(
                {
                    "name": c["name"],
                    "image": image,
                    "imageID": f"sha256:{'0' * 64}",
                    "ready": True,
                    "restartCount": int(old.get("restartCount") or 0),
                    "started": True,
                    "state": {"running": {"startedAt": now_rfc3339()}},
                    **({"lastState": old["lastState"]} if old.get("lastState") else {}),
                }
            )
            self.event(pod, "Pulled", f'Container image "{image}" already present on machine', component="kubelet")
            self.event(pod, "Started", f"Started container {c['name']}", component="kubelet")
        status["containerStatuses"] = statuses
        self._set_status(pod, status)
