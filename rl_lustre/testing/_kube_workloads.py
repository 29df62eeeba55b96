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
import json
import time
from collections.abc import Callable

from ..catalog import GKE_ACCELERATOR_LABEL, GKE_NODEPOOL_LABEL
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
            raise ApiError(
                422,
                "Invalid",
                f'DaemonSet.apps "{name}" is invalid: spec.template.metadata.labels: '
                "Invalid value: `selector` does not match template `labels`",
            )
        spec.setdefault("revisionHistoryLimit", 10)
        spec.setdefault(
            "updateStrategy", {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}}
        )
        obj["status"] = {
            "currentNumberScheduled": 0,
            "desiredNumberScheduled": 0,
            "numberMisscheduled": 0,
            "numberReady": 0,
        }
    elif kind == "Job":
        restart = (template.get("spec") or {}).get("restartPolicy")
        if restart not in ("Never", "OnFailure"):
            raise ApiError(
                422,
                "Invalid",
                f'Job.batch "{name}" is invalid: spec.template.spec.restartPolicy: '
                f'Unsupported value: "{restart}": supported values: "OnFailure", "Never"',
            )
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
        meta["labels"] = {
            **pod_labels,
            CONTROLLER_UID_LABEL: uid,
            JOB_NAME_LABEL: name,
            "controller-uid": uid,
            "job-name": name,
        }
        obj["status"] = {}


# What a Job update may not change (apiserver: batch validation ValidateJobSpecUpdate).
_JOB_IMMUTABLE = (
    "selector",
    "completionMode",
    "podFailurePolicy",
    "backoffLimitPerIndex",
    "managedBy",
    "successPolicy",
)


def job_update(current: Obj, new: Obj) -> None:
    """Refuse an update of a Job's immutable fields as the API server does: the pod
    template may change only while the Job is suspended, the selector and the completion
    and failure policies never."""
    name = current["metadata"]["name"]
    old_spec, new_spec = current.get("spec") or {}, new.get("spec") or {}
    changed = [f for f in _JOB_IMMUTABLE if old_spec.get(f) != new_spec.get(f)]
    if not old_spec.get("suspend") and old_spec.get("template") != new_spec.get("template"):
        changed.insert(0, "template")
    if changed:
        raise ApiError(
            422,
            "Invalid",
            f'Job.batch "{name}" is invalid: '
            + ", ".join(f"spec.{f}: Invalid value: {json.dumps(new_spec.get(f))}: field is immutable" for f in changed),
        )


class Workloads(Controller):
    """The node, DaemonSet and Job controllers; :meth:`step` runs one pass."""

    def __init__(self, store: Store, faults: KubeFaults, timings: KubeTimings, memory: Memory) -> None:
        super().__init__(store, faults, timings, memory)
        store.admission.update(dict.fromkeys(("DaemonSet", "Job"), server_defaults))
        store.update_rules["Job"] = job_update
        # (namespace, pod) -> log text, served by pods/<name>/log.
        self.logs: dict[tuple[str, str], str] = {}
        self._running_since: dict[str, float] = {}
        # Job uid -> when its last pod failed (the Job controller's pod failure backoff).
        self._failed_at: dict[str, float] = {}
        # (node uid, image) -> when its pull started; a node keeps what it pulled, and a new
        # node of the same name (a replacement after a preemption) starts with an empty disk.
        self._pulls: dict[tuple[str, str], float] = {}
        # node pool -> the images its nodes boot with (a GKE secondary boot disk).
        self.preloaded: dict[str, set[str]] = {}
        # Whether a real process runs the pod (then it ends when that does; see _kube_programs).
        self.external: Callable[[Obj], bool] = lambda pod: False

    def reset(self) -> None:
        self.logs.clear()
        self._running_since.clear()
        self._failed_at.clear()
        self._pulls.clear()
        self.preloaded.clear()

    # the kubelet's image store

    def pulled_at(self, pod: Obj) -> float | None:
        """When the images of ``pod`` were on its node (``None`` while a pull runs), starting
        the pulls the node lacks. Pods on one node share one pull per image, and a node keeps
        what it pulled, as the kubelet does; an image on the node's secondary boot disk
        takes ``timings.preloaded_pull``."""
        name = (pod.get("spec") or {}).get("nodeName") or ""
        found = self.store.get("Node", None, name)
        node = found["metadata"]["uid"] if found is not None else name
        preloaded = self.preloaded.get(labels_of(found).get(GKE_NODEPOOL_LABEL, "") if found else "", set())
        now = time.monotonic()
        done = 0.0
        for c in (pod.get("spec") or {}).get("containers") or []:
            image = c.get("image", "")
            took = self.timings.preloaded_pull if image in preloaded else self.timings.pull_time(image)
            end = self._pulls.setdefault((node, image), now) + took
            if end > now:
                return None
            done = max(done, end)
        return done

    # the scheduler's choice among registered nodes

    def pick_node(self, pod: Obj) -> tuple[str | None, str]:
        """``(node, "")``: the Node the scheduler puts ``pod`` on; ``(None, why)`` when Nodes
        are registered and none fits (taints, selector, allocatable: ``_kube_scheduler``);
        ``(None, "")`` when no Node is registered at all."""
        from ._kube_scheduler import place

        nodes = self.store.find("Node")
        if not nodes:
            return None, ""
        return place(pod, nodes, self.store.find("Pod"))

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
            # Room for anything (kwok's default for a Node it plays), and 8 GPUs on a GPU node.
            room = {"cpu": "1k", "memory": "1Ti", "ephemeral-storage": "1Pi", "pods": "110"}
            if GKE_ACCELERATOR_LABEL in labels:
                room["nvidia.com/gpu"] = "8"
            self.register_node(
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "metadata": {
                        "name": name,
                        "labels": {"kubernetes.io/hostname": name, GKE_NODEPOOL_LABEL: pool, **labels},
                    },
                    "spec": {},
                    "status": {"capacity": dict(room), "allocatable": dict(room)},
                }
            )
            names.append(name)
        return names

    def remove_nodes(self, pool: str) -> None:
        for node in self.store.find("Node", match=lambda n: labels_of(n).get(GKE_NODEPOOL_LABEL) == pool):
            removing_node(self, node)
            self.store.remove(node)

    # DaemonSet controller

    def _daemonset(self, ds: Obj) -> None:
        meta = ds["metadata"]
        ns = meta.get("namespace") or "default"
        template = ds["spec"].get("template") or {}
        nodes = [n for n in self.store.find("Node") if _fits(template.get("spec") or {}, n)]
        pods = [
            p
            for p in self.store.find("Pod", ns, lambda o: owned_by(o, meta["uid"]))
            if not p["metadata"].get("deletionTimestamp")
        ]
        on_node = {p["spec"].get("nodeName"): p for p in pods}
        node_names = {n["metadata"]["name"] for n in nodes}
        for node in sorted(node_names - set(on_node)):
            spec = copy.deepcopy(template.get("spec") or {})
            spec["nodeName"] = node
            spec.setdefault("restartPolicy", "Always")
            pod_name = f"{meta['name']}-{random_suffix()}"
            self.store.create(
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {
                        "name": pod_name,
                        "namespace": ns,
                        "labels": dict((template.get("metadata") or {}).get("labels") or {}),
                        "ownerReferences": [owner_reference(ds)],
                    },
                    "spec": spec,
                }
            )
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
        if any(
            c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
            for c in status.get("conditions") or []
        ):
            return
        pods = self.store.find("Pod", ns, lambda o: owned_by(o, meta["uid"]))
        phases = [(p.get("status") or {}).get("phase") for p in pods]
        succeeded, failed = phases.count("Succeeded"), phases.count("Failed")
        active = [
            p
            for p, ph in zip(pods, phases, strict=True)
            if ph not in _TERMINAL and not p["metadata"].get("deletionTimestamp")
        ]
        status.setdefault("startTime", now_rfc3339())
        status.update(succeeded=succeeded, failed=failed, active=len(active), ready=sum(map(pod_ready, active)))
        stamp = now_rfc3339()

        def conditions(types: tuple[str, str], reason: str, message: str) -> list[Obj]:
            # The Job controller sets an interim condition and the terminal one together.
            return [
                {
                    "type": t,
                    "status": "True",
                    "reason": reason,
                    "message": message,
                    "lastProbeTime": stamp,
                    "lastTransitionTime": stamp,
                }
                for t in types
            ]

        if succeeded >= int(spec.get("completions", 1)):
            status["conditions"] = conditions(
                ("SuccessCriteriaMet", "Complete"), "CompletionsReached", "Reached expected number of succeeded pods"
            )
            status["completionTime"] = stamp
            self.event(job, "Completed", "Job completed", component="job-controller")
        elif failed > int(spec.get("backoffLimit", 6)):
            status["conditions"] = conditions(
                ("FailureTarget", "Failed"), "BackoffLimitExceeded", "Job has reached the specified backoff limit"
            )
            self.event(
                job,
                "BackoffLimitExceeded",
                "Job has reached the specified backoff limit",
                warning=True,
                component="job-controller",
            )
        elif not active and self._backed_off(meta["uid"], failed):
            self._job_pod_create(job)
            status["active"] = 1
        if status != job.get("status"):
            self.store.update("Job", ns, meta["name"], lambda o: o.__setitem__("status", status))

    def _backed_off(self, job_uid: str, failed: int) -> bool:
        """Whether the backoff after the Job's ``failed``-th failed pod is over."""
        if not failed:
            return True
        since = self._failed_at.setdefault(job_uid, time.monotonic())
        wait = min(self.timings.job_backoff * 2 ** (failed - 1), 60 * self.timings.job_backoff)
        return time.monotonic() >= since + wait

    def _job_pod_create(self, job: Obj) -> None:
        meta = job["metadata"]
        ns = meta.get("namespace") or "default"
        template = copy.deepcopy(job["spec"].get("template") or {})
        pod_name = f"{meta['name']}-{random_suffix()}"
        self.store.create(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": pod_name,
                    "namespace": ns,
                    "labels": dict((template.get("metadata") or {}).get("labels") or {}),
                    "ownerReferences": [owner_reference(job)],
                },
                "spec": template.get("spec") or {},
            }
        )
        self.store.update("Pod", ns, pod_name, lambda o: o.__setitem__("status", {"phase": "Pending"}))
        self.event(job, "SuccessfulCreate", f"Created pod: {pod_name}", component="job-controller")

    def _job_pod(self, pod: Obj) -> None:
        """A running Job pod exits after ``timings.job_run``: 0, or 1 with the fault's message
        (unless a real process runs it: ``_kube_programs``)."""
        status = pod.get("status") or {}
        if status.get("phase") != "Running" or self.external(pod):
            return
        uid = pod["metadata"]["uid"]
        started = self._running_since.setdefault(uid, time.monotonic())
        image = (((pod.get("spec") or {}).get("containers") or [{}])[0]).get("image", "")
        if time.monotonic() - started < self.timings.job_runs.get(image, self.timings.job_run):
            return
        self._running_since.pop(uid, None)
        failure = self.faults.job_failure
        stamp = now_rfc3339()
        statuses = []
        for c in (pod.get("spec") or {}).get("containers") or []:
            terminated: Obj = {"exitCode": 0, "reason": "Completed", "startedAt": stamp, "finishedAt": stamp}
            if failure is not None:
                terminated.update(exitCode=1, reason="Error", message=failure)
            statuses.append(
                {
                    "name": c["name"],
                    "image": c.get("image", ""),
                    "imageID": f"sha256:{'0' * 64}",
                    "ready": False,
                    "restartCount": 0,
                    "started": False,
                    "state": {"terminated": terminated},
                }
            )
        phase = "Failed" if failure is not None else "Succeeded"
        job = self._job_of(pod)
        if failure is not None and job is not None:
            self._failed_at[job["metadata"]["uid"]] = time.monotonic()
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


# The tolerations the DaemonSet controller adds to every pod it makes.
_DAEMON_TOLERATIONS = [
    {"key": f"node.kubernetes.io/{k}", "operator": "Exists", "effect": e}
    for k, e in (
        ("not-ready", "NoExecute"),
        ("unreachable", "NoExecute"),
        ("disk-pressure", "NoSchedule"),
        ("memory-pressure", "NoSchedule"),
        ("pid-pressure", "NoSchedule"),
        ("unschedulable", "NoSchedule"),
    )
]


def removing_node(controller: Controller, node: Obj) -> None:
    """The node lifecycle controller's Event for a Node that is deleted."""
    name = node["metadata"]["name"]
    controller.event(
        node, "RemovingNode", f"Node {name} event: Removing Node {name} from Controller", component="node-controller"
    )


def _fits(pod_spec: Obj, node: Obj) -> bool:
    """Whether a DaemonSet's pod belongs on ``node``: its selector and required node
    affinity match, and it tolerates the node's taints (with the controller's own)."""
    from ._kube_scheduler import fits_node, untolerated

    spec = {**pod_spec, "tolerations": [*(pod_spec.get("tolerations") or []), *_DAEMON_TOLERATIONS]}
    return fits_node(pod_spec, labels_of(node)) and not untolerated(spec, node)
