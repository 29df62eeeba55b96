"""Per-node work for the rehearsal, placed on Ray's worker nodes the way NeMo-RL places its workers.

NeMo-RL's ``RayVirtualCluster`` reserves, for ``cluster.num_nodes`` x
``cluster.gpus_per_node``, one placement-group bundle of GPUs per node and starts its
policy and generation workers as Ray actors in those bundles; every step waits on them
with ``ray.get``. When a node dies, its actors die with it and the step's ``ray.get``
raises ``ray.exceptions.ActorDiedError``: the GRPO driver fails with that traceback and
exit status 1.

:class:`NodeWorkers` does the same at rehearsal scale: one actor per node, holding
that node's GPUs (as Ray resources; nothing runs on a GPU), called once per step. It
needs the job's Ray cluster (``ray.init()`` inside a Ray job finds it) to have the
GPU nodes; it waits for them as NeMo-RL waits for its placement groups.
"""

from __future__ import annotations

import logging
import os
from typing import Any

__all__ = ["NodeWorkers"]

PLACEMENT_TIMEOUT = 120.0


class NodeWorkers:
    """One Ray actor per node, each holding ``gpus_per_node`` GPUs, on distinct nodes."""

    def __init__(self, num_nodes: int, gpus_per_node: int, *, timeout: float = PLACEMENT_TIMEOUT) -> None:
        import ray
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        self._ray = ray
        ray.init(address=os.environ.get("RAY_ADDRESS", "auto"), logging_level=logging.WARNING, log_to_driver=False)
        bundles = [{"GPU": float(gpus_per_node), "CPU": 1.0} for _ in range(num_nodes)]
        self._group = placement_group(bundles, strategy="STRICT_SPREAD", name="rl_lustre-rehearsal")
        try:
            ray.get(self._group.ready(), timeout=timeout)
        except ray.exceptions.GetTimeoutError as exc:
            raise TimeoutError(
                f"Timed out after {timeout:g}s waiting for {num_nodes} node(s) with {gpus_per_node} GPU(s) each "
                f"(cluster resources: {ray.cluster_resources()})"
            ) from exc
        worker = ray.remote(num_cpus=1, num_gpus=gpus_per_node, max_restarts=0)(_NodeWorker)
        self.actors: list[Any] = [
            worker.options(scheduling_strategy=PlacementGroupSchedulingStrategy(self._group, i)).remote()
            for i in range(num_nodes)
        ]
        self.nodes: list[str] = ray.get([a.node.remote() for a in self.actors])

    def step(self, k: int) -> None:
        """Run step ``k`` on every node; raises Ray's ``ActorDiedError`` when a node is gone."""
        self._ray.get([a.step.remote(k) for a in self.actors])

    def close(self) -> None:
        self._ray.shutdown()


class _NodeWorker:
    def node(self) -> str:
        import ray

        ctx = ray.get_runtime_context()
        return f"{ctx.get_node_id()[:8]} ({os.uname().nodename}, pid {os.getpid()})"

    def step(self, k: int) -> int:
        return k
