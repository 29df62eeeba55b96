"""The capacity policy as a GKE ``ComputeClass`` (``cloud.google.com/v1``), built offline from the spec.

A ComputeClass is the decision "which capacity next" made by GKE's cluster autoscaler each
time a pod that selects the class needs a node: it tries the class's ``priorities`` in order,
and falls back to the next on a stock-out (GKE's "About custom ComputeClasses" and
"Troubleshoot custom ComputeClasses" pages). So the policy holds after ``up()`` as well: a
preempted worker, a flex-start node's end, any node lost later is replaced by the first kind
of the policy that has capacity then. What the object says, and why:

- ``priorities``: one rule per GPU node pool of the policy, in the policy's order (each kind in
  every candidate zone, the cluster's zone first, before the next kind:
  :func:`rl_lustre.spec.lanes.capacity_lanes`), each ``nodepools: [<pool>]``: one pool per
  rule, because GKE puts no order among the pools of one rule. The pools are made by ``up()``
  (they carry what a pool GKE would create lacks: the RDMA NICs, the preload disk, the node
  account) with the node label and ``NoSchedule`` taint
  ``cloud.google.com/compute-class=<class>`` that make a pool made by hand join a class
  (:func:`pool_labels`, :func:`pool_taint`). A flex-start rule carries
  ``capacityCheckWaitTimeSeconds``: the kind's ``wait``, how long GKE waits for flex-start
  capacity before the next rule. Other kinds need none: GKE checks Spot, on-demand and
  reservations at once and moves on at once on a stock-out.
- ``whenUnsatisfiable: DoNotScaleUp`` (:data:`WHEN_UNSATISFIABLE`): ``ScaleUpAnyway`` would
  have GKE create a node of the cluster's default configuration (E2, no GPU), billed and of no
  use to a Ray worker that asks for 8 GPUs. With ``DoNotScaleUp`` the workers stay Pending
  until a rule can be met; ``up()`` (its waits, ``on_no_capacity``) and the run's supervisor
  (``capacity_timeout``) bound that wait.
- ``activeMigration.optimizeRulePriority: false`` (:data:`ACTIVE_MIGRATION`): migration moves
  workloads to nodes of a higher rule when those have room, node by node. A Ray worker of a
  NeMo-RL run is one member of a gang (its NCCL groups and its placement group span every
  worker): moving one restarts the whole run from its last checkpoint, and would do so each
  time Spot comes back. A run stays where it is; to move it, stop it and submit it again (it
  resumes from its newest checkpoint on the nodes the class gives then).
- ``autoscalingPolicy.consolidationDelayMinutes: 1`` (:data:`CONSOLIDATION_DELAY_MINUTES`, the
  least GKE takes): a GPU node no pod of ours uses (a preempted Spot VM that the pool's
  instance group brings back while the run is on other nodes) goes after a minute, not the
  autoscaler's default ten. A node that runs a Ray worker is never unneeded.
- ``nodePoolAutoCreation.enabled: false``: only the deployment's own pools.

The CRD ships only inside GKE; the schema every class is checked against before it is sent
(:func:`rl_lustre.kube.schema.validate_compute_class`) is written from Google's field
reference (``crds/NOTICE``). No remote call here.

Examples:
    >>> from rl_lustre import Cluster
    >>> c = Cluster(name="demo", project="my-project", region="us-east1", zone="us-east1-b", fabric="tcp",
    ...             capacity=("spot", "flex-start", "on-demand"), capacity_zones=("us-east1-b", "us-east1-c"))
    >>> cc = compute_class_manifest(c)
    >>> cc["metadata"]["name"], cc["spec"]["whenUnsatisfiable"]
    ('demo-gpus', 'DoNotScaleUp')
    >>> [r["nodepools"][0] for r in cc["spec"]["priorities"]]
    ['gpu-pool', 'gpu-spot-c', 'gpu-flex-b', 'gpu-flex-c', 'gpu-ondemand-b', 'gpu-ondemand-c']
    >>> cc["spec"]["priorities"][2]["capacityCheckWaitTimeSeconds"]
    7200
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .. import naming
from ..catalog import CAPACITY_KIND_LABEL, COMPUTE_CLASS_LABEL, GPU_RESOURCE
from .labels import deployment_labels

if TYPE_CHECKING:
    from ..spec import ClusterSpec
    from ..spec.lanes import Lane

__all__ = [
    "ACTIVE_MIGRATION",
    "COMPUTE_CLASS_API",
    "CONSOLIDATION_DELAY_MINUTES",
    "WHEN_UNSATISFIABLE",
    "compute_class_manifest",
    "compute_class_rules",
    "pod_selector",
    "pod_tolerations",
    "pool_labels",
    "pool_taint",
]

COMPUTE_CLASS_API = "cloud.google.com/v1"
WHEN_UNSATISFIABLE = "DoNotScaleUp"
ACTIVE_MIGRATION = False
CONSOLIDATION_DELAY_MINUTES = 1


def compute_class_rules(
    cluster: ClusterSpec, zones: Sequence[str] | None = None, *, kinds: Collection[int] | None = None
) -> list[dict[str, Any]]:
    """The class's ``priorities``: one rule per lane of the policy over ``zones`` (by default the
    zones known offline), only for the policy's entries ``kinds`` (indexes into
    ``cluster.capacity``; None: all of them).

    Examples:
        >>> from rl_lustre import Capacity, Cluster
        >>> c = Cluster(name="demo", project="my-project", region="us-east1", zone="us-east1-b", fabric="tcp",
        ...             capacity=("reservation", Capacity("flex-start", wait=1800)), reservation="r")
        >>> compute_class_rules(c)
        [{'nodepools': ['gpu-pool']}, {'nodepools': ['gpu-flex-b'], 'capacityCheckWaitTimeSeconds': 1800}]
        >>> compute_class_rules(c, kinds=[1])
        [{'nodepools': ['gpu-flex-b'], 'capacityCheckWaitTimeSeconds': 1800}]
    """
    from ..spec.lanes import capacity_lanes

    rules: list[dict[str, Any]] = []
    for lane in capacity_lanes(cluster, zones):
        if kinds is not None and cluster.capacity.index(lane.capacity) not in kinds:
            continue
        rule: dict[str, Any] = {"nodepools": [lane.pool_name]}
        if lane.kind == "flex-start":
            rule["capacityCheckWaitTimeSeconds"] = int(lane.capacity.wait)
        rules.append(rule)
    return rules


def compute_class_manifest(
    cluster: ClusterSpec,
    labels: Mapping[str, str] | None = None,
    zones: Sequence[str] | None = None,
    *,
    kinds: Collection[int] | None = None,
) -> dict[str, Any]:
    """The deployment's ComputeClass (see the module's doc), checked against the vendored schema.

    Args:
        cluster: a GKE cluster spec.
        labels: the object's labels (by default the deployment's).
        zones: the candidate zones (by default those known offline: ``up()`` passes the zones
            it found for ``capacity_zones="region"``).
        kinds: only the rules of these entries of ``cluster.capacity`` (``up()`` leaves out the
            kinds after a queued flex-start entry until its ProvisioningRequest has answered).

    Raises:
        ConfigError: the object breaks the ComputeClass schema (naming the field).
    """
    from .schema import validate_compute_class

    obj = {
        "apiVersion": COMPUTE_CLASS_API,
        "kind": "ComputeClass",
        "metadata": {
            "name": naming.compute_class_name(cluster),
            "labels": dict(deployment_labels(cluster) if labels is None else labels),
        },
        "spec": {
            "description": f"GPU capacity of rl_lustre deployment {cluster.name}, in the order of its capacity policy",
            "priorities": compute_class_rules(cluster, zones, kinds=kinds),
            "whenUnsatisfiable": WHEN_UNSATISFIABLE,
            "activeMigration": {"optimizeRulePriority": ACTIVE_MIGRATION},
            "autoscalingPolicy": {"consolidationDelayMinutes": CONSOLIDATION_DELAY_MINUTES},
            "nodePoolAutoCreation": {"enabled": False},
        },
    }
    validate_compute_class(obj)
    return obj


def pool_labels(cluster: ClusterSpec, lane: Lane) -> dict[str, str]:
    """The node labels of ``lane``'s pool: the class it joins, and the kind of its capacity.

    Examples:
        >>> from rl_lustre import Cluster
        >>> from rl_lustre.spec.lanes import capacity_lanes
        >>> c = Cluster(name="demo", project="my-project", region="us-east1", zone="us-east1-b", fabric="tcp")
        >>> pool_labels(c, capacity_lanes(c)[0])
        {'cloud.google.com/compute-class': 'demo-gpus', 'rl-lustre/capacity': 'spot'}
    """
    return {COMPUTE_CLASS_LABEL: naming.compute_class_name(cluster), CAPACITY_KIND_LABEL: lane.kind}


def pool_taint(cluster: ClusterSpec) -> dict[str, str]:
    """The taint of every GPU pool of the class, as the GKE API takes it: with the label, what
    makes a pool made by hand join the class; only pods that select the class land there."""
    return {"key": COMPUTE_CLASS_LABEL, "value": naming.compute_class_name(cluster), "effect": "NO_SCHEDULE"}


def pod_selector(cluster: ClusterSpec) -> dict[str, str]:
    """The ``nodeSelector`` of a pod that runs on the class's GPU nodes, whichever pool they are in.

    Examples:
        >>> from rl_lustre import Cluster
        >>> pod_selector(Cluster(name="demo", project="my-project", region="us-east1", zone="us-east1-b"))
        {'cloud.google.com/compute-class': 'demo-gpus'}
    """
    return {COMPUTE_CLASS_LABEL: naming.compute_class_name(cluster)}


def pod_tolerations(cluster: ClusterSpec) -> list[dict[str, str]]:
    """The tolerations of a pod on the class's GPU nodes: the class's taint and GKE's GPU taint
    (GKE adds the first to pods that select the class; a pod that says so needs no webhook)."""
    return [
        {
            "key": COMPUTE_CLASS_LABEL,
            "operator": "Equal",
            "value": naming.compute_class_name(cluster),
            "effect": "NoSchedule",
        },
        {"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"},
    ]
