"""The deployment plan: every resource ``up()`` makes or uses, as one dependency graph.

:func:`build_plan` derives the graph from a :class:`~rl_lustre.cluster.Cluster` without
any remote call. The plan is the single description of a deployment: ``str(plan)`` shows
it to people, :meth:`Plan.to_dict` to programs, and the provisioning executor walks the
same nodes (by ``key`` and ``kind``) to create, adopt and delete them, running
independent branches concurrently and tearing down in reverse.

:meth:`Plan.graph` draws the graph from the plan itself: each node under the dependency
it waits for longest, ``+`` for the others it waits for, families such as the eight
RoCE subnets folded into one line (:mod:`rl_lustre.plan.drawing`). The default GKE
deployment (A4 nodes, the GPUDirect-RDMA fabric) has 54 nodes:

    >>> from rl_lustre import Cluster
    >>> plan = Cluster(name="demo", project="my-project", region="us-east1", zone="us-east1-b").plan()
    >>> len(plan)
    54
    >>> print(plan.graph())
    network
    ├─ subnet
    │  ├─ preload-image [cache]
    │  └─ gke-cluster  + node-sa
    │     ├─ netparams-gvnic-1  + gvnic-subnet
    │     │  └─ podnet-gvnic-1
    │     ├─ netparams-rdma-0..7  + rdma-subnet-0..7
    │     │  └─ podnet-rdma-0..7
    │     ├─ nccl-installer
    │     ├─ cpu-pool  + node-sa
    │     │  └─ image-prepull
    │     ├─ compute-class
    │     │  └─ gpu-pool  + gke-cluster, node-sa, gvnic-subnet, rdma-subnet-0..7, preload-image
    │     ├─ secret
    │     ├─ head-account
    │     │  ├─ head-role-binding  + head-role
    │     │  └─ head-nodes-role-binding  + head-nodes-role
    │     ├─ head-role
    │     └─ head-nodes-role
    └─ psa-range
       ├─ psa-peering
       │  └─ lustre  + firewall-lustre
       │     └─ pv  + gke-cluster
       │        └─ pvc
       │           ├─ raycluster  + secret, cpu-pool, gpu-pool, head-role-binding, head-nodes-role-binding,
       │           │  │      podnet-rdma-0..7, nccl-installer
       │           │  └─ keeper
       │           └─ model-prefetch  + cpu-pool, secret
       └─ firewall-lustre
    gvnic-network
    └─ gvnic-subnet
    rdma-network
    └─ rdma-subnet-0..7
    node-sa

The Lustre branch never waits for the GKE cluster or its pools: it is the slowest
resource and must start as early as the network allows. The image pre-pull and the model
prefetch (:mod:`rl_lustre.plan.startup`) move the image pull and the model download of
the first step onto branches that would otherwise wait.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .gke import gke_plan
from .graph import Plan, PlanGraphError, PlannedResource
from .local import local_plan

if TYPE_CHECKING:
    from ..spec import ClusterSpec

__all__ = ["Plan", "PlanGraphError", "PlannedResource", "build_plan"]


def build_plan(cluster: ClusterSpec) -> Plan:
    """The plan of ``cluster``'s deployment, derived offline from the spec alone.

    Built once per spec (specs are frozen, and so is the plan): later calls return the
    same object. A spec changed by ``attrs.evolve`` is a new spec with a plan of its own.

    Examples:
        >>> from rl_lustre import Cluster
        >>> from rl_lustre.plan import build_plan
        >>> plan = build_plan(Cluster(name="demo", project="my-project", region="us-east1",
        ...                           zone="us-east1-b"))
        >>> plan.keys()[:4]
        ['network', 'subnet', 'psa-range', 'psa-peering']
    """
    return cluster._derive("plan", lambda: local_plan(cluster) if cluster.backend == "local" else gke_plan(cluster))
