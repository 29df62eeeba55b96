"""Nodes, DaemonSets and Jobs for :class:`~rl_lustre.testing.kube.KubeFake`: what the
node lifecycle controller, the DaemonSet controller and the Job controller of a real
cluster do, simulated.

- ``v1`` Nodes are created by whoever plays GKE (``FakeGCP(kube=...)`` adds one per
  node of a node pool once the pool is RUNNING, with GKE's node labels) or by a test
  through :meth:`KubeFake.add_nodes`.
- An ``apps/v1`` DaemonSet gets one pod per node that matches its pod template's
  ``nodeSelector``, bound to that node; its status counts them as the controller does
  (``desiredNumberScheduled``, ``numberReady``, ...).
- A ``batch/v1`` Job gets a pod that runs for :attr:`KubeTimings.job_run` seconds and
  then succeeds, or fails with :attr:`KubeFaults.job_failure` as its termination
  message; after ``backoffLimit`` failed pods the Job is ``Failed``
  (``BackoffLimitExceeded``), after a success ``Complete``.

What the API server itself adds on create (defaults, the Job's selector and
controller-uid labels, the DaemonSet selector check) is :func:`server_defaults`.
"""

from __future__ import annotations

import copy
import time

from ..catalog import GKE_NODEPOOL_LABEL
from ._kube_controller import Controller, Memory, pod_ready
from ._kube_faults import KubeFaults, KubeTimings
from ._kube_store import (
    ApiError,
    Obj,
    Store,
    labels_of,
    now_rfc3339,
    owned_by,
    owner_reference,
    random_suffix,
)

JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
CONTROLLER_UID_LABEL = "batch.kubernetes.io/controller-uid"
_TERMINAL = ("Succeeded", "Failed")


def server_defaults(obj: Obj) -> None:
    """What the API server fills in or rejects when a DaemonSet or Job is created."""
    kind, spec = obj["kind"], obj.setdefault("spec", {})
    name = obj["metadata"]["name"]
    template = spec.setdefault("template", {})
    pod_labels = (template.get("metadata") or {}).get("labels") or {}
    if kind == "DaemonSet":
        wanted = ((spec.get("selector") or {}).get("matchLabels")) or {}
        if not wanted:
            raise ApiError(422, "Invalid", f'DaemonSet.apps "{name}" is invalid: spec.selector: Required value')
        if any(pod_labels.get(k) != v for k, v in wanted.items()):
            raise ApiError(422, "Invalid", f'DaemonSet.apps "{name}" is invalid: spec.template.metadata.labels: '
                           "Invalid value: `selector` does not match template `labels`")
        spec.setdefault("revisionHistoryLimit", 10)
        spec.setdefault("updateStrategy", {"type": "RollingUpdate",
                                           "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}})
        obj["status"] = {"currentNumberScheduled": 0, "desiredNumberScheduled": 0, "numberMisscheduled": 0,
                         "numberReady": 0}
    elif kind == "Job":
        restart = (template.get("spec") or {}).get("restartPolicy")
        if restart not in ("Never", "OnFailure"):
            raise ApiError(422, "Invalid", f'Job.batch "{name}" is invalid: spec.template.spec.restartPolicy: '
                           f'Unsupported value: "{restart}": supported values: "OnFailure", "Never"')
        uid = obj["metadata"]["uid"]
        spec.setdefault("backoffLimit", 6)
        spec.setdefault("completions", 1)
        spec.setdefault("parallelism", 1)
        spec.setdefault("completionMode", "NonIndexed")
        spec.setdefault("suspend", False)
        spec.setdefault("manualSelector", False)
        spec.setdefault("podReplacementPolicy", "TerminatingOrFailed")
        spec["selector"] = {"matchLabels": {CONTROLLER_UID_LABEL: uid}}
        meta = template.setdefault("metadata", {})
        meta["labels"] = {**pod_labels, CONTROLLER_UID_LABEL: uid, JOB_NAME_LABEL: name,
                          "controller-uid": uid, "job-name": name}
        obj["status"] = {}


class Workloads(Controller):
    """The node, DaemonSet and Job controllers; :meth:`step` runs one pass."""

    def __init__(self, store: Store, faults: KubeFaults, timings: KubeTimings, memory: Memory) -> None:
        super().__init__(store, faults, timings, memory)
        store.admission.update(dict.fromkeys(("DaemonSet", "Job"), server_defaults))
        # (namespace, pod) -> log text, served by pods/<name>/log.
        self.logs: dict[tuple[str, str], str] = {}
        self._running_since: dict[str, float] = {}
        # (node uid, image) -> when its pull started; a node keeps what it pulled, and a new
        # node of the same name (a replacement after a preemption) starts with an empty disk.
        self._pulls: dict[tuple[str, str], float] = {}

    def reset(self) -> None:
        self.logs.clear()
        self._running_since.clear()
        self._pulls.clear()

    # the kubelet's image store

    def pulled_at(self, pod: Obj) -> float | None:
        """When the images of ``pod`` were on its node (``None`` while a pull runs), starting
        the pulls the node lacks. Pods on one node share one pull per image, and a node keeps
        what it pulled, as the kubelet does."""
        name = (pod.get("spec") or {}).get("nodeName") or ""
        found = self.store.get("Node", None, name)
        node = found["metadata"]["uid"] if found is not None else name
        now = time.monotonic()
        done = 0.0
        for c in (pod.get("spec") or {}).get("containers") or []:
            image = c.get("image", "")
            end = self._pulls.setdefault((node, image), now) + self.timings.pull_time(image)
            if end > now:
                return None
            done = max(done, end)
        return done

    # the scheduler's choice among registered nodes

    def pick_node(self, pod: Obj, *, gpu: bool) -> str | None:
        """A Ready node matching the pod's ``nodeSelector`` with room for it (one GPU pod per
        node), fewest pods first; None when no Node is registered that fits."""
        selector = (pod.get("spec") or {}).get("nodeSelector") or {}
        nodes = [n["metadata"]["name"] for n in self.store.find("Node")
                 if all(labels_of(n).get(k) == v for k, v in selector.items())]
        if not nodes:
            return None
        load = dict.fromkeys(nodes, 0)
        gpu_taken: set[str] = set()
        for other in self.store.find("Pod"):
            where = (other.get("spec") or {}).get("nodeName")
            if where in load and (other.get("status") or {}).get("phase") not in _TERMINAL:
                load[where] += 1
                if _gpu_pod(other):
                    gpu_taken.add(str(where))
        free = [n for n in nodes if not gpu or n not in gpu_taken]
        return min(free, key=lambda n: (load[n], n)) if free else None

    def step(self) -> None:
        for ds in self.store.find("DaemonSet"):
            if not ds["metadata"].get("deletionTimestamp"):
                self._daemonset(ds)
        for pod in self.store.find("Pod"):
            if self._job_of(pod) is not None and not pod["metadata"].get("deletionTimestamp"):
                self._job_pod(pod)
        for job in self.store.find("Job"):
            if not job["metadata"].get("deletionTimestamp"):
                self._job(job)

    # nodes

    def add_nodes(self, pool: str, count: int, labels: dict[str, str]) -> list[str]:
        """Register ``count`` Ready nodes of node pool ``pool``; returns their names."""
        names: list[str] = []
        existing = {n["metadata"]["name"] for n in self.store.find("Node")}
        i = 0
        while len(names) < count:
            name = f"gke-{pool}-{i:04d}"
            i += 1
            if name in existing:
                continue
            self.store.create({
                "apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name,
                                                      GKE_NODEPOOL_LABEL: pool, **labels}},
                "spec": {},
                "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                           "lastTransitionTime": now_rfc3339()}]},
            })
            names.append(name)
        return names

    def remove_nodes(self, pool: str) -> None:
        for node in self.store.find("Node", match=lambda n: labels_of(n).get(GKE_NODEPOOL_LABEL) == pool):
            self.store.remove(node)

    # DaemonSet controller

    def _daemonset(self, ds: Obj) -> None:
        meta = ds["metadata"]
        ns = meta.get("namespace") or "default"
        template = ds["spec"].get("template") or {}
        nodes = [n for n in self.store.find("Node") if _fits(template.get("spec") or {}, labels_of(n))]
        pods = [p for p in self.store.find("Pod", ns, lambda o: owned_by(o, meta["uid"]))
                if not p["metadata"].get("deletionTimestamp")]
        on_node = {p["spec"].get("nodeName"): p for p in pods}
        node_names = {n["metadata"]["name"] for n in nodes}
        for node in sorted(node_names - set(on_node)):
            spec = copy.deepcopy(template.get("spec") or {})
            spec["nodeName"] = node
            spec.setdefault("restartPolicy", "Always")
            pod_name = f"{meta['name']}-{random_suffix()}"
            self.store.create({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": pod_name, "namespace": ns,
                             "labels": dict((template.get("metadata") or {}).get("labels") or {}),
                             "ownerReferences": [owner_reference(ds)]},
                "spec": spec,
            })
            self.event(ds, "SuccessfulCreate", f"Created pod: {pod_name}", component="daemonset-controller")
        for node, pod in on_node.items():
            if node not in node_names:
                self.store.mark_deleted("Pod", ns, pod["metadata"]["name"], foreground=False)
        ready = sum(1 for p in pods if p["spec"].get("nodeName") in node_names and pod_ready(p))
        status = {
            "currentNumberScheduled": len([p for p in pods if p["spec"].get("nodeName") in node_names]),
            "desiredNumberScheduled": len(node_names),
            "numberMisscheduled": 0,
            "numberReady": ready,
            "numberAvailable": ready,
            "updatedNumberScheduled": len(pods),
            "observedGeneration": meta.get("generation", 1),
        }
        if len(node_names) - ready:
            status["numberUnavailable"] = len(node_names) - ready
        if ds.get("status") != status:
            self.store.update("DaemonSet", ns, meta["name"], lambda o: o.__setitem__("status", status))

    # Job controller

    def _job_of(self, pod: Obj) -> Obj | None:
        uid = labels_of(pod).get(CONTROLLER_UID_LABEL)
        return None if uid is None else self.store.by_uid(uid)

    def _job(self, job: Obj) -> None:
        meta, spec = job["metadata"], job["spec"]
        ns = meta.get("namespace") or "default"
        status = dict(job.get("status") or {})
        if any(c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
               for c in status.get("conditions") or []):
            return
        pods = self.store.find("Pod", ns, lambda o: owned_by(o, meta["uid"]))
        phases = [(p.get("status") or {}).get("phase") for p in pods]
        succeeded, failed = phases.count("Succeeded"), phases.count("Failed")
        active = [p for p, ph in zip(pods, phases, strict=True)
                  if ph not in _TERMINAL and not p["metadata"].get("deletionTimestamp")]
        status.setdefault("startTime", now_rfc3339())
        status.update(succeeded=succeeded, failed=failed, active=len(active), ready=sum(map(pod_ready, active)))
        stamp = now_rfc3339()
        def conditions(types: tuple[str, str], reason: str, message: str) -> list[Obj]:
            # The Job controller sets an interim condition and the terminal one together.
            return [{"type": t, "status": "True", "reason": reason, "message": message,
                     "lastProbeTime": stamp, "lastTransitionTime": stamp} for t in types]

        if succeeded >= int(spec.get("completions", 1)):
            status["conditions"] = conditions(("SuccessCriteriaMet", "Complete"), "CompletionsReached",
                                              "Reached expected number of succeeded pods")
            status["completionTime"] = stamp
            self.event(job, "Completed", "Job completed", component="job-controller")
        elif failed > int(spec.get("backoffLimit", 6)):
            status["conditions"] = conditions(("FailureTarget", "Failed"), "BackoffLimitExceeded",
                                              "Job has reached the specified backoff limit")
            self.event(job, "BackoffLimitExceeded", "Job has reached the specified backoff limit",
                       warning=True, component="job-controller")
        elif not active:
            self._job_pod_create(job)
            status["active"] = 1
        if status != job.get("status"):
            self.store.update("Job", ns, meta["name"], lambda o: o.__setitem__("status", status))

    def _job_pod_create(self, job: Obj) -> None:
        meta = job["metadata"]
        ns = meta.get("namespace") or "default"
        template = copy.deepcopy(job["spec"].get("template") or {})
        pod_name = f"{meta['name']}-{random_suffix()}"
        self.store.create({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": pod_name, "namespace": ns,
                         "labels": dict((template.get("metadata") or {}).get("labels") or {}),
                         "ownerReferences": [owner_reference(job)]},
            "spec": template.get("spec") or {},
        })
        self.store.update("Pod", ns, pod_name, lambda o: o.__setitem__("status", {"phase": "Pending"}))
        self.event(job, "SuccessfulCreate", f"Created pod: {pod_name}", component="job-controller")

    def _job_pod(self, pod: Obj) -> None:
        """A running Job pod exits after ``timings.job_run``: 0, or 1 with the fault's message."""
        status = pod.get("status") or {}
        if status.get("phase") != "Running":
            return
        uid = pod["metadata"]["uid"]
        started = self._running_since.setdefault(uid, time.monotonic())
        if time.monotonic() - started < self.timings.job_run:
            return
        self._running_since.pop(uid, None)
        failure = self.faults.job_failure
        stamp = now_rfc3339()
        statuses = []
        for c in (pod.get("spec") or {}).get("containers") or []:
            terminated: Obj = {"exitCode": 0, "reason": "Completed", "startedAt": stamp, "finishedAt": stamp}
            if failure is not None:
                terminated.update(exitCode=1, reason="Error", message=failure)
            statuses.append({"name": c["name"], "image": c.get("image", ""), "imageID": f"sha256:{'0' * 64}",
                             "ready": False, "restartCount": 0, "started": False, "state": {"terminated": terminated}})
        phase = "Failed" if failure is not None else "Succeeded"
        reason = "PodFailed" if failure is not None else "PodCompleted"

        def finish(o: Obj) -> None:
            new = dict(o.get("status") or {})
            new["phase"] = phase
            new["containerStatuses"] = statuses
            new["conditions"] = [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": stamp},
                {"type": "Initialized", "status": "True", "lastTransitionTime": stamp},
                {"type": "ContainersReady", "status": "False", "reason": reason, "lastTransitionTime": stamp},
                {"type": "Ready", "status": "False", "reason": reason, "lastTransitionTime": stamp},
            ]
            o["status"] = new

        self.store.update("Pod", pod["metadata"].get("namespace"), pod["metadata"]["name"], finish)


def _fits(pod_spec: Obj, labels: dict[str, str]) -> bool:
    """Whether a node with ``labels`` matches the pod's ``nodeSelector`` and required node
    affinity (``In``, ``NotIn``, ``Exists``, ``DoesNotExist`` terms; any term may match)."""
    if any(labels.get(k) != v for k, v in (pod_spec.get("nodeSelector") or {}).items()):
        return False
    required = (((pod_spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    terms = required.get("nodeSelectorTerms") or []

    def holds(expr: Obj) -> bool:
        key, op, values = str(expr.get("key")), str(expr.get("operator")), expr.get("values") or []
        if op in ("In", "NotIn"):
            return (labels.get(key) in values) == (op == "In")
        return (key in labels) == (op == "Exists") if op in ("Exists", "DoesNotExist") else False

    return not terms or any(all(holds(e) for e in t.get("matchExpressions") or []) for t in terms)


def _gpu_pod(pod: Obj) -> bool:
    return any("nvidia.com/gpu" in ((c.get("resources") or {}).get("limits") or {})
               for c in (pod.get("spec") or {}).get("containers") or [])
