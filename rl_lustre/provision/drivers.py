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
gpu-pool          :class:`~rl_lustre.provision.capacity.CapacityPoolDriver`: every GPU pool of the
                  capacity policy (each with the preload image as its secondary boot disk), then
                  the first nodes from the ComputeClass's rules
compute-class     :class:`KubeObjectDriver`: the capacity policy as a GKE ComputeClass
node-sa           :class:`NodeAccountDriver`: the nodes' service account and its project roles
                  (absent when ``node_service_account`` names the user's own)
preload-image     :class:`PreloadImageDriver`: found by digest, or built once; kept by ``down()``
pv, pvc, secret,  :class:`KubeObjectDriver` (``rl_lustre.kube.apply``), or
raycluster,       :class:`SkippedDriver` when the Kubernetes part is switched off
netparams-*,
podnet-*,
nccl-installer
keeper            :class:`~rl_lustre.provision.keeper.KeeperDriver`: the keeper's objects; on ``down()``
                  the keeper goes first, then the runs are marked stopped by teardown
image-prepull,    :mod:`rl_lustre.provision.startup` (likewise skipped without the
model-prefetch    Kubernetes part)
warm-import,      :mod:`rl_lustre.provision.warmstart`: ImportData / ExportData with the
warm-export       bucket of ``Cluster.warm_start``
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
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..plankeys import (
    CPU_POOL_KEY,
    FIREWALL_LUSTRE_KEY,
    GKE_CLUSTER_KEY,
    GPU_POOL_KEY,
    KEEPER_KEY,
    LUSTRE_KEY,
    NODE_SA_KEY,
    PRELOAD_IMAGE_KEY,
    PSA_PEERING_KEY,
    PSA_RANGE_KEY,
)
from .capacity import CapacityPoolDriver
from .context import Context
from .gcp_drivers import (
    ComputeDriver,
    GkeClusterDriver,
    LustreDriver,
    NodePoolDriver,
    PeeringDriver,
)
from .keeper import KeeperDriver
from .kube_drivers import KubeObjectDriver, SkippedDriver, kube_keys
from .node_account import NodeAccountDriver
from .preload import PreloadImageDriver
from .results import results_drivers
from .startup import startup_drivers
from .step import Driver, Step
from .warmstart import warmstart_drivers

if TYPE_CHECKING:
    from ..plan import Plan

__all__ = ["gke_drivers"]


def _body(build: Callable[[Plan, str], Any], plan: Plan, key: str) -> Callable[[Step], Any]:
    return lambda step: build(plan, key)


def gke_drivers(ctx: Context, *, kube: bool = True) -> dict[str, Driver]:
    """One driver per node of a GKE plan.

    Examples:
        >>> from rl_lustre import Cluster
        >>> from rl_lustre.provision.context import Apis
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
            drivers[node.key] = ComputeDriver(
                ctx,
                apis.networks,
                functools.partial(compute.network_path, key=node.key),
                _body(compute.network_request, plan, node.key),
            )
        elif node.kind == "compute.v1.Subnetwork":
            drivers[node.key] = ComputeDriver(
                ctx,
                apis.subnetworks,
                functools.partial(compute.subnetwork_path, key=node.key),
                _body(compute.subnetwork_request, plan, node.key),
            )
    drivers |= {
        PSA_RANGE_KEY: ComputeDriver(
            ctx, apis.addresses, compute.psa_range_path, lambda step: compute.psa_range_request(plan)
        ),
        FIREWALL_LUSTRE_KEY: ComputeDriver(
            ctx,
            apis.firewalls,
            compute.firewall_path,
            lambda step: compute.firewall_request(plan, compute.cidr_of(step.dep(PSA_RANGE_KEY))),
        ),
        PSA_PEERING_KEY: PeeringDriver(ctx),
        LUSTRE_KEY: LustreDriver(ctx),
        GKE_CLUSTER_KEY: GkeClusterDriver(ctx),
        CPU_POOL_KEY: NodePoolDriver(ctx, CPU_POOL_KEY),
        GPU_POOL_KEY: CapacityPoolDriver(ctx, kube=kube),
    }
    if PRELOAD_IMAGE_KEY in plan:
        drivers[PRELOAD_IMAGE_KEY] = PreloadImageDriver(ctx)
    if NODE_SA_KEY in plan:
        drivers[NODE_SA_KEY] = NodeAccountDriver(ctx)
    waited_by_google = {d for node in plan if node.key not in kube_keys(plan) for d in node.depends_on}
    for key in kube_keys(plan):
        drivers[key] = (
            KubeObjectDriver(ctx, key)
            if kube
            else SkippedDriver(
                "Kubernetes part switched off (gcp_only=True)",
                deleted_with=GKE_CLUSTER_KEY if key in waited_by_google else None,
            )
        )
    if KEEPER_KEY in plan:
        drivers[KEEPER_KEY] = (
            KeeperDriver(ctx) if kube else SkippedDriver("Kubernetes part switched off (gcp_only=True)")
        )
    # The start-up nodes have drivers of their own.
    drivers.update(startup_drivers(ctx, kube=kube))
    drivers.update(warmstart_drivers(ctx))
    drivers.update(results_drivers(ctx))
    return drivers
