"""The KubeRay operator of :class:`~rl_lustre.testing.kube.KubeFake`, as KubeRay v1.5 behaves
(see :class:`KubeRayOperator`; held to the real operator by ``tests/test_kube_real*.py``).

A RayCluster gets a headless head Service, one head pod and each worker group's replicas;
a pod that ends is replaced, head or worker; a pod the API server refuses is a
``ReplicaFailure``. Its status reports ``HeadPodReady``/``RayClusterProvisioned``
conditions (only ``state`` with :attr:`KubeFaults.legacy_status`).
:attr:`KubeFaults.no_operator` stops it.
"""

from __future__ import annotations

import copy

from ..catalog import RAY_HEAD_PORTS
from ..naming import head_service_of
from ._kube_controller import Controller, condition, containers, pod_ready, same_conditions
from ._kube_spot import is_ray_worker
from ._kube_store import (
    ApiError,
    Obj,
    labels_of,
    now_rfc3339,
    owned_by,
    owner_reference,
    random_suffix,
)

METRICS_PORT = 8080
HEAD_SERVICE_PORTS = {**RAY_HEAD_PORTS, "metrics": 8080, "serve": 8000}


# KubeRay's CRD defaults for a worker group (the API server fills them in on create).
_MAX_REPLICAS = 2147483647
HEAD_GROUP = "headgroup"


def desired_replicas(group: Obj) -> int:
    """KubeRay's ``GetWorkerGroupDesiredReplicas``: replicas held to ``[min, max]`` (max
    wins when min > max), times ``numOfHosts``; 0 for a suspended group."""
    if group.get("suspend"):
        return 0
    low = int(group.get("minReplicas") or 0)
    high = int(group["maxReplicas"]) if group.get("maxReplicas") is not None else _MAX_REPLICAS
    replicas = group.get("replicas")
    if low > high:
        want = high
    elif replicas is None or int(replicas) < low:
        want = low
    else:
        want = min(int(replicas), high)
    return want * max(1, int(group.get("numOfHosts") or 1))


def _should_delete(pod: Obj) -> bool:
    """KubeRay's ``shouldDeletePod``: a pod that ended (Failed, Succeeded), or whose Ray
    container ended while it cannot restart (``restartPolicy: Never``)."""
    status = pod.get("status") or {}
    if status.get("phase") in ("Failed", "Succeeded"):
        return True
    first = (containers(pod) or [{}])[0].get("name")
    ended = any(
        c.get("name") == first and (c.get("state") or {}).get("terminated")
        for c in status.get("containerStatuses") or []
    )
    return status.get("phase") == "Running" and ended and (pod.get("spec") or {}).get("restartPolicy") == "Never"


class _ReplicaFailure(Exception):
    """A pod KubeRay could not create: ``reason`` is the ReplicaFailure condition's."""

    def __init__(self, reason: str, error: str) -> None:
        super().__init__(f"{reason}\n{error}")
        self.reason = reason


class KubeRayOperator(Controller):
    """RayClusters to Services and Pods (:meth:`reconcile`), Pods to RayCluster status
    (:meth:`update_status`, run after the kubelet's pass), as ``raycluster_controller.go``
    of KubeRay v1.5 does them:

    - a head pod or worker pod that ended (``Failed``/``Succeeded``) is deleted, and no pod
      is created in that pass; a missing head pod is created, a group short of its desired
      replicas gets more pods, one with too many loses the first ones;
    - pods being deleted still count (the operator lists them): a worker group gets its
      replacement only once the old pod is gone;
    - a pod the API server refuses (a ResourceQuota: ``_kube_quota``) is a
      ``FailedToCreate...Pod`` event and the ``ReplicaFailure`` condition, cleared by the
      next pass without error;
    - the status counts every pod of the cluster, terminating ones too:
      ``readyWorkerReplicas`` (Running and Ready), ``availableWorkerReplicas`` (Running),
      ``desired``/``min``/``maxWorkerReplicas`` from the spec; ``state`` becomes
      ``ready`` when every pod (head and desired workers, no more, no fewer) is Running and
      Ready and is never taken back; ``RayClusterProvisioned`` turns True the first time all
      existing pods are Running and Ready and stays; zero counts are left out (omitempty);
      a status that differs only in ``lastUpdateTime``/``observedGeneration`` is not written.
    """

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._errors: dict[str, _ReplicaFailure | None] = {}

    def reconcile(self) -> None:
        if self.faults.no_operator:
            return
        for rc in self.store.find("RayCluster"):
            if not rc["metadata"].get("deletionTimestamp"):
                uid = rc["metadata"]["uid"]
                try:
                    self._reconcile_raycluster(rc)
                    self._errors[uid] = None
                except _ReplicaFailure as failure:
                    self._errors[uid] = failure

    def update_status(self) -> None:
        if self.faults.no_operator:
            return
        for rc in self.store.find("RayCluster"):
            if not rc["metadata"].get("deletionTimestamp"):
                self._raycluster_status(rc, self._errors.get(rc["metadata"]["uid"]))

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
        pods = [o for o in owned if o["kind"] == "Pod"]
        heads = [p for p in pods if labels_of(p).get("ray.io/node-type") == "head"]
        if len(heads) == 1 and _should_delete(heads[0]):
            self._delete_pod(rc, heads[0], "head")
            return  # KubeRay ends this reconcile with an error, and creates the new head next time
        if not heads:
            self._create_pod(rc, HEAD_GROUP, "head", head_group)
        for group in spec.get("workerGroupSpecs") or []:
            group_name = str(group.get("groupName", "workers"))
            mine = [p for p in pods if labels_of(p).get("ray.io/group") == group_name and is_ray_worker(p)]
            unhealthy = [p for p in mine if _should_delete(p)]
            if unhealthy:
                for pod in unhealthy:
                    self._delete_pod(rc, pod, "worker")
                return
            diff = desired_replicas(group) - len(mine)
            for _ in range(diff):
                self._create_pod(rc, group_name, "worker", group)
            for extra in mine[: max(0, -diff)]:
                self._delete_pod(rc, extra, "worker", why="")

    def _delete_pod(self, rc: Obj, pod: Obj, what: str, *, why: str = "failed") -> None:
        ns = pod["metadata"].get("namespace") or "default"
        if pod["metadata"].get("deletionTimestamp"):
            return
        self.store.mark_deleted("Pod", ns, pod["metadata"]["name"], foreground=False)
        if why:
            phase = (pod.get("status") or {}).get("phase")
            restart = (pod.get("spec") or {}).get("restartPolicy", "Always")
            message = (
                f"Deleted {what} Pod {ns}/{pod['metadata']['name']}; Pod status: {phase}; "
                f"Pod restart policy: {restart}; Ray container terminated status: nil"
            )
        else:
            message = f"Deleted Pod {ns}/{pod['metadata']['name']}"
        self.event(rc, f"Deleted{what.capitalize()}Pod", message, component="raycluster-controller")

    def _create_pod(self, rc: Obj, group_name: str, node_type: str, group: Obj) -> None:
        name, ns = rc["metadata"]["name"], rc["metadata"].get("namespace") or "default"
        template = copy.deepcopy(group.get("template") or {})
        pod_name = (
            f"{name}-head-{random_suffix()}" if node_type == "head" else f"{name}-{group_name}-worker-{random_suffix()}"
        )
        labels = dict((template.get("metadata") or {}).get("labels") or {})
        labels.update(
            {
                "ray.io/cluster": name,
                "ray.io/node-type": node_type,
                "ray.io/group": group_name,
                "ray.io/identifier": f"{name}-{node_type}",
                "ray.io/is-ray-node": "yes",
                "app.kubernetes.io/created-by": "kuberay-operator",
                "app.kubernetes.io/name": "kuberay",
            }
        )
        spec = template.get("spec") or {}
        spec.setdefault("restartPolicy", "Always")
        what = "head" if node_type == "head" else "worker"
        try:
            pod = self.store.create(
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {
                        "name": pod_name,
                        "namespace": ns,
                        "labels": labels,
                        "annotations": dict((template.get("metadata") or {}).get("annotations") or {}),
                        "ownerReferences": [owner_reference(rc)],
                    },
                    "spec": spec,
                }
            )
        except ApiError as refused:
            if node_type == "head":
                self.event(
                    rc,
                    "FailedToCreateHeadPod",
                    f"Failed to create head Pod {ns}/{pod_name}, {refused.message}",
                    warning=True,
                    component="raycluster-controller",
                )
                raise _ReplicaFailure("FailedCreateHeadPod", refused.message) from None
            self.event(
                rc,
                "FailedToCreateWorkerPod",
                f"Failed to create worker Pod for the cluster {ns}/{name}, {refused.message}",
                warning=True,
                component="raycluster-controller",
            )
            raise _ReplicaFailure("FailedCreateWorkerPod", refused.message) from None

        def pending(o: Obj) -> None:
            o["status"] = {"phase": "Pending", "qosClass": "Burstable"}

        self.store.update("Pod", ns, pod_name, pending)
        self.event(
            rc,
            f"Created{what.capitalize()}Pod",
            f"Created {what} Pod {ns}/{pod['metadata']['name']}",
            component="raycluster-controller",
        )

    def _raycluster_status(self, rc: Obj, failure: _ReplicaFailure | None) -> None:
        meta = rc["metadata"]
        name, ns = meta["name"], meta.get("namespace") or "default"
        spec = rc.get("spec") or {}
        pods = self.store.find("Pod", ns, lambda o: owned_by(o, meta["uid"]))
        head = next((p for p in pods if labels_of(p).get("ray.io/node-type") == "head"), None)
        workers = [p for p in pods if labels_of(p).get("ray.io/node-type") == "worker"]
        groups = list(spec.get("workerGroupSpecs") or [])
        desired = sum(desired_replicas(g) for g in groups)
        live = [g for g in groups if not g.get("suspend")]
        hosts = [max(1, int(g.get("numOfHosts") or 1)) for g in live]
        service = self.store.get("Service", ns, head_service_of(name))
        old = rc.get("status") or {}
        all_running = bool(pods) and all(pod_ready(p) for p in pods)
        status: Obj = {
            "desiredWorkerReplicas": desired,
            "readyWorkerReplicas": sum(1 for w in workers if pod_ready(w)),
            "availableWorkerReplicas": sum(1 for w in workers if (w.get("status") or {}).get("phase") == "Running"),
            "minWorkerReplicas": sum(int(g.get("minReplicas") or 0) * h for g, h in zip(live, hosts, strict=True)),
            "maxWorkerReplicas": sum(
                int(g["maxReplicas"]) * h if g.get("maxReplicas") is not None else _MAX_REPLICAS
                for g, h in zip(live, hosts, strict=True)
            ),
            "observedGeneration": meta.get("generation", 1),
            "endpoints": {
                str(p["name"]): str(p["port"]) for p in ((service or {}).get("spec") or {}).get("ports") or []
            },
            "head": {"serviceName": head_service_of(name)},
        }
        status = {k: v for k, v in status.items() if v != 0}  # omitempty
        if service is not None and service["spec"].get("clusterIP") not in (None, "", "None"):
            status["head"]["serviceIP"] = service["spec"]["clusterIP"]
        elif head is not None and (head.get("status") or {}).get("podIP"):
            status["head"]["serviceIP"] = head["status"]["podIP"]  # headless: the head pod's address
        if head is not None:
            status["head"]["podName"] = head["metadata"]["name"]
            if (head.get("status") or {}).get("podIP"):
                status["head"]["podIP"] = head["status"]["podIP"]
        if failure is None and len(pods) == desired + 1 and all_running:
            status["state"] = "ready"
        elif old.get("state"):
            status["state"] = old["state"]  # KubeRay never takes a state back but to suspend
        if not self.faults.legacy_status:
            status["conditions"] = self._conditions(old, head, all_running, failure)
        # As KubeRay does: a status that differs only in lastUpdateTime or observedGeneration
        # is not written, so a pod-template-only change leaves observedGeneration behind.
        unchanged = ("lastUpdateTime", "observedGeneration")
        if {k: v for k, v in old.items() if k not in unchanged} == {
            k: v for k, v in status.items() if k not in unchanged
        }:
            return
        status["lastUpdateTime"] = now_rfc3339()

        def set_status(o: Obj) -> None:
            o["status"] = status

        self.store.update("RayCluster", ns, name, set_status)

    @staticmethod
    def _conditions(old: Obj, head: Obj | None, all_running: bool, failure: _ReplicaFailure | None) -> list[Obj]:
        before = old.get("conditions") or []
        provisioned_before = any(c.get("type") == "RayClusterProvisioned" and c.get("status") == "True" for c in before)
        if head is None:
            head_ready = condition("HeadPodReady", False, "HeadPodNotFound", "Head Pod not found")
        else:
            ready = next(
                (c for c in (head.get("status") or {}).get("conditions") or [] if c.get("type") == "Ready"), None
            )
            ok = ready is not None and ready.get("status") == "True"
            reason = (ready or {}).get("reason") or ("HeadPodRunningAndReady" if ok else "Unknown")
            head_ready = condition(
                "HeadPodReady", ok, reason, str((ready or {}).get("message") or ""), always_message=True
            )
        conditions = []
        if failure is not None:
            conditions.append(condition("ReplicaFailure", True, failure.reason, str(failure)))
        conditions.append(head_ready)
        # KubeRay's CRD requires message on its conditions (an empty one when all is well).
        if provisioned_before:
            conditions.append(next(c for c in before if c.get("type") == "RayClusterProvisioned"))
        elif all_running:
            conditions.append(
                condition(
                    "RayClusterProvisioned",
                    True,
                    "AllPodRunningAndReadyFirstTime",
                    "All Ray Pods are ready for the first time",
                    always_message=True,
                )
            )
        else:
            conditions.append(
                condition(
                    "RayClusterProvisioned",
                    False,
                    "RayClusterPodsProvisioning",
                    "RayCluster Pods are being provisioned for first time",
                    always_message=True,
                )
            )
        conditions += [
            condition(t, False, t, "", always_message=True) for t in ("RayClusterSuspended", "RayClusterSuspending")
        ]
        return same_conditions(before, conditions)


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
            "name": service_name,
            "namespace": ns,
            "labels": {
                **identity,
                "app.kubernetes.io/name": "kuberay",
                "app.kubernetes.io/created-by": "kuberay-operator",
            },
            "ownerReferences": [owner_reference(rc)],
        },
        "spec": {
            "clusterIP": "None",
            "selector": identity,
            "ports": [
                {"name": n, "port": p, "protocol": "TCP", "targetPort": p, "appProtocol": "tcp"}
                for n, p in ports.items()
            ],
        },
    }
