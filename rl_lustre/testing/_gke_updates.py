# proto-plus ships no type information: mypy takes its enum members for plain ints.
# mypy: disable-error-code="assignment"

"""The fake GKE's changes to a node pool in place: ``UpdateNodePool`` (its nodes' Kubernetes
labels and taints) and ``SetNodePoolAutoscaling``.

As GKE does (its "Update node labels and taints" page): the pool is ``RECONCILING`` for the
operation, then ``RUNNING`` with the new configuration, which applies to its running nodes
too (the Kubernetes side relabels and retaints them, ``on_node_pool_updated``) and to every
node it creates later. A pool being created or deleted refuses the change, as GKE refuses
an incompatible operation.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import grpc
from google.cloud import container_v1

from ._core import FakeError

if TYPE_CHECKING:
    from ._gke import GkeFake
    from ._grpc import GrpcServer

__all__ = ["register_updates"]

_POOL = container_v1.NodePool.Status


def register_updates(fake: GkeFake, server: GrpcServer, service: str) -> None:
    """Serve ``UpdateNodePool`` and ``SetNodePoolAutoscaling`` on ``server`` for ``fake``."""
    t = container_v1

    def change(name: str, what: str, apply: object) -> container_v1.Operation:
        _, pool = fake._pool(name)
        if pool.status != _POOL.RUNNING:
            raise FakeError(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"Cluster is running incompatible operation: node pool {pool.name} is "
                f"{_POOL(pool.status).name}; {what} waits until it is RUNNING.",
            )
        pool.status = _POOL.RECONCILING
        location = name.rsplit("/clusters/", 1)[0]
        # GKE reports a node pool changed in place as an UPDATE_CLUSTER operation.
        op = fake._start_op(location, container_v1.Operation.Type.UPDATE_CLUSTER, name)

        def finish() -> None:
            apply()  # type: ignore[operator]
            pool.status = _POOL.RUNNING
            if fake.core.on_node_pool_updated is not None:
                fake.core.on_node_pool_updated(pool)
            fake._finish(op)

        fake.core.schedule(fake.core.delay("gke.update_node_pool"), finish)
        return op

    def update_node_pool(request: container_v1.UpdateNodePoolRequest) -> container_v1.Operation:
        _, pool = fake._pool(request.name)

        def apply() -> None:
            if "labels" in request:
                pool.config.labels = dict(request.labels.labels)
            if "taints" in request:
                del pool.config.taints[:]
                pool.config.taints.extend(request.taints.taints)

        return change(request.name, "the update", apply)

    def set_autoscaling(request: container_v1.SetNodePoolAutoscalingRequest) -> container_v1.Operation:
        _, pool = fake._pool(request.name)
        a = request.autoscaling
        if a.enabled and a.total_max_node_count < a.total_min_node_count:
            raise FakeError(grpc.StatusCode.INVALID_ARGUMENT, "total_max_node_count is below total_min_node_count.")

        def apply() -> None:
            pool.autoscaling = container_v1.NodePoolAutoscaling(a)

        return change(request.name, "the autoscaling change", apply)

    server.add(service, "UpdateNodePool", "gke.UpdateNodePool", update_node_pool, t.UpdateNodePoolRequest, t.Operation)
    server.add(
        service,
        "SetNodePoolAutoscaling",
        "gke.SetNodePoolAutoscaling",
        set_autoscaling,
        t.SetNodePoolAutoscalingRequest,
        t.Operation,
    )
