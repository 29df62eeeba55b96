"""A RayCluster's pods on its current pod templates: KubeRay does not roll them, we do.

KubeRay (v1.5, and later ones without ``spec.upgradeStrategy``) creates a RayCluster's pods
from its templates and never replaces a running pod when a template changes: after
``up()`` adopts a RayCluster whose image, environment or resources changed, the operator
reports it ready while every pod still runs the old template, and a job would run on the
old image. So each group's pod template carries
:data:`~rl_lustre.kube.pod_templates.TEMPLATE_HASH_ANNOTATION`, a hash of what makes its pods
(:func:`~rl_lustre.kube.pod_templates.stamp_templates`; KubeRay copies template annotations onto the
pods), and :func:`roll_out` deletes the pods whose hash is not their group's current one
(KubeRay then creates them again from the current template), then waits until each group
has its pods on the current template, Running and Ready — what KubeRay's own
``upgradeStrategy: Recreate`` does where it exists. A worker group's change recreates its
workers only (a running job's supervisor recovers from the lost nodes); a change of the
head's template recreates the head too, which ends the jobs on it: both are logged as
warnings.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ..errors import WaitTimeoutError
from .client import ResourceClient, translate_errors
from .pod_templates import HEAD_GROUP, group_of, outdated_pods, rolled_out

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

__all__ = ["roll_out"]

logger = logging.getLogger("rl_lustre.kube.rollout")

_POLL = 0.25


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
            groups = sorted({group_of(p) for p in stale})
            logger.warning(
                "RayCluster %s/%s: %d pod(s) of %s run an older pod template (KubeRay does not replace them): "
                "recreating %s%s",
                ns,
                name,
                len(stale),
                ", ".join(groups),
                ", ".join(str(p["metadata"]["name"]) for p in stale),
                "; the head goes too, ending the Ray jobs on it" if HEAD_GROUP in groups else "",
            )
            for pod in stale:
                with translate_errors(f"delete {pods_api.describe(str(pod['metadata']['name']))}"):
                    pods_api.delete(str(pod["metadata"]["name"]))
                deleted.add(str(pod["metadata"].get("uid")))
        elif rolled_out(rc, pods):
            return rc
        if time.monotonic() > deadline:
            raise WaitTimeoutError(
                f"RayCluster {ns}/{name} to run its current pod templates",
                timeout,
                explain(rc) if explain is not None else "pods on an older template",
            )
        time.sleep(_POLL)
        rc = ready() or rc
