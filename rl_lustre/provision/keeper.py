"""The keeper's driver (plan node ``keeper``): its objects applied after the RayCluster, and on
``down()`` the keeper stopped first, the runs in flight marked stopped by teardown, then its objects gone.

``ensure`` applies :func:`rl_lustre.kube.keeper.keeper_manifests` (adopting what an earlier
``up()`` made; a changed package rolls the pod) and waits until the keeper's pod is available.
``delete`` runs before the RayCluster's (the node depends on it), also when the whole GKE
cluster goes (the volume may outlive it): the Deployment first, waiting until its pod is gone
(nothing resubmits a run from then on), then the teardown Job
(:func:`rl_lustre.kube.keeper.teardown_job`), then the rest. A teardown Job that fails is
reported and teardown goes on. A GKE cluster whose Kubernetes API cannot be reached (its
credentials unreadable) is reported the same way: the keeper goes with the cluster.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Literal

from ..plankeys import GKE_CLUSTER_KEY
from .gcp_drivers import GkeClusterDriver
from .step import Done, Step

if TYPE_CHECKING:
    from .context import Context

__all__ = ["KeeperDriver"]

logger = logging.getLogger("rl_lustre.provision")

_TEARDOWN_TIMEOUT = 300.0


class KeeperDriver:
    """The keeper's objects (see the module's docstring)."""

    # Deleted on its own, before the RayCluster, even when the GKE cluster goes too.
    deleted_with: str | None = None
    interruptible = True

    def __init__(self, ctx: Context) -> None:
        from ..kube.keeper import keeper_manifests

        self.ctx = ctx
        self.manifests = keeper_manifests(ctx.cluster)
        self.deployment = self.manifests[-1]
        meta = self.deployment["metadata"]
        self.name, self.namespace = meta["name"], meta["namespace"]

    def _read(self, api: Any, kind: str, name: str) -> dict[str, Any] | None:
        from ..kube.client import ResourceClient, translate_errors

        client = ResourceClient(api, kind, self.namespace)
        with translate_errors(f"read {client.describe(name)}"):
            found: dict[str, Any] | None = client.get(name)
            return found

    def ensure(self, step: Step) -> Done:
        from ..gcp._wait import wait_for
        from ..kube import apply

        api = self.ctx.kube_api(step.records[GKE_CLUSTER_KEY].value)
        fresh = self._read(api, "Deployment", self.name) is None
        if fresh:
            step.requesting()
        apply.apply_manifests(api, self.manifests, deployment=self.ctx.deployment)
        step.check()

        def available() -> int:
            status = (self._read(api, "Deployment", self.name) or {}).get("status") or {}
            return int(status.get("availableReplicas") or 0)

        wait_for(
            f"the keeper {self.namespace}/{self.name}",
            available,
            done=lambda n: n >= 1,
            describe=lambda n: "available" if n else "starting",
            timeout=self.ctx.kube_timeout,
            backoff=self.ctx.backoff,
        )
        return Done("created" if fresh else "adopted", note="resubmits the runs a lost Ray head takes with it")

    def delete(self, step: Step) -> Literal["deleted", "absent"]:
        from ..errors import ConfigError
        from ..kube import apply

        gke = self.ctx.apis.clusters.get_or_none(GkeClusterDriver(self.ctx).path)
        if gke is None:
            return "absent"
        try:
            api = self.ctx.kube_api(gke)
        except ConfigError as exc:
            step.record.note = "its cluster's Kubernetes API cannot be reached: it goes with the cluster"
            logger.warning(
                "could not stop the keeper %s/%s before the runs (%s): runs in flight may be resubmitted by a "
                "later cluster of the same name on this volume",
                self.namespace,
                self.name,
                exc,
            )
            return "absent"
        deployment = self.ctx.deployment
        gone = apply.delete_manifests(api, [self.deployment], deployment=deployment)
        if self._read(api, "RayCluster", self.ctx.cluster.name) is not None:
            self._teardown(api)
        gone += apply.delete_manifests(api, self.manifests[:-1], deployment=deployment)
        return "deleted" if gone else "absent"

    def _teardown(self, api: Any) -> None:
        """Run the teardown Job (the keeper is gone; the runs still run), then delete it."""
        from ..errors import RLLustreError
        from ..gcp._wait import wait_for
        from ..kube import apply
        from ..kube.keeper import teardown_job
        from ..kube.prefetch import job_state

        job = teardown_job(self.ctx.cluster)
        name = job["metadata"]["name"]
        deployment = self.ctx.deployment
        try:
            apply.apply_manifests(api, [job], deployment=deployment)
            state = wait_for(
                f"the teardown Job {self.namespace}/{name}",
                lambda: job_state(self._read(api, "Job", name)),
                done=lambda s: s in ("complete", "failed"),
                describe=str,
                timeout=_TEARDOWN_TIMEOUT,
                backoff=self.ctx.backoff,
            )
            if state == "failed":
                logger.warning(
                    "the teardown Job %s/%s failed: runs in flight may be resubmitted by a later cluster of "
                    "the same name on this volume",
                    self.namespace,
                    name,
                )
            else:
                logger.info("marked the runs in flight stopped by teardown (Job %s/%s)", self.namespace, name)
        except RLLustreError as exc:
            logger.warning("could not mark the runs in flight stopped by teardown: %s", exc)
        finally:
            apply.delete_manifests(api, [job], deployment=deployment)
