"""What each node of a GKE deployment's plan does remotely: create or adopt, wait until
ready, delete.

One driver per plan key, over the Google Cloud adapters of :mod:`rl_lustre.gcp` and
the Kubernetes layer of :mod:`rl_lustre.kube`:

================  =======================================================================
plan key          driver
================  =======================================================================
network, subnet   :class:`ComputeDriver` (a user's network: checked, never changed)
gvnic-*, rdma-*   :class:`ComputeDriver`: the fabric's VPCs and subnets (``fabric="rdma"``)
psa-range         :class:`ComputeDriver`; its allocated block feeds the firewall rule
firewall-lustre   :class:`ComputeDriver`, tcp:988 from the PSA block
psa-peering       :class:`PeeringDriver`: adds our range to the network's connection
lustre            :class:`LustreDriver`; the mount point goes to the ``LustreVolume``
gke-cluster       :class:`GkeClusterDriver`, created with the CPU pool as its only pool
cpu-pool          :class:`NodePoolDriver`: came with the cluster, or created / adopted
gpu-pool          :class:`NodePoolDriver`
pv, pvc, secret,  :class:`KubeObjectDriver` (``rl_lustre.kube.apply``), or
raycluster,       :class:`SkippedDriver` when the Kubernetes part is switched off
netparams-*,
podnet-*,
nccl-installer
image-prepull,    :mod:`rl_lustre.provision.startup` (likewise skipped without the
model-prefetch    Kubernetes part)
================  =======================================================================

Every driver checks before it creates: a resource that exists is adopted through the
adapter (which refuses one without our labels), and only a missing one is recorded as
requested by this run, so a rollback never deletes what an earlier ``up()`` made.

Node pools and Kubernetes objects are deleted with the GKE cluster when the cluster is
deleted too (``deleted_with``); only when the cluster stays (it was adopted) are they
deleted one by one.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

import attrs

from ..errors import GCPError, NotFoundError, OwnershipError
from .executor import Done, Driver, Step

if TYPE_CHECKING:
    from ..gcp import (
        Backoff,
        Ensured,
        Firewalls,
        GkeClusters,
        GkeNodePools,
        GlobalAddresses,
        LustreInstances,
        Networks,
        PsaConnections,
        RetryPolicy,
        Subnetworks,
    )
    from ..plan import Plan
    from ..spec import ClusterSpec

__all__ = [
    "KUBE_KEYS",
    "Apis",
    "ComputeDriver",
    "Context",
    "GkeClusterDriver",
    "KubeObjectDriver",
    "LustreDriver",
    "NodePoolDriver",
    "PeeringDriver",
    "SkippedDriver",
    "gke_drivers",
    "kube_keys",
]

logger = logging.getLogger("rl_lustre.provision")

# The plan's core Kubernetes nodes; the fabric adds its own (see kube_keys).
KUBE_KEYS = ("pv", "pvc", "secret", "raycluster")
_GOOGLE_KINDS = ("compute.", "container.", "lustre.", "servicenetworking.")


def kube_keys(plan: Plan) -> tuple[str, ...]:
    """The plan's Kubernetes nodes, in plan order.

    Examples:
        >>> from rl_lustre import Cluster
        >>> c = Cluster(name="demo", project="my-project", region="us-east1", zone="us-east1-b")
        >>> keys = kube_keys(c.plan())
        >>> keys[:3], keys[-1], len(keys)
        (('netparams-gvnic-1', 'podnet-gvnic-1', 'netparams-rdma-0'), 'model-prefetch', 25)
    """
    return tuple(r.key for r in plan if not r.kind.startswith(_GOOGLE_KINDS))
# Claims and RayClusters are waited for until Bound / ready.
_KUBE_WAITED = frozenset({"pvc", "raycluster"})
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
    pools: GkeNodePools

    @classmethod
    def from_env(cls, *, backoff: Backoff | None = None, retry: RetryPolicy | None = None) -> Apis:
        """Adapters on the clients of this environment (the emulators' when configured).

        Args:
            backoff: polling delays of every wait.
            retry: retries of transient failures.
        """
        from .. import gcp

        kw: dict[str, Any] = {"backoff": backoff, "retry": retry}
        return cls(
            networks=gcp.Networks(**kw),
            subnetworks=gcp.Subnetworks(**kw),
            addresses=gcp.GlobalAddresses(**kw),
            firewalls=gcp.Firewalls(**kw),
            psa=gcp.PsaConnections(**kw),
            lustre=gcp.LustreInstances(**kw),
            clusters=gcp.GkeClusters(**kw),
            pools=gcp.GkeNodePools(**kw),
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

    def __init__(self, cluster: ClusterSpec, plan: Plan, apis: Apis, *, backoff: Backoff | None = None,
                 kube_timeout: float = KUBE_TIMEOUT) -> None:
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
        self._lock = threading.Lock()

    def wait_settled(self, what: str, read: Callable[[], Any], busy: Callable[[Any], str | None],
                     timeout: float = OPERATION_TIMEOUT) -> None:
        """Wait until ``busy(read())`` is None (no operation in flight) or the resource is gone.

        Used before deleting a resource whose creation a cancelled ``up()`` left running:
        GKE refuses to delete a cluster or pool while another operation runs on it.
        """
        from ..gcp._wait import wait_for

        wait_for(f"{what} to finish its current operation before it is deleted", read,
                 done=lambda found: found is None or busy(found) is None,
                 describe=lambda found: "ABSENT" if found is None else (busy(found) or "settled"),
                 timeout=timeout, backoff=self.backoff)

    def kube_api(self, gke_cluster: Any) -> Any:
        """A Kubernetes ``ApiClient`` for ``gke_cluster`` (a ``container_v1.Cluster``), cached."""
        from ..kube.client import gke_api_client

        with self._lock:
            if self._kube is None:
                self._kube = gke_api_client(gke_cluster)
            return self._kube


def _ensure(step: Step, exists: bool, create: Callable[[], Ensured[Any]]) -> Done:
    """Adopt through ``create`` when the resource ``exists``; otherwise record the
    request, then create."""
    if not exists:
        step.requesting()
    done = create()
    if done.adopted:
        # Someone made it between our look and our request: not ours to roll back.
        step.record.requested = False
    return Done("adopted" if done.adopted else "created", done.resource)


def _gone(deleted: bool) -> Literal["deleted", "absent"]:
    return "deleted" if deleted else "absent"


class ComputeDriver:
    """A Compute resource: network, subnet, PSA range or firewall rule.

    Examples:
        >>> from rl_lustre.gcp import compute
        >>> driver = ComputeDriver(ctx, ctx.apis.networks, compute.network_path,
        ...                        lambda step: compute.network_request(ctx.plan))  # doctest: +SKIP

    Args:
        ctx: the deployment's context.
        api: the adapter (``Networks``, ``Subnetworks``, ``GlobalAddresses``, ``Firewalls``).
        path: the resource's full name, from the plan.
        body: the resource to create, from the plan (and, for the firewall, the PSA range).
    """

    deleted_with: str | None = None
    # Compute resources appear when their operation ends: a rollback must wait for it.
    interruptible = False

    def __init__(self, ctx: Context, api: Any, path: Callable[[Plan], str], body: Callable[[Step], Any]) -> None:
        self.ctx = ctx
        self.api = api
        self.path = path(ctx.plan)
        self.body = body

    def _parent(self) -> str:
        return self.path.rsplit("/", 2)[0]

    def ensure(self, step: Step) -> Done:
        found = self.api.get_or_none(self.path)
        if step.node.action == "use":
            if found is None:
                raise NotFoundError(f"{step.node.kind} {self.path} does not exist; Cluster(network=...) must name "
                                    "an existing VPC network with a subnet of the same name in the cluster's region")
            return Done("used", found)
        return _ensure(step, found is not None, lambda: self.api.create(
            self.body(step), parent=self._parent(), deployment=self.ctx.deployment))

    def delete(self, step: Step) -> Literal["deleted", "absent"]:
        return _gone(self.api.delete(self.path, deployment=self.ctx.deployment))


class PeeringDriver:
    """The private services access connection: our range added to the network's
    connection with Service Networking (other ranges in it are never touched)."""

    deleted_with: str | None = None
    interruptible = False

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        node = ctx.plan.get("psa-peering")
        self.network = str(node.settings["network"])
        self.range = ctx.plan.get("psa-range").name

    def ensure(self, step: Step) -> Done:
        api = self.ctx.apis.psa
        found = api.get_or_none(self.ctx.project, self.network)
        ours = found is not None and self.range in found.get("reservedPeeringRanges", [])
        return _ensure(step, ours, lambda: api.create(self.ctx.project, self.network, self.range))

    def delete(self, step: Step) -> Literal["deleted", "absent"]:
        return _gone(self.ctx.apis.psa.delete(self.ctx.project, self.network, self.range))


class LustreDriver:
    """The Managed Lustre instance; once ACTIVE, its mount point is recorded on the
    cluster's ``LustreVolume`` (so ``cluster.volume.mount_point`` and the manifests work)."""

    deleted_with: str | None = None
    # The instance exists (CREATING) as soon as the request returns and can be deleted.
    interruptible = True

    def __init__(self, ctx: Context) -> None:
        assert ctx.cluster.volume is not None
        self.ctx = ctx
        self.volume = ctx.cluster.volume
        self.path = self.volume.resource_name()

    def _record(self, instance: Any, *, created: bool) -> Any:
        from ..gcp.lustre import State

        self.volume._live.learn(State(instance.state).name, instance.mount_point)
        self.volume._live.created_by_us = self.volume._live.created_by_us or created
        return instance

    def ensure(self, step: Step) -> Done:
        from ..gcp.lustre import instance_request

        api = self.ctx.apis.lustre
        if step.node.action == "use":
            return Done("used", self._record(api.wait_ready(self.path), created=False))
        found = api.get_or_none(self.path)
        request = instance_request(self.volume, deployment=self.ctx.deployment, labels=self.ctx.cluster.labels)
        done = _ensure(step, found is not None, lambda: api.create(request, deployment=self.ctx.deployment))
        self._record(done.value, created=done.outcome == "created")
        return done

    def delete(self, step: Step) -> Literal["deleted", "absent"]:
        from ..gcp.lustre import State

        api = self.ctx.apis.lustre
        try:
            deleted = api.delete(self.path, deployment=self.ctx.deployment)
        except (OwnershipError, NotFoundError):
            raise
        except GCPError:
            # A creation a cancelled up() left running may refuse deletion until it ends.
            def creating(instance: Any) -> str | None:
                return "CREATING" if instance.state == State.CREATING else None

            found = api.get_or_none(self.path)
            if found is None or creating(found) is None:
                raise
            self.ctx.wait_settled(f"Lustre instance {self.path}", lambda: api.get_or_none(self.path), creating)
            deleted = api.delete(self.path, deployment=self.ctx.deployment)
        self.volume._live.forget()
        return _gone(deleted)


class GkeClusterDriver:
    """The GKE cluster, created with the CPU pool as its only node pool (one operation
    instead of creating a default pool, then deleting it)."""

    deleted_with: str | None = None
    interruptible = True

    def __init__(self, ctx: Context) -> None:
        from ..gcp.container import parent_of
        from ..gcp.container_requests import cluster_path

        self.ctx = ctx
        self.path = cluster_path(ctx.plan)
        self.parent = parent_of(self.path)

    def request(self) -> Any:
        """The ``container_v1.Cluster`` to create."""
        from ..gcp.container_requests import cluster_request, control_plane_endpoints

        request = cluster_request(self.ctx.plan)
        settings = self.ctx.plan.get("gke-cluster").settings
        # The authorised networks move into the IP endpoint's config; the DNS endpoint
        # is how clients without a listed address (this machine, usually) reach the API.
        request.control_plane_endpoints_config = control_plane_endpoints(settings)
        del request.master_authorized_networks_config
        return request

    def ensure(self, step: Step) -> Done:
        from ..gcp.container import check_version

        api = self.ctx.apis.clusters
        found = api.get_or_none(self.path)
        done = _ensure(step, found is not None, lambda: api.create(
            self.request(), parent=self.parent, deployment=self.ctx.deployment))
        # GKE picks the version from the release channel; one too old for the Lustre CSI
        # driver's port 988 could never mount the volume, so up() fails here (and rolls back).
        minimum = self.ctx.plan.get("gke-cluster").settings.get("min_version")
        if minimum:
            check_version(done.value, minimum)
        return done

    def delete(self, step: Step) -> Literal["deleted", "absent"]:
        from ..gcp._ownership import check_owned

        api = self.ctx.apis.clusters
        found = api.get_or_none(self.path)
        if found is None:
            return "absent"
        check_owned("GKE cluster", self.path, found.resource_labels, self.ctx.deployment)
        if _cluster_busy(found):
            self.ctx.wait_settled(f"GKE cluster {self.path}", lambda: api.get_or_none(self.path), _cluster_busy)
        return _gone(api.delete(self.path, deployment=self.ctx.deployment))


def _busy_status(obj: Any) -> str | None:
    name = type(obj).Status(obj.status).name
    return name if name in ("PROVISIONING", "RECONCILING") else None


def _cluster_busy(cluster: Any) -> str | None:
    """What keeps GKE from deleting ``cluster`` now: its own or a pool's operation."""
    if _busy_status(cluster):
        return f"cluster {_busy_status(cluster)}"
    if type(cluster).Status(cluster.status).name != "RUNNING":
        # ERROR, DEGRADED, STOPPING: no pool operation can hold the cluster up any more.
        return None
    pools = [f"{p.name} {_busy_status(p)}" for p in cluster.node_pools if _busy_status(p)]
    return f"node pool {', '.join(pools)}" if pools else None


class NodePoolDriver:
    """A node pool. The CPU pool comes with a cluster this run created; otherwise (and
    for the GPU pool) the pool is created or adopted on its own."""

    deleted_with: str | None = "gke-cluster"
    interruptible = True

    def __init__(self, ctx: Context, key: str) -> None:
        from ..gcp.container_requests import cluster_path, node_pool_path

        self.ctx = ctx
        self.key = key
        self.cluster = cluster_path(ctx.plan)
        self.path = node_pool_path(ctx.plan, key)

    def ensure(self, step: Step) -> Done:
        from ..gcp.container_requests import node_pool_request

        api = self.ctx.apis.pools
        request = node_pool_request(self.ctx.plan, self.key)
        came_with_cluster = step.records["gke-cluster"].outcome == "created" and any(
            p.name == request.name for p in step.dep("gke-cluster").node_pools)
        if came_with_cluster:
            return Done("created", api.wait_ready(self.path), note="created with the cluster")
        found = api.get_or_none(self.path)
        return _ensure(step, found is not None, lambda: api.create(
            request, cluster=self.cluster, deployment=self.ctx.deployment))

    def delete(self, step: Step) -> Literal["deleted", "absent"]:
        from ..gcp._ownership import check_owned

        clusters, pools = self.ctx.apis.clusters, self.ctx.apis.pools
        found = pools.get_or_none(self.path)
        if found is None:
            return "absent"
        check_owned("GKE node pool", self.path, found.config.resource_labels, self.ctx.deployment)
        cluster = clusters.get_or_none(self.cluster)
        if cluster is not None and _cluster_busy(cluster):
            self.ctx.wait_settled(f"GKE cluster {self.cluster}", lambda: clusters.get_or_none(self.cluster),
                                  _cluster_busy)
        return _gone(pools.delete(self.path, deployment=self.ctx.deployment))


class KubeObjectDriver:
    """A Kubernetes object of the deployment (PersistentVolume, PersistentVolumeClaim,
    Secret, RayCluster), applied through :mod:`rl_lustre.kube.apply`.

    Claims are waited for until Bound, the RayCluster until ready. Secret values are
    read from this process's environment when the Secret is applied.
    """

    deleted_with: str | None = "gke-cluster"
    interruptible = True

    def __init__(self, ctx: Context, key: str) -> None:
        self.ctx = ctx
        self.key = key

    def _manifest(self) -> dict[str, Any]:
        from ..kube.manifests import build_manifests

        cluster = self.ctx.cluster
        node = self.ctx.plan.get(self.key)
        values = {name: os.environ[name] for name in cluster.secrets if name in os.environ} if self.key == "secret" else None
        for manifest in build_manifests(cluster, secret_values=values, redact=False):
            if f"{manifest['apiVersion']}/{manifest['kind']}" == node.kind and manifest["metadata"]["name"] == node.name:
                return manifest
        raise NotFoundError(f"no manifest for plan node {self.key!r} ({node.kind} {node.name})")

    def ensure(self, step: Step) -> Done:
        from ..kube import apply
        from ..kube.client import ResourceClient

        api = self.ctx.kube_api(step.records["gke-cluster"].value)
        manifest = self._manifest()
        meta = manifest["metadata"]
        found = ResourceClient(api, manifest["kind"], meta.get("namespace")).get(meta["name"])
        if found is None:
            step.requesting()
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
        return _gone(bool(apply.delete_manifests(api, [self._manifest()], deployment=self.ctx.deployment)))


class SkippedDriver:
    """A node deliberately not provisioned; ``up()`` and ``down()`` report it as skipped.

    Examples:
        >>> driver = SkippedDriver("Kubernetes part switched off")
        >>> driver.ensure(None)
        Done(outcome='skipped', value=None, note='Kubernetes part switched off')
    """

    deleted_with: str | None = None
    interruptible = True

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def ensure(self, step: Step | None) -> Done:
        return Done("skipped", note=self.reason)

    def delete(self, step: Step) -> Literal["skipped"]:
        step.record.note = self.reason
        return "skipped"


def _body(build: Callable[[Plan, str], Any], plan: Plan, key: str) -> Callable[[Step], Any]:
    return lambda step: build(plan, key)


def gke_drivers(ctx: Context, *, kube: bool = True) -> dict[str, Driver]:
    """One driver per node of a GKE plan.

    Examples:
        >>> from rl_lustre import Cluster
        >>> c = Cluster(name="demo", project="my-project", region="us-east1", zone="us-east1-b")
        >>> drivers = gke_drivers(Context(c, c.plan(), Apis.from_env()), kube=False)
        >>> type(drivers["lustre"]).__name__, type(drivers["raycluster"]).__name__
        ('LustreDriver', 'SkippedDriver')

    Args:
        ctx: the deployment's context.
        kube: provision the Kubernetes objects; False skips them (tests of the Google
            Cloud side, and deployments whose objects are applied by other means).
    """
    from ..gcp import compute

    plan, apis = ctx.plan, ctx.apis
    drivers: dict[str, Driver] = {}
    for node in plan:
        if node.kind == "compute.v1.Network":
            drivers[node.key] = ComputeDriver(ctx, apis.networks, functools.partial(compute.network_path, key=node.key),
                                              _body(compute.network_request, plan, node.key))
        elif node.kind == "compute.v1.Subnetwork":
            drivers[node.key] = ComputeDriver(ctx, apis.subnetworks,
                                              functools.partial(compute.subnetwork_path, key=node.key),
                                              _body(compute.subnetwork_request, plan, node.key))
    drivers |= {
        "psa-range": ComputeDriver(ctx, apis.addresses, compute.psa_range_path,
                                   lambda step: compute.psa_range_request(plan)),
        "firewall-lustre": ComputeDriver(ctx, apis.firewalls, compute.firewall_path,
                                         lambda step: compute.firewall_request(plan, compute.cidr_of(
                                             step.dep("psa-range")))),
        "psa-peering": PeeringDriver(ctx),
        "lustre": LustreDriver(ctx),
        "gke-cluster": GkeClusterDriver(ctx),
        "cpu-pool": NodePoolDriver(ctx, "cpu-pool"),
        "gpu-pool": NodePoolDriver(ctx, "gpu-pool"),
    }
    for key in kube_keys(plan):
        drivers[key] = KubeObjectDriver(ctx, key) if kube else SkippedDriver(
            "Kubernetes part switched off (gcp_only=True)")
    from .startup import startup_drivers

    # The start-up nodes have drivers of their own.
    drivers.update(startup_drivers(ctx, kube=kube))
    return drivers
