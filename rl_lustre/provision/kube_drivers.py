"""The drivers of a GKE plan's Kubernetes nodes: the objects applied through
:mod:`rl_lustre.kube.apply` (:class:`KubeObjectDriver`), and :class:`SkippedDriver` for a
node deliberately not provisioned."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from ..plankeys import GKE_CLUSTER_KEY, PV_KEY, PVC_KEY, RAYCLUSTER_KEY, SECRET_KEY
from .context import Context, gone
from .gcp_drivers import GkeClusterDriver
from .step import Done, Step

if TYPE_CHECKING:
    from ..plan import Plan

__all__ = ["KUBE_KEYS", "KubeObjectDriver", "SkippedDriver", "kube_keys"]

# The plan's core Kubernetes nodes; the fabric adds its own (see kube_keys).
KUBE_KEYS = (PV_KEY, PVC_KEY, SECRET_KEY, RAYCLUSTER_KEY)
_GOOGLE_KINDS = ("compute.", "container.", "lustre.", "servicenetworking.", "iam.")


def kube_keys(plan: Plan) -> tuple[str, ...]:
    """The plan's Kubernetes nodes, in plan order.

    Examples:
        >>> from rl_lustre import Cluster
        >>> c = Cluster(name="demo", project="my-project", region="us-east1", zone="us-east1-b")
        >>> keys = kube_keys(c.plan())
        >>> keys[:3], keys[-1], len(keys)
        (('netparams-gvnic-1', 'podnet-gvnic-1', 'netparams-rdma-0'), 'model-prefetch', 32)
    """
    return tuple(r.key for r in plan if not r.kind.startswith(_GOOGLE_KINDS))


# Claims and RayClusters are waited for until Bound / ready.
# Claims and RayClusters are waited for until Bound / ready.
_KUBE_WAITED = frozenset({PVC_KEY, RAYCLUSTER_KEY})


class KubeObjectDriver:
    """A Kubernetes object of the deployment (PersistentVolume, PersistentVolumeClaim,
    Secret, RayCluster), applied through :mod:`rl_lustre.kube.apply`.

    Claims are waited for until Bound, the RayCluster until ready. Secret values are
    read from this process's environment when the Secret is applied.
    """

    deleted_with: str | None = GKE_CLUSTER_KEY
    interruptible = True

    def __init__(self, ctx: Context, key: str) -> None:
        self.ctx = ctx
        self.key = key

    def _manifest(self) -> dict[str, Any]:
        return self.ctx.manifest(self.key)

    def ensure(self, step: Step) -> Done:
        from ..kube import apply
        from ..kube.client import ResourceClient

        api = self.ctx.kube_api(step.records[GKE_CLUSTER_KEY].value)
        manifest = self._manifest()
        meta = manifest["metadata"]
        found = ResourceClient(api, manifest["kind"], meta.get("namespace")).get(meta["name"])
        if found is None:
            step.requesting()
        if self.key == RAYCLUSTER_KEY:
            from .scaleup import release_probes

            # Its workers take the GPU nodes the capacity probes held (provision/scaleup.py):
            # the probes go first, so no worker waits Pending for the autoscaler to act on
            # (it would bring nodes of the class's next rule for it).
            release_probes(api, self.ctx.cluster, wait=30.0)
        applied = apply.apply_manifests(api, [manifest], deployment=self.ctx.deployment)[0]
        if self.key in _KUBE_WAITED:
            step.check()
            apply.wait_ready(api, [manifest], timeout=self.ctx.kube_timeout)
        return Done("created" if applied.action == "created" else "adopted", applied.object)

    def delete(self, step: Step) -> Literal["deleted", "absent"]:
        from ..kube import apply

        gke = self.ctx.apis.clusters.get_or_none(GkeClusterDriver(self.ctx).path)
        if gke is None:
            return "absent"
        api = self.ctx.kube_api(gke)
        return gone(bool(apply.delete_manifests(api, [self._manifest()], deployment=self.ctx.deployment)))


class SkippedDriver:
    """A node deliberately not provisioned; ``up()`` and ``down()`` report it as skipped.

    Examples:
        >>> driver = SkippedDriver("Kubernetes part switched off")
        >>> driver.ensure(None)
        Done(outcome='skipped', value=None, note='Kubernetes part switched off')
    """

    interruptible = True

    def __init__(self, reason: str, *, deleted_with: str | None = None) -> None:
        self.reason = reason
        # A skipped node a Google Cloud node waits for (the ComputeClass the GPU pools join)
        # rides with the GKE cluster on teardown, as the object would, so that neither waits
        # for the other.
        self.deleted_with = deleted_with

    def ensure(self, step: Step | None) -> Done:
        return Done("skipped", note=self.reason)

    def delete(self, step: Step) -> Literal["skipped"]:
        step.record.note = self.reason
        return "skipped"
