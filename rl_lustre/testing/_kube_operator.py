"""The controllers a real GKE cluster runs, simulated for :class:`~rl_lustre.testing.kube.KubeFake`:
the KubeRay operator, the scheduler and kubelet (pod lifecycle), the PV binder and the
garbage collector (owner references, finalizers).

They are level-triggered like the real ones: each pass looks at the store and moves
every object one step towards where it should be, so a fault knob changed mid-test
takes effect on the next pass.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from typing import Any

import attrs

from ._kube_spot import SpotCapacity, is_ray_worker
from ._kube_store import (
    Obj,
    Store,
    labels_of,
    now_rfc3339,
    owned_by,
    owner_reference,
    random_suffix,
)
from ._kube_workloads import Workloads

GPU = "nvidia.com/gpu"
METRICS_PORT = 8080
HEAD_SERVICE_PORTS = {"gcs-server": 6379, "dashboard": 8265, "client": 10001, "metrics": 8080, "serve": 8000}

UNSCHEDULABLE_MESSAGES = {
    "insufficient-gpu": (
        "0/3 nodes are available: 1 Insufficient nvidia.com/gpu, 2 node(s) didn't match Pod's node "
        "affinity/selector. preemption: 0/3 nodes are available: 1 No preemption victims found for "
        "incoming pod, 2 Preemption is not helpful for scheduling."
    ),
    "spot-stockout": (
        "0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector. preemption: "
        "0/2 nodes are available: 2 Preemption is not helpful for scheduling."
    ),
    "node-selector": (
        "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector. preemption: "
        "0/3 nodes are available: 3 Preemption is not helpful for scheduling."
    ),
}
AUTOSCALER_EVENTS = {
    "spot-stockout": (
        "FailedScaleUp",
        "Node scale up in zones us-east1-b associated with this pod failed: GCE out of resources. "
        "Pod is at risk of not being scheduled.",
    ),
    "node-selector": (
        "NotTriggerScaleUp",
        "pod didn't trigger scale-up: 2 node(s) didn't match Pod's node affinity/selector",
    ),
}


@attrs.define
class KubeFaults:
    """Fault knobs of the simulated cluster. Change them before or during a test.

    Attributes:
        image_pull: ``True`` makes every image pull fail; a string fails only that image.
        unschedulable: GPU pods stay Pending with a FailedScheduling event:
            ``"insufficient-gpu"`` (no free ``nvidia.com/gpu``), ``"spot-stockout"``
            (the autoscaler cannot get Spot VMs) or ``"node-selector"`` (no node pool
            matches the selector).
        pvc_never_binds: PersistentVolumeClaims stay Pending (with a VolumeMismatch event).
        crash_loop: containers exit with this termination message and go CrashLoopBackOff.
        no_operator: the KubeRay operator is not running: RayClusters get no pods.
        no_crd: the RayCluster CRD is not installed: ``ray.io/v1`` requests get 404.
        legacy_status: report RayCluster readiness as older KubeRay did (``status.state``
            only, no conditions).
        job_failure: the containers of ``batch/v1`` Job pods exit 1 with this
            termination message (reason ``Error``) instead of 0.
    """

    image_pull: bool | str = False
    unschedulable: str | None = attrs.field(
        default=None, validator=attrs.validators.optional(attrs.validators.in_(set(UNSCHEDULABLE_MESSAGES)))
    )
    pvc_never_binds: bool = False
    crash_loop: str | None = None
    no_operator: bool = False
    no_crd: bool = False
    legacy_status: bool = False
    job_failure: str | None = None


@attrs.define
class KubeTimings:
    """How long the simulated cluster takes for each step, in seconds."""

    tick: float = 0.03
    schedule: float = 0.05
    start: float = 0.1
    bind: float = 0.05
    deletion: float = 0.1
    job_run: float = 0.15
    # Pulling an image onto a node that does not have it yet (once per node and image).
    image_pull: float = 0.0


def _containers(pod: Obj) -> list[Obj]:
    return list((pod.get("spec") or {}).get("containers") or [])


def _wants_gpu(pod: Obj) -> bool:
    for c in _containers(pod):
        res = c.get("resources") or {}
        if GPU in (res.get("limits") or {}) or GPU in (res.get("requests") or {}):
            return True
    return "cloud.google.com/gke-accelerator" in ((pod.get("spec") or {}).get("nodeSelector") or {})


def _condition(ctype: str, status: bool, reason: str = "", message: str = "", *, always_message: bool = False) -> Obj:
    cond: Obj = {"type": ctype, "status": "True" if status else "False", "lastTransitionTime": now_rfc3339()}
    if reason:
        cond["reason"] = reason
    if message or always_message:
        cond["message"] = message
    return cond


def _same_conditions(old: list[Obj], new: list[Obj]) -> list[Obj]:
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


class Controllers:
    """All simulated controllers; :meth:`step` runs one pass."""

    def __init__(self, store: Store, faults: KubeFaults, timings: KubeTimings,
                 raylets: Callable[[str], Any] | None = None) -> None:
        self.store = store
        self.faults = faults
        self.timings = timings
        # uid -> monotonic time of the first sighting: how long an object has existed.
        self._born: dict[str, float] = {}
        self._recorded: set[tuple[str, str, str]] = set()
        self._ips = 0
        self.workloads = Workloads(store, faults, timings, self.event)
        self.spot = SpotCapacity(store, raylets)
        # Node pools whose preempted nodes come back (as new nodes) with the capacity.
        self._replace_nodes: list[tuple[str, dict[str, str]]] = []

    def reset(self) -> None:
        self._born.clear()
        self._recorded.clear()
        self.workloads.reset()
        self.spot.back_at = None
        self._replace_nodes.clear()

    def _age(self, obj: Obj) -> float:
        uid = obj["metadata"]["uid"]
        return time.monotonic() - self._born.setdefault(uid, time.monotonic())

    def step(self) -> None:
        if self._replace_nodes and not self.spot.gpu_capacity_gone():
            for pool, labels in self._replace_nodes:
                self.workloads.add_nodes(pool, 1, labels)
            self._replace_nodes.clear()
        self._collect_garbage()
        self._bind_volumes()
        if not self.faults.no_operator:
            for rc in self.store.find("RayCluster"):
                if not rc["metadata"].get("deletionTimestamp"):
                    self._reconcile_raycluster(rc)
        self.workloads.step()
        for pod in self.store.find("Pod"):
            if not pod["metadata"].get("deletionTimestamp"):
                self._advance_pod(pod)
        if not self.faults.no_operator:
            for rc in self.store.find("RayCluster"):
                if not rc["metadata"].get("deletionTimestamp"):
                    self._raycluster_status(rc)

    # events

    def event(self, involved: Obj, reason: str, message: str, *, warning: bool = False, component: str = "") -> None:
        """Record an Event once per (object, reason, message), as the event recorder dedupes them."""
        meta = involved["metadata"]
        key = (meta["uid"], reason, message)
        if key in self._recorded:
            return
        self._recorded.add(key)
        stamp = now_rfc3339()
        self.store.create({
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{meta['name']}.{random_suffix(16)}", "namespace": meta.get("namespace") or "default"},
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
        })

    # garbage collector

    def _collect_garbage(self) -> None:
        live_uids = {o["metadata"]["uid"] for o in self.store.find()}
        for obj in self.store.find():
            meta = obj["metadata"]
            refs = meta.get("ownerReferences") or []
            if refs and not meta.get("deletionTimestamp") and not any(r.get("uid") in live_uids for r in refs):
                # Owner gone (background propagation): collect the orphan.
                self.store.mark_deleted(obj["kind"], meta.get("namespace"), meta["name"], foreground=False)
        for obj in self.store.find(match=lambda o: bool(o["metadata"].get("deletionTimestamp"))):
            self._finish_deletion(obj)

    def _finish_deletion(self, obj: Obj) -> None:
        meta = obj["metadata"]
        uid = meta["uid"]
        dependents = self.store.find(match=lambda o: owned_by(o, uid))
        for dep in dependents:
            if not dep["metadata"].get("deletionTimestamp"):
                self.store.mark_deleted(dep["kind"], dep["metadata"].get("namespace"), dep["metadata"]["name"], foreground=False)
        if self._age_since_deletion(obj) < self.timings.deletion:
            return
        finalizers = list(meta.get("finalizers") or [])
        if "foregroundDeletion" in finalizers and not dependents:
            finalizers.remove("foregroundDeletion")
        if "kubernetes.io/pvc-protection" in finalizers and not self._claim_in_use(obj):
            finalizers.remove("kubernetes.io/pvc-protection")
        if "kubernetes.io/pv-protection" in finalizers and not self._volume_bound(obj):
            finalizers.remove("kubernetes.io/pv-protection")
        if finalizers != list(meta.get("finalizers") or []):
            def set_finalizers(o: Obj) -> None:
                o["metadata"]["finalizers"] = finalizers
            self.store.update(obj["kind"], meta.get("namespace"), meta["name"], set_finalizers)
        if not finalizers:
            if obj["kind"] == "Pod":
                self.spot.release(meta["name"])
            self.store.remove(obj)
            self._born.pop(uid, None)
            self._born.pop(f"deleted:{uid}", None)

    def _age_since_deletion(self, obj: Obj) -> float:
        key = f"deleted:{obj['metadata']['uid']}"
        return time.monotonic() - self._born.setdefault(key, time.monotonic())

    def _claim_in_use(self, pvc: Obj) -> bool:
        name, ns = pvc["metadata"]["name"], pvc["metadata"].get("namespace")
        for pod in self.store.find("Pod", ns):
            for vol in (pod.get("spec") or {}).get("volumes") or []:
                if (vol.get("persistentVolumeClaim") or {}).get("claimName") == name:
                    return True
        return False

    def _volume_bound(self, pv: Obj) -> bool:
        ref = (pv.get("spec") or {}).get("claimRef") or {}
        claim = self.store.get("PersistentVolumeClaim", ref.get("namespace"), ref.get("name", ""))
        return claim is not None and (claim.get("spec") or {}).get("volumeName") == pv["metadata"]["name"]

    # PV binder

    def _bind_volumes(self) -> None:
        self._release_volumes()
        for pvc in self.store.find("PersistentVolumeClaim"):
            meta = pvc["metadata"]
            if meta.get("deletionTimestamp") or (pvc.get("status") or {}).get("phase") == "Bound":
                continue
            if self._age(pvc) < self.timings.bind:
                continue
            pv = self._matching_volume(pvc)
            if pv is None:
                wanted = (pvc.get("spec") or {}).get("volumeName")
                if wanted and self.store.get("PersistentVolume", None, wanted) is not None:
                    self.event(pvc, "FailedBinding", f'volume "{wanted}" already bound to a different claim.',
                               warning=True, component="persistentvolume-controller")
                continue
            if self.faults.pvc_never_binds:
                self.event(
                    pvc, "VolumeMismatch",
                    f'Cannot bind to requested volume "{pv["metadata"]["name"]}": storageClassName does not match',
                    warning=True, component="persistentvolume-controller",
                )
                continue
            self._bind(pvc, pv)

    def _release_volumes(self) -> None:
        """A volume whose claim is gone is Released (it keeps the old claim's uid and binds
        to no other claim); one whose claimRef lost its uid becomes Available again."""
        for pv in self.store.find("PersistentVolume"):
            ref = (pv.get("spec") or {}).get("claimRef") or {}
            phase = (pv.get("status") or {}).get("phase")
            claim = self.store.get("PersistentVolumeClaim", ref.get("namespace"), ref.get("name", ""))
            if ref.get("uid") and phase == "Bound" and (claim is None or claim["metadata"]["uid"] != ref["uid"]):
                new_phase = "Released"
            elif not ref.get("uid") and phase == "Released":
                new_phase = "Available"
            else:
                continue

            def set_phase(o: Obj, phase: str = new_phase) -> None:
                o["status"] = {"phase": phase}

            self.store.update("PersistentVolume", None, pv["metadata"]["name"], set_phase)

    def _matching_volume(self, pvc: Obj) -> Obj | None:
        wanted = (pvc.get("spec") or {}).get("volumeName")
        for pv in self.store.find("PersistentVolume"):
            if pv["metadata"].get("deletionTimestamp") or (pv.get("status") or {}).get("phase") == "Released":
                continue
            ref = (pv.get("spec") or {}).get("claimRef") or {}
            if ref.get("uid") and ref["uid"] != pvc["metadata"]["uid"]:
                continue  # bound (or was) to another claim
            if wanted == pv["metadata"]["name"] or (
                ref.get("name") == pvc["metadata"]["name"] and ref.get("namespace") == pvc["metadata"].get("namespace")
            ):
                return pv
        return None

    def _bind(self, pvc: Obj, pv: Obj) -> None:
        pv_name = pv["metadata"]["name"]
        capacity = dict((pv.get("spec") or {}).get("capacity") or {})
        modes = list((pv.get("spec") or {}).get("accessModes") or [])

        def bind_pv(o: Obj) -> None:
            o["spec"]["claimRef"] = {
                "apiVersion": "v1", "kind": "PersistentVolumeClaim",
                "namespace": pvc["metadata"].get("namespace"), "name": pvc["metadata"]["name"],
                "uid": pvc["metadata"]["uid"],
            }
            o["status"] = {"phase": "Bound"}

        def bind_pvc(o: Obj) -> None:
            o["spec"]["volumeName"] = pv_name
            o["metadata"].setdefault("annotations", {})["pv.kubernetes.io/bind-completed"] = "yes"
            o["status"] = {"phase": "Bound", "accessModes": modes, "capacity": capacity}

        self.store.update("PersistentVolume", None, pv_name, bind_pv)
        self.store.update("PersistentVolumeClaim", pvc["metadata"].get("namespace"), pvc["metadata"]["name"], bind_pvc)

    # KubeRay operator

    def _reconcile_raycluster(self, rc: Obj) -> None:
        meta = rc["metadata"]
        name, ns = meta["name"], meta.get("namespace") or "default"
        spec = rc.get("spec") or {}
        owned = self.store.find(match=lambda o: owned_by(o, meta["uid"]))
        head_group = spec.get("headGroupSpec") or {}
        service_name = f"{name}-head-svc"
        if not any(o["kind"] == "Service" for o in owned):
            self.store.create(_head_service(rc, service_name, head_group))
            self.event(rc, "CreatedService", f"Created service {ns}/{service_name}", component="raycluster-controller")
        live_pods = [o for o in owned if o["kind"] == "Pod" and not o["metadata"].get("deletionTimestamp")]
        for pod in [p for p in live_pods if is_ray_worker(p) and (p.get("status") or {}).get("phase") == "Failed"]:
            # KubeRay deletes a worker pod that ended Failed, and creates a new one.
            self.store.mark_deleted("Pod", ns, pod["metadata"]["name"], foreground=False)
            self.event(rc, "DeletedWorkerPod", f"Deleted worker Pod {ns}/{pod['metadata']['name']}; Pod status: "
                       "Failed; Pod restart policy: Always", component="raycluster-controller")
            live_pods.remove(pod)
        groups: list[tuple[str, str, Obj, int]] = [("headgroup", "head", head_group, 1)]
        for group in spec.get("workerGroupSpecs") or []:
            replicas = int(group.get("replicas", group.get("minReplicas", 0)) or 0)
            replicas = max(int(group.get("minReplicas", 0) or 0), replicas)
            if group.get("maxReplicas") is not None:
                replicas = min(int(group["maxReplicas"]), replicas)
            groups.append((str(group.get("groupName", "workers")), "worker", group, replicas))
        for group_name, node_type, group, replicas in groups:
            pods = [p for p in live_pods if labels_of(p).get("ray.io/group") == group_name]
            for _ in range(replicas - len(pods)):
                self._create_pod(rc, group_name, node_type, group)
            for extra in pods[replicas:]:
                self.store.mark_deleted("Pod", ns, extra["metadata"]["name"], foreground=False)

    def _create_pod(self, rc: Obj, group_name: str, node_type: str, group: Obj) -> None:
        name, ns = rc["metadata"]["name"], rc["metadata"].get("namespace") or "default"
        template = copy.deepcopy(group.get("template") or {})
        pod_name = f"{name}-head-{random_suffix()}" if node_type == "head" else f"{name}-{group_name}-worker-{random_suffix()}"
        labels = dict((template.get("metadata") or {}).get("labels") or {})
        labels.update({
            "ray.io/cluster": name,
            "ray.io/node-type": node_type,
            "ray.io/group": group_name,
            "ray.io/identifier": f"{name}-{node_type}",
            "ray.io/is-ray-node": "yes",
            "app.kubernetes.io/created-by": "kuberay-operator",
            "app.kubernetes.io/name": "kuberay",
        })
        spec = template.get("spec") or {}
        spec.setdefault("restartPolicy", "Always")
        pod = self.store.create({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": pod_name, "namespace": ns, "labels": labels,
                "annotations": dict((template.get("metadata") or {}).get("annotations") or {}),
                "ownerReferences": [owner_reference(rc)],
            },
            "spec": spec,
        })

        def pending(o: Obj) -> None:
            o["status"] = {"phase": "Pending", "qosClass": "Burstable"}

        self.store.update("Pod", ns, pod_name, pending)
        what = "head" if node_type == "head" else "worker"
        self.event(rc, f"Created{what.capitalize()}Pod", f"Created {what} Pod {ns}/{pod['metadata']['name']}", component="raycluster-controller")

    def _raycluster_status(self, rc: Obj) -> None:
        meta = rc["metadata"]
        name, ns = meta["name"], meta.get("namespace") or "default"
        pods = [p for p in self.store.find("Pod", ns, lambda o: owned_by(o, meta["uid"])) if not p["metadata"].get("deletionTimestamp")]
        head = next((p for p in pods if labels_of(p).get("ray.io/node-type") == "head"), None)
        workers = [p for p in pods if labels_of(p).get("ray.io/node-type") == "worker"]
        service = self.store.get("Service", ns, f"{name}-head-svc")
        desired_workers = sum(
            int(g.get("replicas", 0) or 0) for g in (rc.get("spec") or {}).get("workerGroupSpecs") or []
        )
        ready_workers = sum(1 for w in workers if _pod_ready(w))
        head_ready = head is not None and _pod_ready(head)
        all_ready = head_ready and ready_workers >= desired_workers
        old = rc.get("status") or {}
        provisioned_before = any(
            c.get("type") == "RayClusterProvisioned" and c.get("status") == "True" for c in old.get("conditions") or []
        )
        status: Obj = {
            "desiredWorkerReplicas": desired_workers,
            "readyWorkerReplicas": ready_workers,
            "availableWorkerReplicas": ready_workers,
            "minWorkerReplicas": desired_workers,
            "maxWorkerReplicas": desired_workers,
            "observedGeneration": meta.get("generation", 1),
            "endpoints": {
                str(p["name"]): str(p["port"]) for p in ((service or {}).get("spec") or {}).get("ports") or []
            },
            "head": {"serviceName": f"{name}-head-svc"},
        }
        if service is not None and service["spec"].get("clusterIP") not in (None, "", "None"):
            status["head"]["serviceIP"] = service["spec"]["clusterIP"]
        elif head is not None and (head.get("status") or {}).get("podIP"):
            status["head"]["serviceIP"] = head["status"]["podIP"]  # headless: the head pod's address
        if head is not None:
            status["head"]["podName"] = head["metadata"]["name"]
            if (head.get("status") or {}).get("podIP"):
                status["head"]["podIP"] = head["status"]["podIP"]
        if all_ready or (old.get("state") == "ready" and head_ready):
            status["state"] = "ready"
        if not self.faults.legacy_status:
            provisioned = all_ready or provisioned_before
            # KubeRay's CRD requires message on its conditions (an empty one when all is well).
            status["conditions"] = _same_conditions(old.get("conditions") or [], [
                _condition(
                    "HeadPodReady", head_ready,
                    "HeadPodRunningAndReady" if head_ready else "HeadPodNotFound" if head is None else "HeadPodNotReady",
                    "" if head_ready else "the head pod is not running and ready", always_message=True,
                ),
                _condition(
                    "RayClusterProvisioned", provisioned,
                    "AllPodRunningAndReadyFirstTime" if provisioned else "RayClusterPodsProvisioning",
                    "" if provisioned else "RayCluster Pods are being provisioned for the first time",
                    always_message=True,
                ),
            ])
        compare = {k: v for k, v in old.items() if k != "lastUpdateTime"}
        if compare == status:
            return
        status["lastUpdateTime"] = now_rfc3339()

        def set_status(o: Obj) -> None:
            o["status"] = status

        self.store.update("RayCluster", ns, name, set_status)

    # scheduler and kubelet

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
            if blocked is not None:
                message, autoscaler = blocked
                self._set_status(pod, {
                    "phase": "Pending", "qosClass": status.get("qosClass", "Burstable"),
                    "conditions": [_condition("PodScheduled", False, "Unschedulable", message)],
                })
                self.event(pod, "FailedScheduling", message, warning=True, component="default-scheduler")
                if autoscaler is not None:
                    self.event(pod, autoscaler[0], autoscaler[1], warning=autoscaler[0] == "FailedScaleUp", component="cluster-autoscaler")
                return
            self._ips += 1
            node = self.workloads.pick_node(pod, gpu=_wants_gpu(pod)) or (
                f"gke-fake-{'gpu' if _wants_gpu(pod) else 'cpu'}-pool-{self._ips % 7}")

            def schedule(o: Obj) -> None:
                o["spec"]["nodeName"] = node
                o["status"] = {
                    "phase": "Pending", "qosClass": status.get("qosClass", "Burstable"),
                    "conditions": [_condition("PodScheduled", True)],
                }

            self.store.update("Pod", ns, name, schedule)
            self.event(pod, "Scheduled", f"Successfully assigned {ns}/{name} to {node}", component="default-scheduler")
            return
        if age < self.timings.schedule + self.timings.start:
            return
        bad = [c for c in _containers(pod) if self._image_fails(c.get("image", ""))]
        if not bad and self.faults.crash_loop is None and not self.spot.ready(pod):
            return  # the raylet behind this worker pod is still starting
        if bad:
            self._image_pull_failed(pod, bad, backoff=age >= self.timings.schedule + 2 * self.timings.start)
            return
        pulled = self.workloads.pulled_at(pod)
        if pulled is None or time.monotonic() < pulled + self.timings.start:
            return  # the kubelet is pulling an image the node does not have yet
        if self.faults.crash_loop is not None:
            self._crash_looping(pod)
        else:
            self._running(pod)

    def preempt(self, pods: list[Obj], back_after: float | None) -> None:
        """Preempt the Spot nodes of ``pods``; see :mod:`rl_lustre.testing._kube_spot`."""
        for pod in pods:
            node = self.store.get("Node", None, (pod.get("spec") or {}).get("nodeName") or "")
            if node is not None:
                labels = {k: v for k, v in labels_of(node).items()
                          if k not in ("kubernetes.io/hostname", "cloud.google.com/gke-nodepool")}
                self._replace_nodes.append((labels_of(node).get("cloud.google.com/gke-nodepool", "gpu"), labels))
        self.spot.preempt(pods, back_after, self.event)

    def _unschedulable(self, pod: Obj) -> tuple[str, tuple[str, str] | None] | None:
        ns = pod["metadata"].get("namespace")
        for vol in (pod.get("spec") or {}).get("volumes") or []:
            claim = (vol.get("persistentVolumeClaim") or {}).get("claimName")
            if not claim:
                continue
            pvc = self.store.get("PersistentVolumeClaim", ns, claim)
            if pvc is None:
                return f'0/3 nodes are available: persistentvolumeclaim "{claim}" not found. preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling.', None
            if (pvc.get("status") or {}).get("phase") != "Bound":
                return (
                    "0/3 nodes are available: pod has unbound immediate PersistentVolumeClaims. preemption: "
                    "0/3 nodes are available: 3 Preemption is not helpful for scheduling."
                ), None
        if _wants_gpu(pod) and self.spot.gpu_capacity_gone():
            return UNSCHEDULABLE_MESSAGES["spot-stockout"], AUTOSCALER_EVENTS.get("spot-stockout")
        fault = self.faults.unschedulable
        if fault is not None and _wants_gpu(pod):
            return UNSCHEDULABLE_MESSAGES[fault], AUTOSCALER_EVENTS.get(fault)
        return None

    def _image_fails(self, image: str) -> bool:
        knob = self.faults.image_pull
        return knob is True or (isinstance(knob, str) and knob == image)

    def _set_status(self, pod: Obj, status: Obj) -> None:
        def put(o: Obj) -> None:
            old = o.get("status") or {}
            merged = dict(status)
            merged["conditions"] = _same_conditions(old.get("conditions") or [], status.get("conditions") or [])
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
                _condition("PodScheduled", True),
                _condition("Initialized", True),
                _condition("ContainersReady", ready, not_ready),
                _condition("Ready", ready, not_ready),
            ],
        }

    def _image_pull_failed(self, pod: Obj, bad: list[Obj], *, backoff: bool) -> None:
        status = self._base_status(pod, ready=False, phase="Pending")
        statuses = []
        for c in _containers(pod):
            image = c.get("image", "")
            if c in bad:
                reason = "ImagePullBackOff" if backoff else "ErrImagePull"
                message = (
                    f'Back-off pulling image "{image}"' if backoff
                    else f'failed to pull and unpack image "{image}": failed to resolve reference "{image}": not found'
                )
                state: Obj = {"waiting": {"reason": reason, "message": message}}
                self.event(pod, "Pulling", f'Pulling image "{image}"', component="kubelet")
                self.event(
                    pod, "Failed",
                    f'Failed to pull image "{image}": rpc error: code = NotFound desc = failed to pull and unpack '
                    f'image "{image}": failed to resolve reference "{image}": {image}: not found',
                    warning=True, component="kubelet",
                )
                if backoff:
                    self.event(pod, "BackOff", f'Back-off pulling image "{image}"', component="kubelet")
            else:
                state = {"waiting": {"reason": "PodInitializing"}}
            statuses.append({"name": c["name"], "image": image, "imageID": "", "ready": False, "restartCount": 0,
                             "started": False, "state": state})
        status["containerStatuses"] = statuses
        self._set_status(pod, status)

    def _crash_looping(self, pod: Obj) -> None:
        status = self._base_status(pod, ready=False, phase="Running")
        name = pod["metadata"]["name"]
        statuses = []
        for c in _containers(pod):
            statuses.append({
                "name": c["name"], "image": c.get("image", ""), "imageID": f"sha256:{'0' * 64}",
                "ready": False, "restartCount": 3, "started": False,
                "state": {"waiting": {"reason": "CrashLoopBackOff",
                                      "message": f"back-off 40s restarting failed container={c['name']} pod={name}"}},
                "lastState": {"terminated": {"exitCode": 1, "reason": "Error", "message": self.faults.crash_loop,
                                             "startedAt": now_rfc3339(), "finishedAt": now_rfc3339()}},
            })
            self.event(pod, "BackOff", f"Back-off restarting failed container {c['name']} in pod {name}",
                       warning=True, component="kubelet")
        status["containerStatuses"] = statuses
        self._set_status(pod, status)

    def _running(self, pod: Obj) -> None:
        if _pod_ready(pod):
            return
        status = self._base_status(pod, ready=True, phase="Running")
        statuses = []
        for c in _containers(pod):
            image = c.get("image", "")
            statuses.append({
                "name": c["name"], "image": image, "imageID": f"sha256:{'0' * 64}", "ready": True,
                "restartCount": 0, "started": True, "state": {"running": {"startedAt": now_rfc3339()}},
            })
            self.event(pod, "Pulled", f'Container image "{image}" already present on machine', component="kubelet")
            self.event(pod, "Started", f"Started container {c['name']}", component="kubelet")
        status["containerStatuses"] = statuses
        self._set_status(pod, status)


def _head_service(rc: Obj, service_name: str, head_group: Obj) -> Obj:
    """The head Service as KubeRay v1.x makes it: headless (``clusterIP: None``), its
    labels and selector, the head container's ports (``appProtocol: tcp``) plus metrics."""
    name, ns = rc["metadata"]["name"], rc["metadata"].get("namespace") or "default"
    ports = {
        str(p.get("name") or f"port-{p['containerPort']}"): int(p["containerPort"])
        for c in _containers({"spec": (head_group.get("template") or {}).get("spec") or {}})[:1]
        for p in c.get("ports") or []
    } or {n: p for n, p in HEAD_SERVICE_PORTS.items() if n != "metrics"}
    if METRICS_PORT not in ports.values():
        ports["metrics"] = METRICS_PORT
    identity = {"ray.io/cluster": name, "ray.io/node-type": "head", "ray.io/identifier": f"{name}-head"}
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": service_name, "namespace": ns,
            "labels": {**identity, "app.kubernetes.io/name": "kuberay", "app.kubernetes.io/created-by": "kuberay-operator"},
            "ownerReferences": [owner_reference(rc)],
        },
        "spec": {
            "clusterIP": "None",
            "selector": identity,
            "ports": [{"name": n, "port": p, "protocol": "TCP", "targetPort": p, "appProtocol": "tcp"}
                      for n, p in ports.items()],
        },
    }


def _pod_ready(pod: Obj) -> bool:
    status = pod.get("status") or {}
    return status.get("phase") == "Running" and any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or []
    )

