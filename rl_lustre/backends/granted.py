"""What jobs submitted on a GKE deployment are told of the capacity ``up()`` got: when it
ends (:func:`granted_deadline`: the save-by deadline of flex-start nodes) and which of its
nodes are an on-demand fallback (:func:`on_demand_fallback`: the run's supervisor records
when it runs on them, :mod:`rl_lustre.oncluster.fallback`). No remote call.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import attrs

if TYPE_CHECKING:
    from ..nemo_rl.deadline import Deadline
    from ..prices import Prices
    from ..spec import ClusterSpec

__all__ = ["OnDemandFallback", "granted_deadline", "on_demand_fallback"]


def granted_deadline(lane: Any, arrived: float | None, ends_at: float | None = None) -> Deadline | None:
    """When the nodes of the lane that delivered them go: when GKE says (``ends_at``: the
    earliest termination time on the nodes, :func:`rl_lustre.kube.readiness.termination_end`),
    else, computed, flex-start nodes live ``max_run_duration`` from their arrival; other
    capacity does not end (None).

    Examples:
        >>> from rl_lustre import Capacity
        >>> from types import SimpleNamespace
        >>> flex = SimpleNamespace(capacity=Capacity("flex-start", max_run_duration=3600))
        >>> granted_deadline(flex, 100.0).end, granted_deadline(flex, 100.0, ends_at=3500.0).end
        (3700.0, 3500.0)
        >>> granted_deadline(SimpleNamespace(capacity=Capacity("spot")), 100.0) is None
        True
    """
    from ..nemo_rl.deadline import Deadline

    if ends_at is not None:
        return Deadline(end=ends_at)
    capacity = getattr(lane, "capacity", None)
    if capacity is None or arrived is None or capacity.kind != "flex-start" or not capacity.max_run_duration:
        return None
    return Deadline.after(arrived, float(capacity.max_run_duration))


@attrs.frozen
class OnDemandFallback:
    """Nodes whose name starts with one of ``prefixes`` are on-demand, though the capacity
    policy starts with another kind; ``note`` says what that means (the policy's first
    choice, what an on-demand node costs more per hour)."""

    prefixes: tuple[str, ...]
    note: str

    def options(self) -> dict[str, Any]:
        """As :func:`rl_lustre.recovery.shipping.supervised` takes them."""
        return {"on_demand": self.prefixes, "fallback_note": self.note}


def on_demand_fallback(
    cluster: ClusterSpec, pools: Iterable[Any], prices: Prices | None = None
) -> OnDemandFallback | None:
    """The on-demand GPU pools among ``pools`` (``container_v1.NodePool``, live) as an
    on-demand fallback, priced by ``prices`` (by default :class:`rl_lustre.prices.Prices`);
    None when the policy starts with on-demand or no such pool exists.

    Examples:
        >>> from google.cloud import container_v1
        >>> from rl_lustre import Cluster
        >>> c = Cluster(name="demo", project="my-project", region="us-east1", zone="us-east1-b",
        ...             capacity=("spot", "on-demand"))
        >>> url = "https://www.googleapis.com/compute/v1/projects/p/zones/us-east1-b/instanceGroupManagers/"
        >>> gpus = container_v1.NodeConfig(accelerators=[container_v1.AcceleratorConfig(accelerator_count=8)])
        >>> pool = container_v1.NodePool(name="gpu-ondemand-b", instance_group_urls=[url + "gke-demo-gpu-ond-1a-grp"],
        ...                              config=gpus)
        >>> told = on_demand_fallback(c, [pool])
        >>> told.prefixes, told.note
        (('gke-demo-gpu-ond-1a-',), 'the policy starts with spot; an on-demand a4-highgpu-8g node costs $64.15/h more')
    """
    from ..gcp.pool_provisioning import node_prefixes
    from ..plan.capacity import PROVISIONING
    from ..prices import Prices

    first = cluster.capacity[0] if cluster.capacity else None
    if first is None or first.kind == "on-demand":
        return None
    prefixes = node_prefixes(pools, "on-demand")
    if not prefixes:
        return None
    chosen = prices or Prices()
    machine = str(cluster.machine_type)
    demand, _ = chosen.machine_rate(machine, "on-demand", cluster.region)
    other, _ = chosen.machine_rate(machine, PROVISIONING[first.kind], cluster.region)
    note = f"the policy starts with {first.label}"
    if demand is not None and other is not None:
        note += f"; an on-demand {machine} node costs ${demand - other:.2f}/h more"
    return OnDemandFallback(prefixes, note)
