"""The drivers of a GKE plan's Google Cloud nodes: VPC, private services access, Managed
Lustre, the GKE cluster and its node pools (see :mod:`rl_lustre.provision.drivers` for
which plan key each one drives)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

from ..errors import GCPError, NotFoundError, OwnershipError
from ..plankeys import GKE_CLUSTER_KEY, PSA_PEERING_KEY, PSA_RANGE_KEY
from .context import Context, ensure_or_adopt, gone
from .step import Done, Step

if TYPE_CHECKING:
    from ..plan import Plan

__all__ = ["ComputeDriver", "GkeClusterDriver", "LustreDriver", "NodePoolDriver", "PeeringDriver"]


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
                raise NotFoundError(
                    f"{step.node.kind} {self.path} does not exist; Cluster(network=...) must name "
                    "an existing VPC network with a subnet of the same name in the cluster's region"
                )
            return Done("used", found)
        return ensure_or_adopt(
            step,
            found is not None,
            lambda: self.api.create(self.body(step), parent=self._parent(), deployment=self.ctx.deployment),
        )

    def delete(self, step: Step) -> Literal["deleted", "absent"]:
        return gone(self.api.delete(self.path, deployment=self.ctx.deployment))


class PeeringDriver:
    """The private services access connection: our range added to the network's
    connection with Service Networking (other ranges in it are never touched)."""

    deleted_with: str | None = None
    interruptible = False

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        node = ctx.plan.get(PSA_PEERING_KEY)
        self.network = str(node.settings["network"])
        self.range = ctx.plan.get(PSA_RANGE_KEY).name

    def ensure(self, step: Step) -> Done:
        api = self.ctx.apis.psa
        found = api.get_or_none(self.ctx.project, self.network)
        ours = found is not None and self.range in found.get("reservedPeeringRanges", [])
        return ensure_or_adopt(step, ours, lambda: api.create(self.ctx.project, self.network, self.range))

    def delete(self, step: Step) -> Literal["deleted", "absent"]:
        return gone(self.ctx.apis.psa.delete(self.ctx.project, self.network, self.range))


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
        done = ensure_or_adopt(step, found is not None, lambda: api.create(request, deployment=self.ctx.deployment))
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
        return gone(deleted)


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
        settings = self.ctx.plan.get(GKE_CLUSTER_KEY).settings
        # The authorised networks move into the IP endpoint's config; the DNS endpoint
        # is how clients without a listed address (this machine, usually) reach the API.
        request.control_plane_endpoints_config = control_plane_endpoints(settings)
        del request.master_authorized_networks_config
        return request

    def ensure(self, step: Step) -> Done:
        from ..gcp.container import check_version

        api = self.ctx.apis.clusters
        found = api.get_or_none(self.path)
        done = ensure_or_adopt(
            step,
            found is not None,
            lambda: api.create(self.request(), parent=self.parent, deployment=self.ctx.deployment),
        )
        # GKE picks the version from the release channel; one too old for the Lustre CSI
        # driver's port 988 could never mount the volume, so up() fails here (and rolls back).
        minimum = self.ctx.plan.get(GKE_CLUSTER_KEY).settings.get("min_version")
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
        return gone(api.delete(self.path, deployment=self.ctx.deployment))


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

    deleted_with: str | None = GKE_CLUSTER_KEY
    interruptible = True

    def __init__(self, ctx: Context, key: str) -> None:
        from ..gcp.container_requests import cluster_path, node_pool_path

        self.ctx = ctx
        self.key = key
        self.cluster = cluster_path(ctx.plan)
        self.path = node_pool_path(ctx.plan, key)

    def ensure(self, step: Step) -> Done:
        return self.adopt(step)

    def adopt(self, step: Step, node: Any = None) -> Done:
        """Create or adopt the pool (``node``: a capacity lane's pool instead of the plan's)."""
        from ..gcp.container_requests import node_pool_request

        api = self.ctx.apis.pools
        preload = self.preload_path(step)
        request = node_pool_request(self.ctx.plan, self.key, preload_image=preload, node=node)
        if node is not None:
            self.path = f"{self.cluster}/nodePools/{node.name}"
        came_with_cluster = step.records[GKE_CLUSTER_KEY].outcome == "created" and any(
            p.name == request.name for p in step.dep(GKE_CLUSTER_KEY).node_pools
        )
        if came_with_cluster:
            return Done("created", api.wait_ready(self.path), note="created with the cluster")
        found = api.get_or_none(self.path)
        done = ensure_or_adopt(
            step, found is not None, lambda: api.create(request, cluster=self.cluster, deployment=self.ctx.deployment)
        )
        if done.outcome == "adopted" and preload is not None:
            # GKE cannot change a pool's secondary boot disk: say so, never take it as current.
            theirs = [d.disk_image for d in done.value.config.secondary_boot_disks]
            if preload not in theirs:
                return Done(
                    "adopted",
                    done.value,
                    note=(
                        f"built with secondary boot disk {theirs[0] if theirs else 'none'}; its nodes (replacements "
                        f"too) do not get {preload}: delete the pool and run up() again to recreate it"
                    ),
                )
        return done

    def preload_path(self, step: Step) -> str | None:
        """The preload image's path when this pool's nodes boot with it (after checking that
        the cluster's GKE version supports secondary boot disks)."""
        from ..gcp.container import check_version
        from ..plankeys import PRELOAD_IMAGE_KEY
        from .preload import image_path

        if PRELOAD_IMAGE_KEY not in step.node.depends_on:
            return None
        minimum = step.node.settings["preload"]["min_gke_version"]
        check_version(
            step.dep(GKE_CLUSTER_KEY),
            minimum,
            needs="GKE boots nodes from a secondary boot disk only from {minimum}: upgrade the control "
            "plane, or deploy with Cluster(preload_image=False)",
        )
        return image_path(step.dep(PRELOAD_IMAGE_KEY))

    def delete(self, step: Step) -> Literal["deleted", "absent"]:
        from ..gcp._ownership import check_owned

        clusters, pools = self.ctx.apis.clusters, self.ctx.apis.pools
        found = pools.get_or_none(self.path)
        if found is None:
            return "absent"
        check_owned("GKE node pool", self.path, found.config.resource_labels, self.ctx.deployment)
        cluster = clusters.get_or_none(self.cluster)
        if cluster is not None and _cluster_busy(cluster):
            self.ctx.wait_settled(
                f"GKE cluster {self.cluster}", lambda: clusters.get_or_none(self.cluster), _cluster_busy
            )
        return gone(pools.delete(self.path, deployment=self.ctx.deployment))
