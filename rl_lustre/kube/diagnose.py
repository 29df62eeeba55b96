"""Why a RayCluster's pods do not come up, in words, from pod status and events.

:func:`diagnose` reads the RayCluster, its pods (``ray.io/cluster=<name>``), the
PersistentVolumeClaims they mount and the namespace's events, and names each problem
it recognises with advice: image pull failures, pods that cannot be scheduled
(no free ``nvidia.com/gpu``, Spot capacity exhausted, no node matching the selector,
untolerated taints), unbound claims, crash loops with the last termination message,
and a missing KubeRay operator. :func:`explain_pod` and :func:`explain_claim` do the
same for objects already in hand, without remote calls; :func:`pod_problem` says in one
line why a pod of the start-up helpers (pre-pull, prefetch) cannot run, and whether
waiting could help.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from ..catalog import GPU_RESOURCE
from .client import ResourceClient, translate_errors

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

__all__ = ["Diagnosis", "Problem", "diagnose", "explain_claim", "explain_pod", "pod_problem"]

logger = logging.getLogger("rl_lustre.kube.diagnose")

Obj = Mapping[str, Any]
_IMAGE_PULL = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull")
# Waiting reasons that no amount of waiting fixes.
_HOPELESS = ("InvalidImageName", "ErrImageNeverPull", "CreateContainerConfigError")
_MISSING_IMAGE = ("not found", "manifest unknown", "repository does not exist")
_STOCKOUT_MARKERS = (
    "out of resources",
    "resource_pool_exhausted",
    "stockout",
    "zone_resource_pool_exhausted",
    "does not have enough resources",
)


@attrs.frozen
class Problem:
    """One reason something is not ready.

    Attributes:
        reason: a short code: ``ImagePull``, ``InsufficientGPU``, ``SpotCapacity``,
            ``NodeSelector``, ``Taint``, ``Unschedulable``, ``ClaimUnbound``,
            ``CrashLoop``, ``ContainerWaiting``, ``NotReady``, ``NoPods``, ``ReplicaFailure``.
        object: the object it concerns (``Pod default/x-head-abcde``).
        message: what is wrong and what to do about it.
    """

    reason: str
    object: str
    message: str

    def __str__(self) -> str:
        return f"{self.object}: {self.message}"


@attrs.frozen(repr=False)
class Diagnosis:
    """What :func:`diagnose` found: a one-line summary and the problems, worst first.

    Its ``repr`` is its readable text, so a :class:`~rl_lustre.errors.WaitTimeoutError`
    carrying it as ``last_state`` explains itself.
    """

    summary: str
    problems: tuple[Problem, ...] = ()

    def reasons(self) -> set[str]:
        """The problem codes found."""
        return {p.reason for p in self.problems}

    def __str__(self) -> str:
        lines = [self.summary]
        for p in self.problems:
            first, *rest = str(p).splitlines() or [""]
            lines.append(f"  - {first}")
            lines += [f"      {line}" for line in rest]
        return "\n".join(lines)

    __repr__ = __str__


def _name(obj: Obj) -> str:
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    return f"{obj.get('kind', '?')} {ns}/{meta.get('name')}" if ns else f"{obj.get('kind', '?')} {meta.get('name')}"


def _events_for(obj: Obj, events: Iterable[Obj]) -> list[Obj]:
    meta = obj.get("metadata") or {}
    uid, name, kind = meta.get("uid"), meta.get("name"), obj.get("kind")
    found = []
    for ev in events:
        involved = ev.get("involvedObject") or ev.get("regarding") or {}
        if uid and involved.get("uid"):
            # A same-named object from before (a replaced pod) has another uid.
            if involved["uid"] == uid:
                found.append(ev)
        elif involved.get("name") == name and involved.get("kind") == kind:
            found.append(ev)
    return sorted(found, key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""))


def _unschedulable(obj_name: str, message: str, pod: Obj, events: Sequence[Obj]) -> Problem:
    text = message.lower()
    autoscaler = [
        str(e.get("message") or "") for e in events if e.get("reason") in ("FailedScaleUp", "NotTriggerScaleUp")
    ]
    scale_text = " ".join(autoscaler).lower()
    selector = ((pod.get("spec") or {}).get("nodeSelector")) or {}
    if any(marker in scale_text or marker in text for marker in _STOCKOUT_MARKERS):
        detail = next((m for m in autoscaler if any(k in m.lower() for k in _STOCKOUT_MARKERS)), message)
        return Problem(
            "SpotCapacity",
            obj_name,
            f"no GPU node can be added: {detail} Spot (or on-demand) capacity for this GPU type is exhausted "
            "in the zone; wait and retry, try another zone, or use a reservation (spot=False).",
        )
    if f"insufficient {GPU_RESOURCE}" in text:
        return Problem(
            "InsufficientGPU",
            obj_name,
            f"no node has a free {GPU_RESOURCE} ({message}). The GPU pool may still be scaling up, have fewer "
            "nodes than the worker replicas, or its GPUs are taken by other pods.",
        )
    if "unbound immediate persistentvolumeclaims" in text or "persistentvolumeclaim" in text:
        return Problem(
            "ClaimUnbound",
            obj_name,
            f"its PersistentVolumeClaim is not bound ({message}); see the claim's own problem.",
        )
    if "node affinity/selector" in text:
        shown = ", ".join(f"{k}={v}" for k, v in sorted(selector.items())) or "its node affinity"
        hint = f" The cluster autoscaler says: {autoscaler[-1].rstrip('.')}." if autoscaler else ""
        return Problem(
            "NodeSelector",
            obj_name,
            f"no node matches {shown} ({message}).{hint} Does a node pool with these labels exist "
            "(accelerator type, Spot, pool name), and may it scale up?",
        )
    if "untolerated taint" in text or "had taint" in text:
        return Problem(
            "Taint",
            obj_name,
            f"the only nodes have taints the pod does not tolerate ({message}).",
        )
    return Problem("Unschedulable", obj_name, f"cannot be scheduled: {message}")


def explain_pod(pod: Obj, events: Iterable[Obj] = ()) -> list[Problem]:
    """The problems of one pod, from its status and its events (no remote call).

    Examples:
        >>> pod = {"kind": "Pod", "metadata": {"name": "p", "namespace": "ns"},
        ...        "status": {"phase": "Pending", "containerStatuses": [{"name": "ray-head",
        ...        "image": "repo/img:bad", "state": {"waiting": {"reason": "ImagePullBackOff",
        ...        "message": 'Back-off pulling image "repo/img:bad"'}}}]}}
        >>> [p.reason for p in explain_pod(pod)]
        ['ImagePull']
    """
    name = _name(pod)
    own_events = _events_for(pod, events)
    status = pod.get("status") or {}
    problems: list[Problem] = []
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return [Problem("NotReady", name, "is being deleted")]
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            message = str(cond.get("message") or cond.get("reason") or "")
            failed = [e for e in own_events if e.get("reason") == "FailedScheduling"]
            if failed and not message:
                message = str(failed[-1].get("message") or "")
            problems.append(_unschedulable(name, message, pod, own_events))
    if not problems:
        for e in own_events:
            if e.get("reason") == "FailedScheduling":
                problems.append(_unschedulable(name, str(e.get("message") or ""), pod, own_events))
                break
    statuses = list(status.get("initContainerStatuses") or []) + list(status.get("containerStatuses") or [])
    for cs in statuses:
        waiting = (cs.get("state") or {}).get("waiting") or {}
        reason = waiting.get("reason")
        container = cs.get("name", "?")
        if reason in _IMAGE_PULL:
            image = cs.get("image") or "?"
            pull_errors = [
                str(e.get("message"))
                for e in own_events
                if e.get("reason") == "Failed" and "pull" in str(e.get("message", "")).lower()
            ]
            detail = pull_errors[-1] if pull_errors else waiting.get("message") or reason
            problems.append(
                Problem(
                    "ImagePull",
                    name,
                    f"container {container} cannot pull image {image!r} ({reason}): {detail}. Check the image name "
                    "and tag, and that the nodes' service account may read the registry.",
                )
            )
        elif reason == "CrashLoopBackOff":
            last = (cs.get("lastState") or {}).get("terminated") or {}
            bits = [f"exit code {last.get('exitCode')}"] if last.get("exitCode") is not None else []
            if last.get("reason"):
                bits.append(str(last["reason"]))
            tail = f"; last termination: {', '.join(bits)}" if bits else ""
            msg = f": {str(last['message']).strip()}" if last.get("message") else ""
            problems.append(
                Problem(
                    "CrashLoop",
                    name,
                    f"container {container} keeps crashing (CrashLoopBackOff, {cs.get('restartCount', 0)} restarts)"
                    f"{tail}{msg}",
                )
            )
        elif reason and reason not in ("ContainerCreating", "PodInitializing"):
            problems.append(
                Problem(
                    "ContainerWaiting",
                    name,
                    f"container {container} is waiting: {reason}: {waiting.get('message') or ''}".rstrip(": "),
                )
            )
    if not problems and status.get("phase") != "Succeeded":
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
        if not ready:
            unhealthy = [str(e.get("message")) for e in own_events if e.get("reason") == "Unhealthy"]
            detail = f": {unhealthy[-1]}" if unhealthy else ""
            problems.append(
                Problem("NotReady", name, f"is {status.get('phase') or 'Pending'} and not ready yet{detail}")
            )
    return problems


def pod_problem(pod: Mapping[str, Any]) -> tuple[str, bool] | None:
    """``(why, hopeless)`` when a pod cannot run or has failed, from its status.

    ``hopeless`` is True when waiting cannot help (an image that does not exist, a
    container that cannot be configured, a container that exited non-zero).

    Examples:
        >>> pod_problem({"metadata": {"name": "p"}, "status": {"phase": "Failed", "containerStatuses": [
        ...     {"name": "prefetch", "state": {"terminated": {"exitCode": 1, "reason": "Error",
        ...                                                    "message": "401 Unauthorized"}}}]}})
        ('pod p: container prefetch exited 1 (Error): 401 Unauthorized', True)
    """
    name = (pod.get("metadata") or {}).get("name", "?")
    status = pod.get("status") or {}
    for c in status.get("containerStatuses") or []:
        state = c.get("state") or {}
        done = state.get("terminated")
        if done and done.get("exitCode", 0) != 0:
            message = " ".join(str(done.get("message") or "").split())
            return (
                f"pod {name}: container {c.get('name')} exited {done.get('exitCode')} "
                f"({done.get('reason') or 'Error'})" + (f": {message[-500:]}" if message else ""),
                True,
            )
        waiting = state.get("waiting")
        if waiting and waiting.get("reason") not in (None, "ContainerCreating", "PodInitializing"):
            message = str(waiting.get("message") or "")
            hopeless = waiting["reason"] in _HOPELESS or (
                waiting["reason"] in ("ErrImagePull", "ImagePullBackOff") and any(m in message for m in _MISSING_IMAGE)
            )
            return f"pod {name}: {waiting['reason']}" + (f": {message}" if message else ""), hopeless
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            return f"pod {name}: {cond.get('reason', 'Unschedulable')}: {cond.get('message', '')}", False
    return None


def explain_claim(claim: Obj, events: Iterable[Obj] = (), *, volume_exists: bool | None = None) -> list[Problem]:
    """The problems of a PersistentVolumeClaim that is not Bound (no remote call).

    Examples:
        >>> pvc = {"kind": "PersistentVolumeClaim", "metadata": {"name": "c", "namespace": "ns"},
        ...        "spec": {"volumeName": "pv"}, "status": {"phase": "Pending"}}
        >>> explain_claim(pvc, volume_exists=False)[0].reason
        'ClaimUnbound'
    """
    phase = (claim.get("status") or {}).get("phase") or "Pending"
    if phase == "Bound":
        return []
    name = _name(claim)
    volume = (claim.get("spec") or {}).get("volumeName")
    warnings = [
        f"{e.get('reason')}: {e.get('message')}" for e in _events_for(claim, events) if e.get("type") == "Warning"
    ]
    parts = [f"is {phase}, not Bound"]
    if volume and volume_exists is False:
        parts.append(f"its PersistentVolume {volume!r} does not exist")
    elif volume:
        parts.append(f"it asks for PersistentVolume {volume!r}")
    if warnings:
        parts.append("events: " + "; ".join(dict.fromkeys(warnings)))
    parts.append(
        "pods mounting it cannot be scheduled until it binds "
        "(check storageClassName, accessModes and capacity against the volume)"
    )
    return [Problem("ClaimUnbound", name, "; ".join(parts))]


def _condition_summary(rc: Obj) -> str:
    status = rc.get("status") or {}
    conds = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
    bits = [f"state={status.get('state')!r}"]
    for ctype in ("HeadPodReady", "RayClusterProvisioned"):
        if ctype in conds:
            bits.append(f"{ctype}={conds[ctype]}")
    if "desiredWorkerReplicas" in status:
        bits.append(f"workers ready {status.get('readyWorkerReplicas', 0)}/{status['desiredWorkerReplicas']}")
    return ", ".join(bits)


def _replica_failure(rc: Obj) -> list[Problem]:
    """KubeRay's ``ReplicaFailure`` condition: the API server refused a pod it creates (a
    ResourceQuota, an admission webhook, a LimitRange).

    Examples:
        >>> message = 'pods "w" is forbidden: exceeded quota: q, requested: pods=1, used: pods=2, limited: pods=2'
        >>> rc = {"metadata": {"name": "demo", "namespace": "default"}, "status": {"conditions": [
        ...     {"type": "ReplicaFailure", "status": "True", "reason": "FailedCreateWorkerPod", "message": message}]}}
        >>> print(_replica_failure(rc)[0])  # doctest: +NORMALIZE_WHITESPACE
        RayCluster default/demo: KubeRay cannot create its pods (FailedCreateWorkerPod): pods "w" is forbidden:
        exceeded quota: q, requested: pods=1, used: pods=2, limited: pods=2. A ResourceQuota of namespace
        default limits it: raise the quota (kubectl describe quota -n default) or ask for fewer nodes.
    """
    meta = rc.get("metadata") or {}
    ns = meta.get("namespace") or "default"
    found = [
        c
        for c in (rc.get("status") or {}).get("conditions") or []
        if c.get("type") == "ReplicaFailure" and c.get("status") == "True"
    ]
    problems = []
    for cond in found:
        message = str(cond.get("message") or "").strip().replace("\n", ": ")
        advice = (
            f" A ResourceQuota of namespace {ns} limits it: raise the quota (kubectl describe quota -n {ns}) "
            "or ask for fewer nodes."
            if "exceeded quota" in message
            else ""
        )
        problems.append(
            Problem(
                "ReplicaFailure",
                f"RayCluster {ns}/{meta.get('name')}",
                f"KubeRay cannot create its pods ({cond.get('reason')}): {message}.{advice}",
            )
        )
    return problems


def diagnose(
    api_client: ApiClient,
    *,
    namespace: str,
    raycluster: str | None = None,
    claims: Sequence[str] = (),
) -> Diagnosis:
    """Read the cluster and say why the RayCluster or claims are not ready.

    Examples:
        >>> d = diagnose(api, namespace="default", raycluster="demo", claims=["lustre-pvc"])  # doctest: +SKIP
        >>> print(d)                                                                            # doctest: +SKIP
        RayCluster default/demo: state=None, HeadPodReady=True, RayClusterProvisioned=False; 1/3 pods ready
          - Pod default/demo-gpu-workers-worker-x2f4k: no node has a free nvidia.com/gpu (...)

    Args:
        api_client: a kubernetes ``ApiClient``.
        namespace: the namespace of the RayCluster and claims.
        raycluster: the RayCluster's name.
        claims: PersistentVolumeClaims to check.

    Raises:
        KubernetesError: reading the cluster failed.
    """
    with translate_errors(f"diagnose namespace {namespace}"):
        events, _ = ResourceClient(api_client, "Event", namespace).list()
        problems: list[Problem] = []
        summary_bits: list[str] = []
        for claim_name in claims:
            claim = ResourceClient(api_client, "PersistentVolumeClaim", namespace).get(claim_name)
            if claim is None:
                problems.append(
                    Problem("ClaimUnbound", f"PersistentVolumeClaim {namespace}/{claim_name}", "does not exist")
                )
                continue
            volume = (claim.get("spec") or {}).get("volumeName")
            exists = None
            if volume and (claim.get("status") or {}).get("phase") != "Bound":
                exists = ResourceClient(api_client, "PersistentVolume").get(volume) is not None
            claim.setdefault("kind", "PersistentVolumeClaim")
            problems += explain_claim(claim, events, volume_exists=exists)
        if raycluster is not None:
            rc = ResourceClient(api_client, "RayCluster", namespace).get(raycluster)
            pods, _ = ResourceClient(api_client, "Pod", namespace).list(label_selector=f"ray.io/cluster={raycluster}")
            if rc is None:
                summary_bits.append(f"RayCluster {namespace}/{raycluster} does not exist")
            else:
                ready = sum(1 for p in pods if not explain_pod(p, ()))
                summary_bits.append(
                    f"RayCluster {namespace}/{raycluster}: {_condition_summary(rc)}; {ready}/{len(pods)} pods ready"
                )
                problems += _replica_failure(rc)
                if not pods:
                    rc_events = [
                        f"{e.get('reason')}: {e.get('message')}"
                        for e in _events_for(rc, events)
                        if e.get("type") == "Warning"
                    ]
                    detail = f" Its events: {'; '.join(rc_events)}" if rc_events else ""
                    problems.append(
                        Problem(
                            "NoPods",
                            f"RayCluster {namespace}/{raycluster}",
                            "has no pods: is the KubeRay operator (the GKE Ray add-on) installed and running?" + detail,
                        )
                    )
            for pod in pods:
                problems += explain_pod(pod, events)
    if not summary_bits:
        summary_bits.append(f"namespace {namespace}")
    # Root causes first: a claim that does not bind explains the pods that wait for it.
    order = [
        "ClaimUnbound",
        "ReplicaFailure",
        "ImagePull",
        "SpotCapacity",
        "InsufficientGPU",
        "NodeSelector",
        "Taint",
        "CrashLoop",
        "ContainerWaiting",
        "Unschedulable",
        "NoPods",
        "NotReady",
    ]
    problems.sort(key=lambda p: (order.index(p.reason) if p.reason in order else len(order), p.object))
    diagnosis = Diagnosis("; ".join(summary_bits), tuple(_dedupe(problems)))
    logger.debug("diagnosis: %s", diagnosis)
    return diagnosis


def _dedupe(problems: Iterable[Problem]) -> list[Problem]:
    """Many workers failing the same way read better as one line with a count."""
    groups: dict[tuple[str, str], list[Problem]] = {}
    for p in problems:
        key = (p.reason, _generic(p))
        groups.setdefault(key, []).append(p)
    out = []
    for same in groups.values():
        first = same[0]
        if len(same) == 1:
            out.append(first)
        else:
            out.append(Problem(first.reason, f"{first.object} (and {len(same) - 1} more like it)", first.message))
    return out


def _generic(p: Problem) -> str:
    """The message with the object's own name taken out."""
    pod_name = p.object.rsplit("/", 1)[-1]
    return p.message.replace(pod_name, "<pod>")
