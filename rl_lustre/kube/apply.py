"""Create or adopt a deployment's Kubernetes objects, watch them become ready, delete them.

- :func:`apply_manifests` creates each manifest (PersistentVolume, PersistentVolumeClaim,
  Secret through ``CoreV1Api``; the ``ray.io/v1`` RayCluster through
  ``CustomObjectsApi``). A same-named object that carries our labels
  (``managed-by=rl-lustre``, ``rl-lustre-deployment=<name>``) is adopted and merge-patched
  to the desired spec where the API allows it (:mod:`~rl_lustre.kube.adoption`); one
  without them raises :class:`~rl_lustre.errors.OwnershipError` and is left alone.
- :func:`wait_ready` watches (``resourceVersion`` + ``timeoutSeconds``, listing again on
  410 Gone) until the claims are Bound and the RayCluster reports ``HeadPodReady`` and
  ``RayClusterProvisioned`` (or ``status.state == "ready"`` on older KubeRay). At the
  deadline it raises :class:`~rl_lustre.errors.WaitTimeoutError` whose ``last_state``
  is a :class:`~rl_lustre.kube.diagnose.Diagnosis` saying why.
- :func:`delete_manifests` and :func:`delete_deployment` delete in reverse order, only
  objects with our labels, and wait until each is gone.

One INFO log line per remote change; DEBUG for watch events.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

import attrs

from ..catalog import LABEL_DEPLOYMENT, LABEL_MANAGED_BY, MANAGED_BY, ownership_labels
from ..errors import ConfigError, KubernetesError, NotReadyError, OwnershipError, WaitTimeoutError
from .adoption import adoption_patch, changed_fields
from .client import KINDS, ResourceClient, WatchExpired, translate_errors
from .diagnose import Diagnosis, diagnose
from .readiness import claim_bound, raycluster_ready

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

__all__ = [
    "Applied",
    "apply_manifests",
    "delete_deployment",
    "delete_manifests",
    "immutable_drift",
    "is_owned",
    "raycluster_ready",
    "wait_ready",
]

logger = logging.getLogger("rl_lustre.kube.apply")

Obj = dict[str, Any]
_PENDING_ANNOTATION = "rl-lustre/mount-point-pending"
# Deletion order when collecting by labels: dependents first.
_DELETE_ORDER = (
    # The keeper first: nothing may resubmit a run once teardown began.
    "Deployment",
    "Job",
    "DaemonSet",
    "RayCluster",
    "ComputeClass",
    "Secret",
    "PersistentVolumeClaim",
    "PersistentVolume",
    "Network",
    "GKENetworkParamSet",
    "ConfigMap",
    "ClusterRoleBinding",
    "ClusterRole",
    "RoleBinding",
    "Role",
    "ServiceAccount",
)
# Kinds a cluster may lack (no KubeRay add-on, no multi-networking, a GKE older than
# ComputeClasses): none of ours then.
_OPTIONAL_KINDS = frozenset({"RayCluster", "GKENetworkParamSet", "Network", "ComputeClass"})
_WATCH_CHUNK = 60.0
_OWNS_PODS = frozenset({"RayCluster", "Job", "DaemonSet", "Deployment"})


@attrs.frozen
class Applied:
    """The outcome of applying one manifest.

    Attributes:
        kind: the object's kind.
        namespace: its namespace (None when cluster-scoped).
        name: its name.
        action: ``created``, ``adopted`` (existed with our labels and was patched) or
            ``unchanged`` (existed with our labels and already matched).
        object: the object as stored by the server.
    """

    kind: str
    namespace: str | None
    name: str
    action: Literal["created", "adopted", "unchanged"]
    object: Obj = attrs.field(repr=False, eq=False)


def is_owned(obj: Mapping[str, Any], deployment: str) -> bool:
    """Whether ``obj`` carries the labels of ``deployment``."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return labels.get(LABEL_MANAGED_BY) == MANAGED_BY and labels.get(LABEL_DEPLOYMENT) == deployment


def _target(manifest: Mapping[str, Any], namespace: str | None) -> tuple[str, str | None, str]:
    kind = manifest.get("kind")
    if kind not in KINDS:
        raise ConfigError("manifest", "kind", kind, f"must be one of {', '.join(sorted(KINDS))}")
    meta = manifest.get("metadata") or {}
    name = meta.get("name")
    if not name:
        raise ConfigError("manifest", "metadata.name", name, "every manifest needs a name")
    ns = (meta.get("namespace") or namespace or "default") if KINDS[kind].namespaced else None
    return str(kind), ns, str(name)


def _desired(manifest: Mapping[str, Any], deployment: str, ns: str | None) -> Obj:
    body: Obj = dict(manifest)
    meta = dict(body.get("metadata") or {})
    meta["labels"] = {**(meta.get("labels") or {}), **ownership_labels(deployment)}
    if ns is not None:
        meta["namespace"] = ns
    body["metadata"] = meta
    return body


def immutable_drift(manifest: Mapping[str, Any], existing: Mapping[str, Any], *, deployment: str) -> list[str]:
    """The fields of ``existing`` that differ from ``manifest`` and that the API server does
    not let an update change (``spec.template`` of a Job): adopting it would fail, so an
    object of ours with such a difference is replaced, or reported.

    Examples:
        >>> job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
        ...        "spec": {"backoffLimit": 2, "template": {"spec": {"containers": [{"name": "c", "image": "a"}]}}}}
        >>> containers = [{"name": "c", "image": "b"}]
        >>> newer = {**job, "spec": {"backoffLimit": 3, "template": {"spec": {"containers": containers}}}}
        >>> immutable_drift(newer, job, deployment="d")
        ['spec.template']
    """
    kind, ns, _ = _target(manifest, None)
    return adoption_patch(kind, _desired(manifest, deployment, ns), dict(existing))[1]


def apply_manifests(
    api_client: ApiClient,
    manifests: Sequence[Mapping[str, Any]],
    *,
    deployment: str,
    namespace: str | None = None,
    timeout: float = 120.0,
) -> list[Applied]:
    """Create each manifest, or adopt it when it exists with our labels.

    Manifests are applied in order (PV, PVC, Secret, RayCluster as
    :func:`~rl_lustre.kube.manifests.build_manifests` returns them). Our ownership
    labels are added to each. An object being deleted is waited for, then created
    again.

    Examples:
        >>> from rl_lustre.kube.manifests import build_manifests        # doctest: +SKIP
        >>> applied = apply_manifests(api, build_manifests(cluster, secret_values=values, redact=False),
        ...                           deployment=cluster.name)            # doctest: +SKIP
        >>> [(a.kind, a.action) for a in applied]                         # doctest: +SKIP
        [('PersistentVolume', 'created'), ('PersistentVolumeClaim', 'created'), ...]

    Args:
        api_client: a kubernetes ``ApiClient``.
        manifests: the objects, as plain dicts.
        deployment: the deployment name our labels carry.
        namespace: for namespaced manifests that name none (default ``default``).
        timeout: how long to wait for a same-named object that is being deleted.

    Raises:
        NotReadyError: a PersistentVolume still has a placeholder Lustre address (no
            request is sent).
        ConfigError: a manifest of a kind this module does not handle, or without a name.
        OwnershipError: a same-named object exists without our labels.
        KubernetesError: the API refused a request, or an immutable field of an
            adopted object differs from the manifest.
    """
    from .schema import NETWORKING_API, validate_compute_class, validate_networking

    targets = [_target(m, namespace) for m in manifests]
    for manifest, (kind, _, name) in zip(manifests, targets, strict=True):
        if manifest.get("apiVersion") == NETWORKING_API:
            validate_networking(manifest)
        if kind == "ComputeClass":
            validate_compute_class(manifest)
        annotations = (manifest.get("metadata") or {}).get("annotations") or {}
        if kind == "PersistentVolume" and _PENDING_ANNOTATION in annotations:
            raise NotReadyError(
                f"PersistentVolume {name} has no Lustre address yet ({annotations[_PENDING_ANNOTATION]}); "
                "create() or refresh() the LustreVolume, then build the manifests again"
            )
    applied = []
    for manifest, (kind, ns, name) in zip(manifests, targets, strict=True):
        applied.append(_apply_one(api_client, _desired(manifest, deployment, ns), kind, ns, name, deployment, timeout))
    return applied


def _apply_one(
    api_client: ApiClient, desired: Obj, kind: str, ns: str | None, name: str, deployment: str, timeout: float
) -> Applied:
    from kubernetes.client.exceptions import ApiException

    res = ResourceClient(api_client, kind, ns)
    what = res.describe(name)
    deadline = time.monotonic() + timeout
    while True:
        with translate_errors(f"create {what}"):
            try:
                created = res.create(desired)
            except ApiException as exc:
                if exc.status == 404 and kind == "RayCluster":
                    raise KubernetesError(
                        f"create {what}: the API server does not know ray.io/v1 RayCluster: is the KubeRay "
                        "operator installed (the GKE Ray add-on, --addons=RayOperator)?"
                    ) from exc
                _refused_fields(exc, f"create {what}", kind)
                if exc.status != 409:
                    raise
            else:
                logger.info("created %s", what)
                return Applied(kind, ns, name, "created", created)
            existing = res.get(name)
        if existing is None:
            continue  # deleted between our create and get: create again
        if not is_owned(existing, deployment):
            labels = (existing.get("metadata") or {}).get("labels") or {}
            theirs = {k: labels[k] for k in (LABEL_MANAGED_BY, LABEL_DEPLOYMENT) if k in labels}
            raise OwnershipError(
                f"{what} already exists and is not ours (labels {theirs or 'none'}; ours would be "
                f"{ownership_labels(deployment)}). rl_lustre neither adopts nor changes it: delete or rename "
                "it, or choose another deployment name."
            )
        if (existing.get("metadata") or {}).get("deletionTimestamp"):
            logger.debug("%s is being deleted; waiting to create it again", what)
            _wait(
                res,
                name,
                lambda obj: obj is None,
                deadline,
                f"{what} to finish deleting before it is created again",
                timeout,
            )
            continue
        patch, drift = adoption_patch(kind, desired, existing)
        if kind == "PersistentVolume" and _stale_claim(api_client, existing):
            # A teardown stopped between deleting the claim and the volume: the volume is
            # Released and still names the old claim's uid, so no new claim would bind.
            # It is ours; forgetting the old claim makes it Available to the new one.
            ref = existing["spec"]["claimRef"]
            logger.info(
                "%s is Released (its claim %s/%s uid %s is gone); clearing the stale claimRef",
                what,
                ref.get("namespace"),
                ref.get("name"),
                ref.get("uid"),
            )
            patch.setdefault("spec", {})["claimRef"] = {"uid": None, "resourceVersion": None}
        if drift:
            raise KubernetesError(
                f"{what} exists (ours) but differs in fields Kubernetes does not let us change: "
                f"{', '.join(drift)}. Delete it (cluster.down()) and apply again."
            )
        if not patch:
            logger.debug("%s exists with our labels and matches; adopted unchanged", what)
            return Applied(kind, ns, name, "unchanged", existing)
        with translate_errors(f"adopt {what}"):
            try:
                patched = res.patch(name, patch)
            except ApiException as exc:
                _refused_fields(exc, f"adopt {what}", kind)
                raise
        logger.info("adopted %s (updated %s)", what, ", ".join(changed_fields(patch)))
        return Applied(kind, ns, name, "adopted", patched)


def _refused_fields(exc: Any, action: str, kind: str) -> None:
    """Raise a :class:`KubernetesError` naming the fields when the server refused fields its
    schema for ``kind`` lacks (we ask it to, rather than have them dropped)."""
    from .client import describe_api_exception
    from .field_validation import unknown_fields

    fields = unknown_fields(str(getattr(exc, "body", "") or ""))
    if not fields:
        return
    hint = ""
    if kind == "RayCluster":
        hint = (
            " The cluster's KubeRay CRD is older than these fields (rl_lustre checks RayClusters against "
            "KubeRay v1.7's schema; GKE's Ray add-on may run an older KubeRay): leave them out or "
            "upgrade the operator."
        )
    raise KubernetesError(f"{action}: {describe_api_exception(exc)}.{hint}") from exc


def _stale_claim(api_client: ApiClient, pv: Mapping[str, Any]) -> bool:
    """Whether a PersistentVolume is Released and bound to a claim uid that no longer exists."""
    ref = (pv.get("spec") or {}).get("claimRef") or {}
    if (pv.get("status") or {}).get("phase") != "Released" or not ref.get("uid"):
        return False
    claims = ResourceClient(api_client, "PersistentVolumeClaim", ref.get("namespace") or "default")
    with translate_errors(f"read {claims.describe(str(ref.get('name')))}"):
        claim = claims.get(str(ref.get("name")))
    return claim is None or (claim.get("metadata") or {}).get("uid") != ref["uid"]


def _wait(
    res: ResourceClient,
    name: str,
    done: Callable[[Obj | None], bool],
    deadline: float,
    what: str,
    timeout: float,
    on_timeout: Callable[[Obj | None], Any] | None = None,
) -> Obj | None:
    """Watch one object until ``done(object or None)``; list again when the watch expires."""
    selector = f"metadata.name={name}"
    obj: Obj | None = None
    while True:
        with translate_errors(f"list {res.describe(name)}"):
            items, version = res.list(field_selector=selector)
        obj = items[0] if items else None
        if done(obj):
            return obj
        try:
            while (remaining := deadline - time.monotonic()) > 0:
                with translate_errors(f"watch {res.describe(name)}"):
                    for typ, event_obj in res.watch(
                        resource_version=version, timeout=min(remaining, _WATCH_CHUNK), field_selector=selector
                    ):
                        version = str((event_obj.get("metadata") or {}).get("resourceVersion") or version)
                        obj = None if typ == "DELETED" else event_obj
                        logger.debug("watch %s: %s %s", res.describe(name), typ, _brief(obj))
                        if done(obj):
                            return obj
                        if time.monotonic() >= deadline:
                            break
        except WatchExpired:
            logger.debug("watch of %s expired (410 Gone); listing again", res.describe(name))
            continue
        last = on_timeout(obj) if on_timeout is not None else _brief(obj)
        raise WaitTimeoutError(what, timeout, last)


def _brief(obj: Mapping[str, Any] | None) -> Any:
    """A small, secret-free picture of an object's state for logs and errors."""
    if obj is None:
        return "absent"
    meta = obj.get("metadata") or {}
    status = obj.get("status") or {}
    brief: dict[str, Any] = {"resourceVersion": meta.get("resourceVersion")}
    if meta.get("deletionTimestamp"):
        brief["deleting"] = True
        brief["finalizers"] = list(meta.get("finalizers") or [])
    for key in ("phase", "state"):
        if key in status:
            brief[key] = status[key]
    conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
    if conditions:
        brief["conditions"] = conditions
    return brief


def wait_ready(
    api_client: ApiClient,
    manifests: Sequence[Mapping[str, Any]],
    *,
    namespace: str | None = None,
    timeout: float = 1800.0,
) -> Obj | None:
    """Watch until every claim in ``manifests`` is Bound and every RayCluster is ready, its
    pods on its current pod templates (pods on an older one are recreated: see
    :mod:`rl_lustre.kube.rollout`).

    Examples:
        >>> rc = wait_ready(api, manifests, timeout=900)                  # doctest: +SKIP
        >>> rc["status"]["head"]["serviceName"]                             # doctest: +SKIP
        'demo-head-svc'

    Args:
        api_client: a kubernetes ``ApiClient``.
        manifests: the applied manifests (claims and RayClusters among them are waited for).
        namespace: for manifests that name none (default ``default``).
        timeout: seconds for all of it.

    Returns:
        The (last) RayCluster as the server reports it, or None without one.

    Raises:
        WaitTimeoutError: the deadline passed; ``last_state`` is a
            :class:`~rl_lustre.kube.diagnose.Diagnosis` of what is wrong.
        KubernetesError: the API failed.
    """
    deadline = time.monotonic() + timeout
    targets = [_target(m, namespace) for m in manifests]
    claims = [(ns, name) for kind, ns, name in targets if kind == "PersistentVolumeClaim"]
    rayclusters = [(ns, name) for kind, ns, name in targets if kind == "RayCluster"]
    ray_ns = rayclusters[0][0] if rayclusters else (claims[0][0] if claims else namespace or "default")

    def explain(_: Obj | None, ns: str | None = ray_ns) -> Diagnosis:
        assert ns is not None
        return diagnose(
            api_client,
            namespace=ns,
            raycluster=next((n for rns, n in rayclusters if rns == ns), None),
            claims=[n for cns, n in claims if cns == ns],
        )

    for ns, name in claims:
        res = ResourceClient(api_client, "PersistentVolumeClaim", ns)
        _wait(res, name, claim_bound, deadline, f"{res.describe(name)} to be Bound", timeout, explain)
        logger.debug("%s is Bound", res.describe(name))
    result: Obj | None = None
    for ns, name in rayclusters:
        from .rollout import roll_out

        res = ResourceClient(api_client, "RayCluster", ns)

        def ready(res: ResourceClient = res, name: str = name) -> Obj | None:
            return _wait(
                res, name, raycluster_ready, deadline, f"{res.describe(name)} to become ready", timeout, explain
            )

        rc = ready()
        assert rc is not None
        # Ready by its status; its pods on the current templates (KubeRay does not roll them).
        result = dict(roll_out(api_client, rc, deadline=deadline, timeout=timeout, ready=ready, explain=explain))
        logger.debug("%s is ready", res.describe(name))
    return result


def delete_manifests(
    api_client: ApiClient,
    manifests: Sequence[Mapping[str, Any]],
    *,
    deployment: str,
    namespace: str | None = None,
    timeout: float = 600.0,
) -> list[str]:
    """Delete the objects of ``manifests`` in reverse order and wait until each is gone.

    Only objects carrying ``deployment``'s labels are deleted; another same-named
    object is left alone with a warning. The RayCluster is deleted in the foreground,
    so it is gone only once its pods are.

    Examples:
        >>> delete_manifests(api, manifests, deployment="demo")     # doctest: +SKIP
        ['RayCluster default/demo', 'Secret default/demo-job-secrets', ...]

    Returns:
        What was deleted (``Kind namespace/name``).

    Raises:
        WaitTimeoutError: something was still there at the deadline.
        KubernetesError: the API failed.
    """
    targets = [_target(m, namespace) for m in manifests]
    return _delete(api_client, list(reversed(targets)), deployment, timeout)


def delete_deployment(
    api_client: ApiClient, deployment: str, *, namespace: str = "default", timeout: float = 600.0
) -> list[str]:
    """Delete every prefetch Job, pre-pull DaemonSet, RayCluster, Secret, claim and volume
    labelled with ``deployment``.

    For clean-up without the manifests (another process, a leak); waits until each is gone.
    A cluster without the KubeRay CRD simply has no RayClusters.

    Examples:
        >>> delete_deployment(api, "demo")      # doctest: +SKIP
        ['RayCluster default/demo', 'Secret default/demo-job-secrets', ...]

    Returns:
        What was deleted.
    """
    from kubernetes.client.exceptions import ApiException

    selector = ",".join(f"{k}={v}" for k, v in ownership_labels(deployment).items())
    from .fabric import INSTALLER_NAMESPACE

    targets: list[tuple[str, str | None, str]] = []
    # The gIB installer DaemonSet lives in kube-system, beside GKE's own node agents.
    scopes = [(kind, namespace) for kind in _DELETE_ORDER]
    scopes.insert(scopes.index(("DaemonSet", namespace)) + 1, ("DaemonSet", INSTALLER_NAMESPACE))
    for kind, ns in dict.fromkeys(scopes):
        res = ResourceClient(api_client, kind, ns)
        with translate_errors(f"list {kind} labelled {selector}"):
            try:
                items, _ = res.list(label_selector=selector)
            except ApiException as exc:
                if exc.status == 404 and kind in _OPTIONAL_KINDS:
                    items = []  # no such CRD installed
                else:
                    raise
        targets += [(kind, res.namespace, str(item["metadata"]["name"])) for item in items]
    return _delete(api_client, targets, deployment, timeout)


def _delete(
    api_client: ApiClient, targets: Iterable[tuple[str, str | None, str]], deployment: str, timeout: float
) -> list[str]:
    deadline = time.monotonic() + timeout
    deleted = []
    for kind, ns, name in targets:
        res = ResourceClient(api_client, kind, ns)
        what = res.describe(name)
        with translate_errors(f"read {what}"):
            existing = res.get(name)
        if existing is None:
            logger.debug("%s is already gone", what)
            continue
        if not is_owned(existing, deployment):
            logger.warning("not deleting %s: it does not carry the labels of deployment %r", what, deployment)
            continue
        if not (existing.get("metadata") or {}).get("deletionTimestamp"):
            with translate_errors(f"delete {what}"):
                # Foreground: a RayCluster, Job or DaemonSet disappears only after its pods,
                # so "gone" also means no pod of it holds the claim or is left behind.
                res.delete(name, propagation="Foreground" if kind in _OWNS_PODS else "Background")
            logger.info("deleting %s", what)
        _wait(res, name, lambda obj: obj is None, deadline, f"{what} to be deleted", timeout)
        logger.debug("%s is gone", what)
        deleted.append(what)
    return deleted
