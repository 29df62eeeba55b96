"""Spot GPU nodes for :class:`~rl_lustre.testing.kube.KubeFake`: worker pods backed by real
local raylets, and GKE's Spot preemption of the nodes they run on.

Backing
    With ``KubeFake(raylets=start)``, every RayCluster worker pod that the simulated
    kubelet would start gets a real Ray worker node first: ``start(pod_name, node_name,
    resources)`` (run in a thread; it returns a handle with ``kill()``) joins a raylet to the
    real local head that the fake's head service forwards to. ``node_name`` is the name Ray
    gives the node, as the pod's own manifest makes ``ray start`` choose it: its worker group's
    ``--node-name`` (in ``rayStartParams``, or after the container's command), with the
    shell's ``$VAR`` expanded from the container's env (a ``fieldRef`` to ``spec.nodeName``
    is the pod's node); without one, the pod's IP, Ray's default. ``resources`` is what
    KubeRay's generated ``ray start`` declares (:func:`ray_start_resources`: ``CPU``,
    ``GPU``, ``memory`` from the group's ``rayStartParams``, else the Ray container's
    limits). The pod goes Running and Ready once that raylet runs, and its raylet is killed
    when the pod goes away.

Preemption (what GKE does to a Spot VM, see GKE's "Spot VMs" and "graceful node
shutdown" pages)
    The node gets the ``cloud.google.com/impending-node-termination:NoSchedule`` taint and
    turns ``Ready=False``; the kubelet's graceful shutdown marks its pods ``Failed`` with
    reason ``Terminated``, message ``Pod was terminated in response to imminent node
    shutdown.`` and a ``DisruptionTarget`` condition (reason ``TerminationByKubelet``);
    then the VM is gone -- the raylet with it (its process group is killed) -- and so is
    the Node object. KubeRay deletes a worker pod that ended ``Failed`` and creates a new
    one, which stays Pending (``FailedScheduling``, the autoscaler's ``FailedScaleUp``: GCE
    is out of Spot capacity) until the capacity is back; then it lands on a new node.
"""

from __future__ import annotations

import math
import re
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Protocol

from ._kube_scheduler import quantity
from ._kube_store import Obj, Store, labels_of, now_rfc3339, owned_by

IMPENDING_TERMINATION_TAINT = "cloud.google.com/impending-node-termination"
SHUTDOWN_MESSAGE = "Pod was terminated in response to imminent node shutdown."


class Raylet(Protocol):
    """What a raylet starter returns: a handle to the worker node it joined."""

    def kill(self) -> object: ...


# start(pod_name, node_name, resources): joins a Ray worker node, returns its handle.
RayletStarter = Callable[[str, str, dict[str, int]], Raylet]


def is_ray_worker(pod: Obj) -> bool:
    return labels_of(pod).get("ray.io/node-type") == "worker"


def ray_start_resources(pod: Obj, start_params: dict[str, Any]) -> dict[str, int]:
    """The ``CPU``, ``GPU`` and ``memory`` (bytes) that KubeRay's generated ``ray start`` declares
    for ``pod`` (its worker group's ``rayStartParams`` given): ``num-cpus``, ``num-gpus`` and
    ``memory`` from the params when set, else from the Ray container's limits (CPU: its
    requests when no limit is set; GPUs: the first resource whose name ends in ``gpu``),
    each rounded up to a whole number as KubeRay's ``Quantity.Value()``; absent when neither
    says (Ray then counts them).

    Examples:
        >>> pod = {"spec": {"containers": [{"resources": {
        ...     "limits": {"cpu": "15500m", "memory": "1Gi", "nvidia.com/gpu": "8"}}}]}}
        >>> ray_start_resources(pod, {})
        {'CPU': 16, 'GPU': 8, 'memory': 1073741824}
        >>> ray_start_resources(pod, {"num-cpus": "0", "num-gpus": "2"})
        {'CPU': 0, 'GPU': 2, 'memory': 1073741824}
    """
    container = ((pod.get("spec") or {}).get("containers") or [{}])[0]
    limits = (container.get("resources") or {}).get("limits") or {}
    requests = (container.get("resources") or {}).get("requests") or {}
    gpus = next((v for k, v in limits.items() if k.endswith("gpu") and quantity(v)), None)
    found = {"CPU": limits.get("cpu") or requests.get("cpu"), "GPU": gpus, "memory": limits.get("memory")}
    for key, param in (("CPU", "num-cpus"), ("GPU", "num-gpus"), ("memory", "memory")):
        if param in start_params:
            found[key] = start_params[param]
    return {k: math.ceil(quantity(v)) for k, v in found.items() if v is not None and str(v) != ""}


class SpotCapacity:
    """Raylets behind worker pods, and the Spot capacity GPU pods wait for."""

    def __init__(self, store: Store, start: RayletStarter | None) -> None:
        self.store = store
        self._start = start
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="kube-fake-raylet") if start else None
        self._raylets: dict[str, Future[Raylet]] = {}
        self._lock = threading.Lock()
        # monotonic time when Spot GPU capacity is back (inf: never); None: it is there.
        self.back_at: float | None = None
        # The pods whose raylet's latest start failed, with why (a later start that succeeds
        # clears it: on a loaded machine a start can run out of Ray's fixed 30 s, then work).
        self._failed: dict[str, str] = {}

    # capacity

    def gpu_capacity_gone(self) -> bool:
        if self.back_at is None:
            return False
        if time.monotonic() >= self.back_at:
            self.back_at = None
            return False
        return True

    # raylets behind worker pods

    def ready(self, pod: Obj) -> bool:
        """Whether the pod's raylet runs (starting it on first call); pods without backing are ready."""
        if self._pool is None or self._start is None or not is_ray_worker(pod):
            return True
        name = pod["metadata"]["name"]
        with self._lock:
            future = self._raylets.get(name)
            if future is None:
                resources = ray_start_resources(pod, dict(self._group(pod).get("rayStartParams") or {}))
                self._raylets[name] = self._pool.submit(self._start, name, self.ray_node_name(pod), resources)
                return False
        if not future.done():
            return False
        if future.exception() is not None:
            with self._lock:
                self._failed[name] = f"{name}: {future.exception()}"
                del self._raylets[name]
            return False
        with self._lock:
            self._failed.pop(name, None)
        return True

    @property
    def failures(self) -> list[str]:
        """The pods whose raylet's latest start failed, and why."""
        with self._lock:
            return list(self._failed.values())

    def ray_node_name(self, pod: Obj) -> str:
        """The name ``ray start`` gives the pod's node (see the module docstring)."""
        group = self._group(pod)
        flag = str((group.get("rayStartParams") or {}).get("node-name") or "")
        spec = pod.get("spec") or {}
        container = (spec.get("containers") or [{}])[0]
        if not flag:
            m = re.search(r"--node-name=(\S+)", " ".join(container.get("args") or []))
            flag = m.group(1) if m else ""
        if not flag:
            return str((pod.get("status") or {}).get("podIP") or pod["metadata"]["name"])
        env = {}
        for e in container.get("env") or []:
            path = ((e.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")
            env[e["name"]] = str(spec.get("nodeName") or "") if path == "spec.nodeName" else str(e.get("value") or "")
        return re.sub(r"\$\{?(\w+)\}?", lambda m: env.get(m.group(1), ""), flag)

    def _group(self, pod: Obj) -> Obj:
        """The RayCluster worker group the pod was made from (empty when not found)."""
        owners = pod["metadata"].get("ownerReferences") or []
        group = labels_of(pod).get("ray.io/group")
        for rc in self.store.find("RayCluster", pod["metadata"].get("namespace")):
            if any(o.get("uid") == rc["metadata"]["uid"] for o in owners) or owned_by(pod, rc["metadata"]["uid"]):
                for g in (rc.get("spec") or {}).get("workerGroupSpecs") or []:
                    if g.get("groupName") == group:
                        return dict(g)
        return {}

    def release(self, pod_name: str) -> None:
        """Kill the raylet behind ``pod_name``, if any (now, or once it has started)."""
        with self._lock:
            future = self._raylets.pop(pod_name, None)
        if future is not None:
            future.add_done_callback(lambda f: f.exception() is None and f.result().kill())

    def close(self) -> None:
        with self._lock:
            names = list(self._raylets)
        for name in names:
            self.release(name)
        if self._pool is not None:
            self._pool.shutdown(wait=True)

    # preemption

    def preempt(self, pods: list[Obj], back_after: float | None, event: Callable[..., None]) -> None:
        """Do to the nodes of ``pods`` what a Spot preemption does (see the module docstring)."""
        self.back_at = time.monotonic() + (math.inf if back_after is None else back_after)
        for pod in pods:
            node_name = (pod.get("spec") or {}).get("nodeName") or ""
            self.end_nodes(
                [pod],
                event,
                node=self.store.get("Node", None, node_name),
                reason="PreemptionNotice",
                message=f"Node {node_name} is a Spot VM that Compute Engine is reclaiming",
            )

    def end_nodes(
        self, pods: list[Obj], event: Callable[..., None], *, node: Obj | None, reason: str, message: str
    ) -> None:
        """End ``node`` as GKE ends a VM (a preemption, a flex-start run's end): its taint and
        NotReady, ``reason``/``message`` on it, ``pods`` terminated, the Node gone."""
        node_name = node["metadata"]["name"] if node is not None else ""
        if node is not None:
            self._taint(node)
            event(node, reason, message, warning=True, component="node-controller")
        for pod in pods:
            self._terminated(pod)
            event(pod, "TerminationByKubelet", SHUTDOWN_MESSAGE, warning=True, component="kubelet")
            self.release(pod["metadata"]["name"])
        if node is not None:
            event(
                node,
                "RemovingNode",
                f"Node {node_name} event: Removing Node {node_name} from Controller",
                component="node-controller",
            )
            self.store.remove(self.store.get("Node", None, node_name) or node)

    def _taint(self, node: Obj) -> None:
        stamp = now_rfc3339()

        def taint(o: Obj) -> None:
            spec = o.setdefault("spec", {})
            taints = [t for t in spec.get("taints") or [] if t.get("key") != IMPENDING_TERMINATION_TAINT]
            spec["taints"] = [
                *taints,
                {"key": IMPENDING_TERMINATION_TAINT, "value": "true", "effect": "NoSchedule", "timeAdded": stamp},
            ]
            o.setdefault("status", {})["conditions"] = [
                {
                    "type": "Ready",
                    "status": "False",
                    "reason": "KubeletNotReady",
                    "message": "node is shutting down",
                    "lastTransitionTime": stamp,
                }
            ]

        self.store.update("Node", None, node["metadata"]["name"], taint)

    def _terminated(self, pod: Obj) -> None:
        stamp = now_rfc3339()

        def terminate(o: Obj) -> None:
            old = o.get("status") or {}
            conditions = [c for c in old.get("conditions") or [] if c.get("type") not in ("Ready", "ContainersReady")]
            conditions += [
                {
                    "type": "DisruptionTarget",
                    "status": "True",
                    "reason": "TerminationByKubelet",
                    "message": SHUTDOWN_MESSAGE,
                    "lastTransitionTime": stamp,
                },
                {"type": "Ready", "status": "False", "reason": "PodFailed", "lastTransitionTime": stamp},
                {"type": "ContainersReady", "status": "False", "reason": "PodFailed", "lastTransitionTime": stamp},
            ]
            statuses = []
            for c in old.get("containerStatuses") or []:
                started = ((c.get("state") or {}).get("running") or {}).get("startedAt", stamp)
                statuses.append(
                    {
                        **c,
                        "ready": False,
                        "started": False,
                        "state": {
                            "terminated": {
                                "exitCode": 137,
                                "reason": "Error",
                                "startedAt": started,
                                "finishedAt": stamp,
                            }
                        },
                    }
                )
            o["status"] = {
                **old,
                "phase": "Failed",
                "reason": "Terminated",
                "message": SHUTDOWN_MESSAGE,
                "conditions": conditions,
                "containerStatuses": statuses,
            }

        self.store.update("Pod", pod["metadata"].get("namespace"), pod["metadata"]["name"], terminate)
