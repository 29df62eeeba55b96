"""Per-node work for the rehearsal, placed in the job's placement groups the way NeMo-RL places its workers.

NeMo-RL starts its policy and generation workers as Ray actors in the bundles of the
placement groups its ``RayVirtualCluster`` reserved (:mod:`.virtual_cluster`), and every
step waits on them with ``ray.get``. When a node dies, its actors die with it and the
step's ``ray.get`` raises ``ray.exceptions.ActorDiedError``: the GRPO driver fails with
that traceback and exit status 1.

:class:`NodeWorkers` does the same at rehearsal scale: one actor per node, in the
first bundle of that node's group (one CPU and the bundle's GPU, as Ray resources;
nothing runs on a GPU), called once per step.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

__all__ = ["NodeWorkers"]


class NodeWorkers:
    """One Ray actor per node: in bundle 0 of each per-node group, or in every
    ``bundles_per_node``-th bundle of a unified group."""

    def __init__(self, groups: Sequence[Any], *, unified: bool, bundles_per_node: int) -> None:
        import ray
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        self._ray = ray
        worker = ray.remote(num_cpus=1, num_gpus=1, max_restarts=0)(_NodeWorker)
        places = (
            [(groups[0], i) for i in range(0, len(groups[0].bundle_specs), max(bundles_per_node, 1))]
            if unified
            else [(g, 0) for g in groups]
        )
        self.actors: list[Any] = [
            worker.options(scheduling_strategy=PlacementGroupSchedulingStrategy(g, i)).remote() for g, i in places
        ]
        self.nodes: list[str] = ray.get([a.node.remote() for a in self.actors])

    def step(self, k: int) -> None:
        """Run step ``k`` on every node; raises Ray's ``ActorDiedError`` when a node is gone."""
        self._ray.get([a.step.remote(k) for a in self.actors])


class _NodeWorker:
    def node(self) -> str:
        import ray

        ctx = ray.get_runtime_context()
        return f"{ctx.get_node_id()[:8]} ({os.uname().nodename}, pid {os.getpid()})"

    def step(self, k: int) -> int:
        return k
