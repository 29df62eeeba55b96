"""Changing a GKE node pool in place: its nodes' Kubernetes labels and taints
(``UpdateNodePool``), and its autoscaling (``SetNodePoolAutoscaling``).

GKE applies a label or taint update to the pool's existing nodes and to every node it
creates later, without recreating them (GKE's "Update node labels and taints"); autoscaling
changes the bounds the cluster autoscaler keeps the pool within. ``up()`` uses both to bring
a pool made before the ComputeClass (a fixed-size Spot pool, no class label or taint) to the
class's shape (:mod:`rl_lustre.provision.pool_upgrade`). Only pools with our labels are changed.

Example::

    pools = GkeNodePoolUpdates()
    pools.update_nodes(".../nodePools/gpu-pool", labels={"cloud.google.com/compute-class": "demo-gpus"},
                       taints=[...], deployment="demo")
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from google.cloud import container_v1

from ._ownership import check_owned
from ._resource import DELETE_TIMEOUT
from .container import GkeNodePools, _split_pool

__all__ = ["GkeNodePoolUpdates"]


class GkeNodePoolUpdates(GkeNodePools):
    """:class:`~rl_lustre.gcp.container.GkeNodePools` that also change a pool in place."""

    def _mine(self, name: str, deployment: str) -> container_v1.NodePool:
        found = self.get_or_none(name)
        if found is None:
            from ..errors import NotFoundError

            raise NotFoundError(f"GKE node pool {name} not found")
        check_owned("GKE node pool", name, found.config.resource_labels, deployment)
        return found

    def _run(self, action: str, name: str, fn: Any, request: Mapping[str, Any], timeout: float) -> None:
        m = _split_pool(name)
        op = self._call(action, name, fn, request=dict(request), retry=None)
        self.wait_operation(
            op,
            location_path=f"projects/{m['project']}/locations/{m['location']}",
            what=f"GKE node pool {name} to be updated",
            action=action,
            resource=name,
            zone=None,
            timeout=timeout,
        )

    def update_nodes(
        self,
        name: str,
        *,
        labels: Mapping[str, str],
        taints: Sequence[Mapping[str, str]],
        deployment: str,
        timeout: float = DELETE_TIMEOUT,
    ) -> container_v1.NodePool:
        """Give the pool's nodes exactly these Kubernetes ``labels`` and ``taints`` (``effect``
        as the API spells it: ``NO_SCHEDULE``); returns the pool as it is then.

        Raises:
            OwnershipError: the pool carries no labels of ``deployment``.
            OperationFailedError: GKE refused the update.
        """
        found = self._mine(name, deployment)
        request = {
            "name": name,
            # Required by the API; "-" keeps the pool's version, as gcloud sends it.
            "node_version": "-",
            "image_type": found.config.image_type or "COS_CONTAINERD",
            "labels": container_v1.NodeLabels(labels=dict(labels)),
            "taints": container_v1.NodeTaints(
                taints=[
                    container_v1.NodeTaint(
                        key=t["key"], value=t["value"], effect=container_v1.NodeTaint.Effect.__members__[t["effect"]]
                    )
                    for t in taints
                ]
            ),
        }
        self._run("update", name, self.client.update_node_pool, request, timeout)
        return self._mine(name, deployment)

    def set_autoscaling(
        self, name: str, *, minimum: int, maximum: int, deployment: str, timeout: float = DELETE_TIMEOUT
    ) -> container_v1.NodePool:
        """Autoscale the pool from ``minimum`` to ``maximum`` nodes in all (location policy ``ANY``).

        Raises:
            OwnershipError: the pool carries no labels of ``deployment``.
            OperationFailedError: GKE refused the change.
        """
        self._mine(name, deployment)
        autoscaling = container_v1.NodePoolAutoscaling(
            enabled=True,
            total_min_node_count=minimum,
            total_max_node_count=maximum,
            location_policy=container_v1.NodePoolAutoscaling.LocationPolicy.ANY,
        )
        self._run(
            "set the autoscaling of",
            name,
            self.client.set_node_pool_autoscaling,
            {"name": name, "autoscaling": autoscaling},
            timeout,
        )
        return self._mine(name, deployment)
