"""``up()`` on a deployment made before the ComputeClass: its GPU pools brought to the class's
shape, in place, or a clear word on what to do.

Before the ComputeClass a deployment's first GPU pool was a fixed-size pool (Spot, by
default) whose nodes carried no class label or taint, and a policy that listed flex-start
after Spot had a ``gpu-standby`` pool beside it. :func:`bring_to_shape` compares a pool
that exists with what its lane's pool is now (:func:`rl_lustre.plan.nodepools.gpu_pool`):

- its nodes' Kubernetes labels and taints (the class's label and ``NoSchedule`` taint, the
  ``rl-lustre/capacity`` label): changed in place (``UpdateNodePool``), which GKE applies
  to the running nodes without recreating them; running pods stay (a ``NoSchedule`` taint
  evicts nothing);
- its autoscaling (a fixed-size Spot pool becomes 0 to ``num_nodes``): changed in place
  (``SetNodePoolAutoscaling``); the autoscaler keeps the nodes that run pods;
- what GKE cannot change on a pool (Spot or not, flex-start, the machine type): a
  :class:`~rl_lustre.errors.ConfigError` that names the pool and what to do.

:func:`retire_standby` deletes an older version's ``gpu-standby`` pool when no node runs in
it (the class's flex-start rule does its job now), or keeps it, saying so, while one does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..catalog import GKE_NODEPOOL_LABEL
from ..errors import ConfigError

if TYPE_CHECKING:
    from .context import Context

__all__ = ["bring_to_shape", "retire_standby"]

_EFFECTS = {1: "NO_SCHEDULE", 2: "PREFER_NO_SCHEDULE", 3: "NO_EXECUTE"}


def _kind(config: Any) -> str:
    return "Spot" if config.spot else "flex-start" if config.flex_start else "on-demand or reserved"


def bring_to_shape(ctx: Context, path: str, found: Any, node: Any) -> str | None:
    """Make the pool ``found`` (a ``container_v1.NodePool`` at ``path``) what ``node`` (its plan
    node) says, where GKE can change it in place; returns a note of what changed, or None.

    Raises:
        ConfigError: the pool differs in what GKE cannot change.
    """
    s = node.settings
    want = "Spot" if s["spot"] else "flex-start" if s.get("flex_start") else "on-demand or reserved"
    if _kind(found.config) != want or found.config.machine_type != s["machine_type"]:
        raise ConfigError(
            "Cluster",
            "capacity",
            ctx.cluster.capacity[0].kind,
            f"GKE node pool {found.name} exists as {_kind(found.config)} {found.config.machine_type} nodes, but the "
            f"policy's pool of that name is {want} {s['machine_type']}, and GKE cannot change that on a pool: "
            f"delete the pool (cluster.down(keys=['gpu-pool']) deletes the GPU pools, or gcloud container node-pools "
            f"delete {found.name}) and run up() again",
        )
    changes = []
    labels = dict(found.config.labels)
    wanted_labels = {**labels, **s["labels"]}
    taints = {(t.key, t.value, _EFFECTS.get(int(t.effect), "NO_SCHEDULE")) for t in found.config.taints}
    wanted_taints = {(t["key"], t["value"], t["effect"]) for t in s["taints"]}
    if labels != wanted_labels or not wanted_taints <= taints:
        merged = sorted(taints | wanted_taints)
        ctx.apis.pools.update_nodes(
            path,
            labels=wanted_labels,
            taints=[{"key": k, "value": v, "effect": e} for k, v, e in merged],
            deployment=ctx.deployment,
        )
        changes.append("the ComputeClass's label and taint on its nodes")
    autoscaling = s.get("autoscaling")
    a = found.autoscaling
    if autoscaling and (
        not a.enabled
        or a.total_max_node_count != autoscaling["total_max_node_count"]
        or a.total_min_node_count != autoscaling["total_min_node_count"]
    ):
        ctx.apis.pools.set_autoscaling(
            path,
            minimum=autoscaling["total_min_node_count"],
            maximum=autoscaling["total_max_node_count"],
            deployment=ctx.deployment,
        )
        changes.append(
            f"autoscaling from {autoscaling['total_min_node_count']} to {autoscaling['total_max_node_count']} nodes"
        )
    if not changes:
        return None
    return f"{found.name} brought to the ComputeClass's shape: {' and '.join(changes)}"


def retire_standby(ctx: Context, cluster: str, *, api: Any = None) -> list[str]:
    """Delete an older version's ``gpu-standby`` pool of the GKE ``cluster`` (its full name) when
    no node runs in it (``api``: the Kubernetes API to look with; without it the pool is kept);
    returns notes."""
    from ..gcp._ownership import check_owned
    from ..kube.client import ResourceClient
    from ..naming import gpu_standby_pool_name

    name = gpu_standby_pool_name(ctx.cluster)
    path = f"{cluster}/nodePools/{name}"
    found = ctx.apis.pools.get_or_none(path)
    if found is None:
        return []
    check_owned("GKE node pool", path, found.config.resource_labels, ctx.deployment)
    nodes = (
        None
        if api is None
        else ResourceClient(api, "Node", None).list(label_selector=f"{GKE_NODEPOOL_LABEL}={name}")[0]
    )
    if nodes is None or nodes:
        count = "its nodes" if nodes is None else f"{len(nodes)} node(s) of it"
        return [
            f"kept {name}, the standby pool of an older rl_lustre: {count} may run a job (the ComputeClass's "
            "flex-start rule does its job now; down() removes it)"
        ]
    ctx.apis.pools.delete(path, deployment=ctx.deployment)
    return [f"deleted {name}, the standby pool of an older rl_lustre (the ComputeClass's flex-start rule does its job)"]
