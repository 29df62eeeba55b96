"""What adopting an object of ours changes: the merge patch that takes the object the
server stored to the manifest, and the fields that differ where Kubernetes lets no update
change them.

:func:`~rl_lustre.kube.apply.apply_manifests` adopts a same-named object that carries our
labels with :func:`adoption_patch` (and logs what it touched, :func:`changed_fields`);
:func:`~rl_lustre.kube.apply.immutable_drift` reports the fields it cannot change. Offline:
nothing here sends a request.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Mapping
from typing import Any

__all__ = ["adoption_patch", "changed_fields"]

# The applier's logger, as before adoption had a module of its own.
logger = logging.getLogger("rl_lustre.kube.apply")

Obj = dict[str, Any]

# What an adoption may change; the rest of these specs is immutable after creation
# (API server validation), so a difference there is reported instead of patched.
_MUTABLE_SPEC: dict[str, frozenset[str] | None] = {
    "PersistentVolume": frozenset({"capacity", "mountOptions", "persistentVolumeReclaimPolicy"}),
    "PersistentVolumeClaim": frozenset({"resources"}),
    "RayCluster": None,  # all of it
    "DaemonSet": frozenset({"template", "updateStrategy", "minReadySeconds", "revisionHistoryLimit"}),
    # A Job's pod template (and selector, completion mode, ...) is immutable while it is not
    # suspended: a changed command or image is a new Job (see kube.apply.immutable_drift).
    "Job": frozenset(
        {
            "parallelism",
            "completions",
            "activeDeadlineSeconds",
            "backoffLimit",
            "maxFailedIndexes",
            "ttlSecondsAfterFinished",
            "suspend",
            "podReplacementPolicy",
        }
    ),
    # GKE refuses changes to a network that pods may be attached to.
    "GKENetworkParamSet": frozenset(),
    "Network": frozenset(),
    # A Deployment's selector is immutable (apps/v1).
    "Deployment": frozenset(
        {"replicas", "template", "strategy", "minReadySeconds", "revisionHistoryLimit", "progressDeadlineSeconds"}
    ),
}
# Kinds whose content is outside ``spec`` (the keeper's, rl_lustre.kube.keeper): their fields
# an adoption sets as the manifest says, and those it cannot change.
_TOP_FIELDS: dict[str, tuple[str, ...]] = {
    "ConfigMap": ("data",),
    "Role": ("rules",),
    "RoleBinding": ("subjects",),
    "ClusterRole": ("rules",),
    "ClusterRoleBinding": ("subjects",),
    "ServiceAccount": ("automountServiceAccountToken",),
}
_TOP_IMMUTABLE: dict[str, tuple[str, ...]] = {"RoleBinding": ("roleRef",), "ClusterRoleBinding": ("roleRef",)}


def _subset(want: Any, have: Any) -> bool:
    """Whether ``have`` (as the server stored it) already holds everything ``want`` asks for.

    Server defaults (fields we did not send) are ignored, and so is an empty string we
    sent that the server did not keep: built-in kinds drop empty ``omitempty`` fields
    (a PersistentVolume's ``storageClassName: ""`` is stored without it).
    """
    if want == "" and have is None:
        return True
    if isinstance(want, Mapping):
        return isinstance(have, Mapping) and all(_subset(v, have.get(k)) for k, v in want.items())
    if isinstance(want, list):
        return (
            isinstance(have, list)
            and len(want) == len(have)
            and all(_subset(w, h) for w, h in zip(want, have, strict=True))
        )
    return bool(want == have)


def _b64(value: Any) -> str:
    return base64.b64encode(str(value).encode()).decode()


def adoption_patch(kind: str, desired: Obj, existing: Obj) -> tuple[Obj, list[str]]:
    """``(merge patch, immutable fields that differ)`` taking ``existing`` to ``desired``.

    Examples:
        >>> old = {"kind": "PersistentVolumeClaim", "metadata": {"name": "c", "labels": {"a": "1"}},
        ...        "spec": {"resources": {"requests": {"storage": "9000Gi"}}, "volumeName": "v"}}
        >>> new = {**old, "spec": {"resources": {"requests": {"storage": "18000Gi"}}, "volumeName": "w"}}
        >>> adoption_patch("PersistentVolumeClaim", new, old)
        ({'spec': {'resources': {'requests': {'storage': '18000Gi'}}}}, ['spec.volumeName'])
    """
    patch: Obj = {}
    meta_patch = {}
    for field in ("labels", "annotations"):
        want = (desired.get("metadata") or {}).get(field)
        if want and not _subset(want, (existing.get("metadata") or {}).get(field) or {}):
            meta_patch[field] = want
    if meta_patch:
        patch["metadata"] = meta_patch
    drift: list[str] = []
    if kind == "Secret":
        want_data = dict(desired.get("data") or {})
        want_data.update({k: _b64(v) for k, v in (desired.get("stringData") or {}).items()})
        if want_data != {k: v for k, v in (existing.get("data") or {}).items() if k in want_data}:
            # Values go as stringData/data exactly as given; they are never logged.
            for field in ("data", "stringData"):
                if desired.get(field):
                    patch[field] = desired[field]
        if desired.get("type", "Opaque") != existing.get("type", "Opaque"):
            drift.append("type")
        return patch, drift
    for field in _TOP_FIELDS.get(kind, ()):
        want, have = desired.get(field), existing.get(field)
        if want is not None and want != have:
            if isinstance(want, Mapping) and isinstance(have, Mapping):
                # A merge patch: keys the manifest no longer has are removed (null).
                patch[field] = {**dict.fromkeys(set(have) - set(want)), **want}
            else:
                patch[field] = want
    drift += [field for field in _TOP_IMMUTABLE.get(kind, ()) if desired.get(field) != existing.get(field)]
    want_spec = desired.get("spec") or {}
    have_spec = existing.get("spec") or {}
    mutable = _MUTABLE_SPEC.get(kind)
    spec_patch = {}
    for field, value in want_spec.items():
        if _subset(value, have_spec.get(field)):
            continue
        if kind == "PersistentVolumeClaim" and field == "resources" and want_spec.get("storageClassName") == "":
            # A statically provisioned claim cannot be resized (the API server answers 403):
            # it stays bound as it is, and the volume's own capacity is what grows.
            logger.debug(
                "claim %s keeps its request: a static claim is not resized", (desired.get("metadata") or {}).get("name")
            )
            continue
        if mutable is None or field in mutable:
            spec_patch[field] = value
        else:
            drift.append(f"spec.{field}")
    if spec_patch:
        patch["spec"] = spec_patch
    return patch, drift


def changed_fields(patch: Mapping[str, Any]) -> list[str]:
    """``metadata.labels``, ``spec.workerGroupSpecs``, ``stringData``: what a patch touches."""
    fields = []
    for top, value in patch.items():
        if top in ("metadata", "spec") and isinstance(value, Mapping):
            fields += [f"{top}.{key}" for key in value]
        else:
            fields.append(top)
    return sorted(fields)
