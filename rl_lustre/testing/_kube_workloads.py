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
from collections.abc import Callable
from typing import Any

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


class Workloads:
    """The node, DaemonSet and Job controllers; :meth:`step` runs one pass."""

    def __init__(self, store: Store, faults: Any, timings: Any, event: Callable[..., None]) -> None:
        self.store = store
        self.faults = faults
        self.timings = timings
        self.event = event
        # (namespace, pod) -> log text, served by pods/<name>/log.
        self.logs: dict[tuple[str, str], str] = {}
        self._running_since: dict[str, float] = {}

    def reset(self) -> None:
        self.logs.clear()
        self._running_since.clear()

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
                                                      "cloud.google.com/gke-nodepool": pool, **labels}},
                "spec": {},
                "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                           "lastTransitionTime": now_rfc3339()}]},
            })
            names.append(name)
        return names

    def remove_nodes(self, pool: str) -> None:
        for node in self.store.find("Node", match=lambda n: labels_of(n).get("cloud.google.com/gke-nodepool") == pool):
            self.store.remove(node)

    # DaemonSet controller

    def _daemonset(self, ds: Obj) -> None:
        meta = ds["metadata"]
        ns = meta.get("namespace") or "default"
        template = ds["spec"].get("template") or {}
        selector = (template.get("spec") or {}).get("nodeSelector") or {}
        nodes = [n for n in self.store.find("Node")
                 if all(labels_of(n).get(k) == v for k, v in selector.items())]
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
        ready = sum(1 for p in pods if p["spec"].get("nodeName") in node_names and _ready(p))
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
        status.update(succeeded=succeeded, failed=failed, active=len(active), ready=sum(map(_ready, active)))
        stamp = now_rfc3339()
        if succeeded >= int(spec.get("completions", 1)):
            status["conditions"] = [
                {"type": "SuccessCriteriaMet", "status": "True", "reason": "CompletionsReached",
                 "message": "Reached expected number of succeeded pods", "lastProbeTime": stamp,
                 "lastTransitionTime": stamp},
                {"type": "Complete", "status": "True", "reason": "CompletionsReached",
                 "message": "Reached expected number of succeeded pods", "lastProbeTime": stamp,
                 "lastTransitionTime": stamp},
            ]
            status["completionTime"] = stamp
            self.event(job, "Completed", "Job completed", component="job-controller")
        elif failed > int(spec.get("backoffLimit", 6)):
            status["conditions"] = [
                {"type": "FailureTarget", "status": "True", "reason": "BackoffLimitExceeded",
                 "message": "Job has reached the specified backoff limit", "lastProbeTime": stamp,
                 "lastTransitionTime": stamp},
                {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
                 "message": "Job has reached the specified backoff limit", "lastProbeTime": stamp,
                 "lastTransitionTime": stamp},
            ]
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


def _ready(pod: Obj) -> bool:
    status = pod.get("status") or {}
    return status.get("phase") == "Running" and any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or []
    )
