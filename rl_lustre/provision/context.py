"""What the provisioning drivers of one deployment share: the adapters and the context.

:class:`Apis` holds the Google Cloud adapters, :class:`Context` the spec, its plan, the
adapters and the Kubernetes API client once the GKE cluster is known;
:func:`ensure_or_adopt` and :func:`gone` are the create-or-adopt and delete outcomes
every driver reports.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

import attrs

from ..errors import NotFoundError
from .step import Done, Step

if TYPE_CHECKING:
    from ..gcp import (
        Backoff,
        Ensured,
        Firewalls,
        GkeClusters,
        GlobalAddresses,
        LustreInstances,
        Networks,
        PsaConnections,
        RetryPolicy,
        Subnetworks,
    )
    from ..gcp.iam import ProjectIam, ServiceAccounts
    from ..gcp.images import Disks, Images, Instances
    from ..gcp.pool_updates import GkeNodePoolUpdates
    from ..gcp.storage import BucketObjects
    from ..plan import Plan
    from ..spec import ClusterSpec

__all__ = ["KUBE_TIMEOUT", "OPERATION_TIMEOUT", "Apis", "Context", "ensure_or_adopt", "gone"]

KUBE_TIMEOUT = 1800.0
# How long a deletion waits for a creation still in flight (a GKE node pool of many GPU
# nodes can take most of an hour).
OPERATION_TIMEOUT = 3600.0


@attrs.frozen
class Apis:
    """The Google Cloud adapters the drivers use.

    Examples:
        >>> from rl_lustre.gcp import Backoff
        >>> apis = Apis.from_env(backoff=Backoff(initial=0.01, maximum=0.05))
        >>> type(apis.lustre).__name__
        'LustreInstances'
    """

    networks: Networks
    subnetworks: Subnetworks
    addresses: GlobalAddresses
    firewalls: Firewalls
    psa: PsaConnections
    lustre: LustreInstances
    clusters: GkeClusters
    pools: GkeNodePoolUpdates
    images: Images
    disks: Disks
    instances: Instances
    storage: BucketObjects
    accounts: ServiceAccounts
    project_iam: ProjectIam

    @classmethod
    def from_env(cls, *, backoff: Backoff | None = None, retry: RetryPolicy | None = None) -> Apis:
        """Adapters on the clients of this environment (the emulators' when configured).

        Args:
            backoff: polling delays of every wait.
            retry: retries of transient failures.
        """
        from .. import gcp
        from ..gcp.iam import ProjectIam, ServiceAccounts
        from ..gcp.images import Disks, Images, Instances
        from ..gcp.pool_updates import GkeNodePoolUpdates
        from ..gcp.storage import BucketObjects

        kw: dict[str, Any] = {"backoff": backoff, "retry": retry}
        return cls(
            networks=gcp.Networks(**kw),
            subnetworks=gcp.Subnetworks(**kw),
            addresses=gcp.GlobalAddresses(**kw),
            firewalls=gcp.Firewalls(**kw),
            psa=gcp.PsaConnections(**kw),
            lustre=gcp.LustreInstances(**kw),
            clusters=gcp.GkeClusters(**kw),
            pools=GkeNodePoolUpdates(**kw),
            images=Images(**kw),
            disks=Disks(**kw),
            instances=Instances(**kw),
            storage=BucketObjects(retry=retry),
            accounts=ServiceAccounts(**kw),
            project_iam=ProjectIam(**kw),
        )


class Context:
    """What the drivers of one deployment share: the spec, its plan, the adapters, and
    the Kubernetes API client once the GKE cluster is known.

    Args:
        cluster: the deployment's spec.
        plan: its plan.
        apis: the Google Cloud adapters.
        backoff: polling delays of the drivers' own waits (the adapters have theirs).
        kube_timeout: seconds to wait for claims to bind and the RayCluster to be ready.
    """

    def __init__(
        self,
        cluster: ClusterSpec,
        plan: Plan,
        apis: Apis,
        *,
        backoff: Backoff | None = None,
        kube_timeout: float = KUBE_TIMEOUT,
    ) -> None:
        if plan.project is None or plan.region is None:
            raise NotFoundError(f"the plan of {plan.cluster_name!r} is not a GKE plan")
        self.cluster = cluster
        self.plan = plan
        self.apis = apis
        self.backoff = backoff
        self.project: str = plan.project
        self.region: str = plan.region
        self.deployment = plan.cluster_name
        self.kube_timeout = kube_timeout
        self._kube: Any = None
        # The GPU pool's candidate zones (set by the backend before up(); see provision/capacity.py),
        # wall seconds per second of the capacity lanes' waits, and the lane that delivered.
        self.capacity_zones: tuple[str, ...] | None = None
        self.time_scale = 1.0
        self.capacity_lane: Any = None
        # When the delivering lane's nodes arrived (time.time()): where capacity that ends starts counting.
        self.capacity_granted_at: float | None = None
        # When GKE says the first of the class's nodes ends (its termination annotation), if it says.
        self.capacity_ends_at: float | None = None
        self._manifests: dict[str, dict[str, Any]] | None = None
        self._lock = threading.Lock()

    def wait_settled(
        self, what: str, read: Callable[[], Any], busy: Callable[[Any], str | None], timeout: float = OPERATION_TIMEOUT
    ) -> None:
        """Wait until ``busy(read())`` is None (no operation in flight) or the resource is gone.

        Used before deleting a resource whose creation a cancelled ``up()`` left running:
        GKE refuses to delete a cluster or pool while another operation runs on it.
        """
        from ..gcp._wait import wait_for

        wait_for(
            f"{what} to finish its current operation before it is deleted",
            read,
            done=lambda found: found is None or busy(found) is None,
            describe=lambda found: "ABSENT" if found is None else (busy(found) or "settled"),
            timeout=timeout,
            backoff=self.backoff,
        )

    def manifests(self) -> dict[str, dict[str, Any]]:
        """The deployment's Kubernetes objects by plan key, built once for this context
        (one ``up()``): the Secret with the values of ``cluster.secrets`` in this
        process's environment, unredacted (they print redacted).

        Raises:
            ConfigError: as :func:`rl_lustre.kube.manifests.build_manifests`.
        """
        import os

        from ..kube.manifests import keyed_manifests

        with self._lock:
            if self._manifests is None:
                values = {name: os.environ[name] for name in self.cluster.secrets if name in os.environ}
                self._manifests = keyed_manifests(self.cluster, secret_values=values, redact=False)
            return self._manifests

    def manifest(self, key: str) -> dict[str, Any]:
        """The Kubernetes object of the plan node ``key``, from :meth:`manifests`.

        The PersistentVolume names the Lustre instance's address, which is known only once
        the instance is ready: one built before then is built again, once. The ComputeClass
        names the pools of the zones ``up()`` found (:attr:`capacity_zones`).

        Raises:
            NotFoundError: the node has no Kubernetes object.
        """
        from ..kube.manifests import deployment_labels
        from ..kube.persistent_volume import PENDING_ANNOTATION, pv_manifest
        from ..plankeys import COMPUTE_CLASS_KEY, PV_KEY

        manifests = self.manifests()
        with self._lock:
            found = manifests.get(key)
            if found is None:
                raise NotFoundError(f"plan node {key!r} has no Kubernetes object")
            if key == PV_KEY and PENDING_ANNOTATION in (found["metadata"].get("annotations") or {}):
                found = manifests[key] = pv_manifest(self.cluster, deployment_labels(self.cluster))
            if key == COMPUTE_CLASS_KEY and self.capacity_zones is not None:
                from ..kube.computeclass import compute_class_manifest
                from ..spec.lanes import class_stages

                # The pools of the zones found at up(); the rules of the first stage (the rules
                # after a queued flex-start kind join once its request has answered).
                found = compute_class_manifest(
                    self.cluster,
                    deployment_labels(self.cluster),
                    self.capacity_zones,
                    kinds=class_stages(self.cluster)[0][0],
                )
            return found

    def kube_api(self, gke_cluster: Any) -> Any:
        """A Kubernetes ``ApiClient`` for ``gke_cluster`` (a ``container_v1.Cluster``), cached."""
        from ..kube.client import gke_api_client

        with self._lock:
            if self._kube is None:
                self._kube = gke_api_client(gke_cluster)
            return self._kube


def ensure_or_adopt(step: Step, exists: bool, create: Callable[[], Ensured[Any]]) -> Done:
    """Adopt through ``create`` when the resource ``exists``; otherwise record the
    request, then create."""
    if not exists:
        step.requesting()
    done = create()
    if done.adopted:
        # Someone made it between our look and our request: not ours to roll back.
        step.record.requested = False
    return Done("adopted" if done.adopted else "created", done.resource)


def gone(deleted: bool) -> Literal["deleted", "absent"]:
    return "deleted" if deleted else "absent"
