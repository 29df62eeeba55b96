"""The KubeRay operator of :class:`~rl_lustre.testing.kube.KubeFake`, as KubeRay v1.x behaves.

A RayCluster gets a headless head Service, one head pod and each worker group's replicas
(a worker pod that ends ``Failed`` is deleted and replaced); its status counts ready
workers and reports ``HeadPodReady``/``RayClusterProvisioned`` conditions (only
``state`` with :attr:`KubeFaults.legacy_status`). :attr:`KubeFaults.no_operator` stops it.
"""

from __future__ import annotations

import copy

from ..catalog import RAY_HEAD_PORTS
from ..naming import head_service_of
from ._kube_controller import Controller, condition, containers, pod_ready, same_conditions
from ._kube_spot import is_ray_worker
from ._kube_store import Obj, labels_of, now_rfc3339, owned_by, owner_reference, random_suffix

METRICS_PORT = 8080
HEAD_SERVICE_PORTS = {**RAY_HEAD_PORTS, "metrics": 8080, "serve": 8000}


class KubeRayOperator(Controller):
    """RayClusters to Services and Pods (:meth:`reconcile`), Pods to RayCluster status
    (:meth:`update_status`, run after the kubelet's pass)."""

    def reconcile(self) -> None:
        if self.faults.no_operator:
            return
        for rc in self.store.find("RayCluster"):
            if not rc["metadata"].get("deletionTimestamp"):
                self._reconcile_raycluster(rc)

    def update_status(self) -> None:
        if self.faults.no_operator:
            return
        for rc in self.store.find("RayCluster"):
            if not rc["metadata"].get("deletionTimestamp"):
                self._raycluster_status(rc)

    def _reconcile_raycluster(self, rc: Obj) -> None:
        meta = rc["metadata"]
        name, ns = meta["name"], meta.get("namespace") or "default"
        spec = rc.get("spec") or {}
        owned = self.store.find(match=lambda o: owned_by(o, meta["uid"]))
        head_group = spec.get("headGroupSpec") or {}
        service_name = head_service_of(name)
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
        ready_workers = sum(1 for w in workers if pod_ready(w))
        head_ready = head is not None and pod_ready(head)
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
            status["conditions"] = same_conditions(old.get("conditions") or [], [
                condition(
                    "HeadPodReady", head_ready,
                    "HeadPodRunningAndReady" if head_ready else "HeadPodNotFound" if head is None else "HeadPodNotReady",
                    "" if head_ready else "the head pod is not running and ready", always_message=True,
                ),
                condition(
                    "RayClusterProvisioned", provisioned,
                    "AllPodRunningAndReadyFirstTime" if provisioned else "RayClusterPodsProvisioning",
                    "" if provisioned else "RayCluster Pods are being provisioned for the first time",
                    always_message=True,
                ),
            ])
        # As KubeRay does: a status that differs only in lastUpdateTime or observedGeneration
        # is not written, so a pod-template-only change leaves observedGeneration behind.
        unchanged = ("lastUpdateTime", "observedGeneration")
        if {k: v for k, v in old.items() if k not in unchanged} == {k: v for k, v in status.items() if k not in unchanged}:
            return
        status["lastUpdateTime"] = now_rfc3339()

        def set_status(o: Obj) -> None:
            o["status"] = status

        self.store.update("RayCluster", ns, name, set_status)


def _head_service(rc: Obj, service_name: str, head_group: Obj) -> Obj:
    """The head Service as KubeRay v1.x makes it: headless (``clusterIP: None``), its
    labels and selector, the head container's ports (``appProtocol: tcp``) plus metrics."""
    name, ns = rc["metadata"]["name"], rc["metadata"].get("namespace") or "default"
    ports = {
        str(p.get("name") or f"port-{p['containerPort']}"): int(p["containerPort"])
        for c in containers({"spec": (head_group.get("template") or {}).get("spec") or {}})[:1]
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

