"""A RayCluster's pods on its current pod templates: KubeRay does not roll them, we do.

KubeRay (v1.5, and later ones without ``spec.upgradeStrategy``) creates a RayCluster's pods
from its templates and never replaces a running pod when a template changes: after
``up()`` adopts a RayCluster whose image, environment or resources changed, the operator
reports it ready while every pod still runs the old template, and a job would run on the
old image. So each group's pod template carries :data:`TEMPLATE_HASH_ANNOTATION`, a hash of
what makes its pods (:func:`stamp_templates`; KubeRay copies template annotations onto the
pods), and :func:`roll_out` deletes the pods whose hash is not their group's current one
(KubeRay then creates them again from the current template), then waits until each group
has its pods on the current template, Running and Ready — what KubeRay's own
``upgradeStrategy: Recreate`` does where it exists. A worker group's change recreates its
workers only (a running job's supervisor recovers from the lost nodes); a change of the
head's template recreates the head too, which ends the jobs on it: both are logged as
warnings.

No remote call here but in :func:`roll_out`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import WaitTimeoutError
from .client import ResourceClient, translate_errors

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

__all__ = ["HEAD_GROUP", "TEMPLATE_HASH_ANNOTATION", "outdated_pods", "roll_out", "rolled_out", "stamp_templates"]

logger = logging.getLogger("rl_lustre.kube.rollout")

TEMPLATE_HASH_ANNOTATION = "rl-lustre/pod-template-hash"
HEAD_GROUP = "headgroup"  # the ray.io/group label KubeRay gives the head pod
_POLL = 0.25

Obj = dict[str, Any]


def _groups(rc: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any], int]]:
    """``(ray.io/group, group spec, pods wanted)`` of the head and each worker group."""
    from .apply import _spec_worker_replicas

    spec = rc.get("spec") or {}
    groups: list[tuple[str, Mapping[str, Any], int]] = [(HEAD_GROUP, spec.get("headGroupSpec") or {}, 1)]
    for group in spec.get("workerGroupSpecs") or []:
        groups.append((str(group.get("groupName")), group, _spec_worker_replicas({"workerGroupSpecs": [group]})))
    return groups


def _template_hash(rc: Mapping[str, Any], group: Mapping[str, Any]) -> str:
    template = json.loads(json.dumps(group.get("template") or {}))
    (template.get("metadata") or {}).get("annotations", {}).pop(TEMPLATE_HASH_ANNOTATION, None)
    made_of = {
        "template": template,
        # KubeRay builds the container's `ray start` from these.
        "rayStartParams": group.get("rayStartParams") or {},
        "rayVersion": (rc.get("spec") or {}).get("rayVersion"),
        "annotations": (rc.get("metadata") or {}).get("annotations") or {},
    }
    return hashlib.sha256(json.dumps(made_of, sort_keys=True).encode()).hexdigest()[:16]


def stamp_templates(rc: Obj) -> Obj:
    """Put :data:`TEMPLATE_HASH_ANNOTATION` on each group's pod template of ``rc`` (in place).

    Examples:
        >>> rc = {"spec": {"rayVersion": "2.46.0", "headGroupSpec": {"template": {"spec": {}}},
        ...                "workerGroupSpecs": [{"groupName": "w", "template": {"spec": {"containers": []}}}]}}
        >>> stamped = stamp_templates(rc)
        >>> len(stamped["spec"]["headGroupSpec"]["template"]["metadata"]["annotations"][TEMPLATE_HASH_ANNOTATION])
        16
    """
    for _, group, _ in _groups(rc):
        digest = _template_hash(rc, group)
        template = group["template"]  # type: ignore[index]
        template.setdefault("metadata", {}).setdefault("annotations", {})[TEMPLATE_HASH_ANNOTATION] = digest
    return rc


def _current(rc: Mapping[str, Any]) -> dict[str, str] | None:
    """Each group's current hash, as the stored RayCluster's templates carry it (None when
    they carry none: a RayCluster rl_lustre did not stamp is left as it is)."""
    hashes = {}
    for name, group, _ in _groups(rc):
        stamp = (((group.get("template") or {}).get("metadata") or {}).get("annotations") or {}).get(
            TEMPLATE_HASH_ANNOTATION)
        if stamp is None:
            return None
        hashes[name] = str(stamp)
    return hashes


def _live(pods: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [p for p in pods if not (p.get("metadata") or {}).get("deletionTimestamp")]


def _group_of(pod: Mapping[str, Any]) -> str:
    return str(((pod.get("metadata") or {}).get("labels") or {}).get("ray.io/group"))


def _stamp_of(pod: Mapping[str, Any]) -> str | None:
    return ((pod.get("metadata") or {}).get("annotations") or {}).get(TEMPLATE_HASH_ANNOTATION)


def _ready(pod: Mapping[str, Any]) -> bool:
    status = pod.get("status") or {}
    return status.get("phase") == "Running" and any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])


def outdated_pods(rc: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The live pods of ``rc`` made from an older template than their group's current one.

    Examples:
        >>> rc = stamp_templates({"spec": {"headGroupSpec": {"template": {"spec": {}}}}})
        >>> old = {"metadata": {"name": "h", "labels": {"ray.io/group": "headgroup"},
        ...                     "annotations": {TEMPLATE_HASH_ANNOTATION: "0123"}}}
        >>> [p["metadata"]["name"] for p in outdated_pods(rc, [old])]
        ['h']
    """
    current = _current(rc)
    if current is None:
        return []
    return [p for p in _live(pods) if _group_of(p) in current and _stamp_of(p) != current[_group_of(p)]]


def rolled_out(rc: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]) -> bool:
    """Whether every group of ``rc`` has its pods on its current template, Running and Ready."""
    current = _current(rc)
    if current is None:
        return True
    for name, _, wanted in _groups(rc):
        ready = [p for p in _live(pods) if _group_of(p) == name and _stamp_of(p) == current[name] and _ready(p)]
        if len(ready) < wanted:
            return False
    return True


def roll_out(
    api_client: ApiClient,
    rc: Mapping[str, Any],
    *,
    deadline: float,
    timeout: float,
    ready: Callable[[], Mapping[str, Any] | None],
    explain: Callable[[Any], Any] | None = None,
) -> Mapping[str, Any]:
    """Recreate the pods of ``rc`` that run an older template, then wait until every group
    runs its current one (see the module docstring).

    Args:
        api_client: a kubernetes ``ApiClient``.
        rc: the RayCluster as the server stores it (ready).
        deadline: ``time.monotonic()`` by which it must be done.
        timeout: the whole wait's length, for the error.
        ready: waits until the RayCluster is ready again and returns it.
        explain: turns the last state into a diagnosis for the timeout error.

    Returns:
        The RayCluster as last read.

    Raises:
        WaitTimeoutError: not rolled out by the deadline.
        KubernetesError: the API failed.
    """
    meta = rc.get("metadata") or {}
    name, ns = str(meta.get("name")), str(meta.get("namespace") or "default")
    pods_api = ResourceClient(api_client, "Pod", ns)
    deleted: set[str] = set()
    while True:
        with translate_errors(f"list the pods of RayCluster {ns}/{name}"):
            pods, _ = pods_api.list(label_selector=f"ray.io/cluster={name}")
        stale = [p for p in outdated_pods(rc, pods) if p["metadata"].get("uid") not in deleted]
        if stale:
            groups = sorted({_group_of(p) for p in stale})
            logger.warning(
                "RayCluster %s/%s: %d pod(s) of %s run an older pod template (KubeRay does not replace them): "
                "recreating %s%s", ns, name, len(stale), ", ".join(groups),
                ", ".join(str(p["metadata"]["name"]) for p in stale),
                "; the head goes too, ending the Ray jobs on it" if HEAD_GROUP in groups else "")
            for pod in stale:
                with translate_errors(f"delete {pods_api.describe(str(pod['metadata']['name']))}"):
                    pods_api.delete(str(pod["metadata"]["name"]))
                deleted.add(str(pod["metadata"].get("uid")))
        elif rolled_out(rc, pods):
            return rc
        if time.monotonic() > deadline:
            raise WaitTimeoutError(f"RayCluster {ns}/{name} to run its current pod templates", timeout,
                                   explain(rc) if explain is not None else "pods on an older template")
        time.sleep(_POLL)
        rc = ready() or rc
