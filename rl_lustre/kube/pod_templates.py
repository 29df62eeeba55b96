"""The hash each pod template of our RayClusters carries, and which pods run an older one.

KubeRay (v1.5, and later ones without ``spec.upgradeStrategy``) never replaces a running pod
when its group's template changes. So each group's pod template carries
:data:`TEMPLATE_HASH_ANNOTATION`, a hash of what makes its pods (:func:`stamp_templates`;
KubeRay copies template annotations onto the pods): :func:`outdated_pods` are the pods
made from an older template, :func:`rolled_out` says whether every group runs its current
one. :mod:`rl_lustre.kube.rollout` replaces the outdated pods. No remote call.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from .readiness import spec_worker_replicas

__all__ = ["HEAD_GROUP", "TEMPLATE_HASH_ANNOTATION", "group_of", "outdated_pods", "rolled_out", "stamp_templates"]

TEMPLATE_HASH_ANNOTATION = "rl-lustre/pod-template-hash"
HEAD_GROUP = "headgroup"  # the ray.io/group label KubeRay gives the head pod

Obj = dict[str, Any]


def _groups(rc: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any], int]]:
    """``(ray.io/group, group spec, pods wanted)`` of the head and each worker group."""
    spec = rc.get("spec") or {}
    groups: list[tuple[str, Mapping[str, Any], int]] = [(HEAD_GROUP, spec.get("headGroupSpec") or {}, 1)]
    for group in spec.get("workerGroupSpecs") or []:
        groups.append((str(group.get("groupName")), group, spec_worker_replicas({"workerGroupSpecs": [group]})))
    return groups


def _template_hash(rc: Mapping[str, Any], group: Mapping[str, Any]) -> str:
    template = json.loads(json.dumps(group.get("template") or {}))
    meta = template.get("metadata") or {}
    (meta.get("annotations") or {}).pop(TEMPLATE_HASH_ANNOTATION, None)
    # The template as it was before it was stamped (stamping again gives the same hash).
    if "annotations" in meta and not meta["annotations"]:
        del meta["annotations"]
    if "metadata" in template and not meta:
        del template["metadata"]
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
        >>> head = stamped["spec"]["headGroupSpec"]["template"]["metadata"]["annotations"][TEMPLATE_HASH_ANNOTATION]
        >>> again = stamp_templates(json.loads(json.dumps(stamped)))   # stamping again changes nothing
        >>> len(head), again == stamped
        (16, True)
    """
    for _, group, _ in _groups(rc):
        digest = _template_hash(rc, group)
        template = group["template"]
        template.setdefault("metadata", {}).setdefault("annotations", {})[TEMPLATE_HASH_ANNOTATION] = digest
    return rc


def _current(rc: Mapping[str, Any]) -> dict[str, str] | None:
    """Each group's current hash, as the stored RayCluster's templates carry it (None when
    they carry none: a RayCluster rl_lustre did not stamp is left as it is)."""
    hashes = {}
    for name, group, _ in _groups(rc):
        stamp = (((group.get("template") or {}).get("metadata") or {}).get("annotations") or {}).get(
            TEMPLATE_HASH_ANNOTATION
        )
        if stamp is None:
            return None
        hashes[name] = str(stamp)
    return hashes


def _live(pods: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [p for p in pods if not (p.get("metadata") or {}).get("deletionTimestamp")]


def group_of(pod: Mapping[str, Any]) -> str:
    return str(((pod.get("metadata") or {}).get("labels") or {}).get("ray.io/group"))


def _stamp_of(pod: Mapping[str, Any]) -> str | None:
    return ((pod.get("metadata") or {}).get("annotations") or {}).get(TEMPLATE_HASH_ANNOTATION)


def _ready(pod: Mapping[str, Any]) -> bool:
    status = pod.get("status") or {}
    return status.get("phase") == "Running" and any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or []
    )


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
    return [p for p in _live(pods) if group_of(p) in current and _stamp_of(p) != current[group_of(p)]]


def rolled_out(rc: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]) -> bool:
    """Whether every group of ``rc`` has its pods on its current template, Running and Ready."""
    current = _current(rc)
    if current is None:
        return True
    for name, _, wanted in _groups(rc):
        ready = [p for p in _live(pods) if group_of(p) == name and _stamp_of(p) == current[name] and _ready(p)]
        if len(ready) < wanted:
            return False
    return True
