"""Per-node work for the rehearsal, placed in the job's placement groups the way NeMo-RL places its workers.

NeMo-RL starts its policy and generation workers as Ray actors in the bundles of the
placement groups its ``RayVirtualCluster`` reserved (:mod:`.virtual_cluster`), and every
step waits on them with ``ray.get``. When a node dies, its actors die with it and the
step's ``ray.get`` raises ``ray.exceptions.ActorDiedError``: the GRPO driver fails with
that traceback and exit status 1.

:class:`NodeWorkers` does the same at rehearsal scale: one actor per node, in the
first bundle of that node's group (one CPU and the bundle's GPU, as Ray resources;
nothing runs on a GPU), called once per step. Inside a step the workers meet the way
NeMo-RL's ranks meet in a collective: each calls :meth:`_NodeWorker.all_reduce`, which
returns only once every worker of the step has arrived (at a rendezvous actor, in the
first bundle). So one worker that stops -- a stuck rank, or one stopped with SIGSTOP by
:func:`rl_lustre.testing.freeze` -- stalls them all and the driver with them, with every
node alive, as a hung collective stalls a real run. Each worker keeps a stand-in of
PyTorch's NCCL flight recorder (:mod:`.flight_recorder`).
"""

from __future__ import annotations

import asyncio
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
        first = PlacementGroupSchedulingStrategy(places[0][0], places[0][1])
        self.rendezvous = (
            ray.remote(num_cpus=0, max_restarts=0)(_Rendezvous).options(scheduling_strategy=first).remote(len(places))
        )
        self.actors: list[Any] = [
            worker.options(scheduling_strategy=PlacementGroupSchedulingStrategy(g, i)).remote(rank, self.rendezvous)
            for rank, (g, i) in enumerate(places)
        ]
        self.nodes: list[str] = ray.get([a.node.remote() for a in self.actors])

    def step(self, k: int) -> None:
        """Run step ``k`` on every node; raises Ray's ``ActorDiedError`` when a node is gone."""
        self._ray.get([a.step.remote(k) for a in self.actors])


class _Rendezvous:
    """Where the workers of a step meet: :meth:`arrive` returns once all of them have."""

    def __init__(self, world: int) -> None:
        self.world = world
        self.arrived: dict[int, set[int]] = {}
        self.done: dict[int, asyncio.Event] = {}

    async def arrive(self, k: int, rank: int) -> int:
        self.arrived.setdefault(k, set()).add(rank)
        done = self.done.setdefault(k, asyncio.Event())
        if len(self.arrived[k]) >= self.world:
            done.set()
            self.done.pop(k - 2, None)
            self.arrived.pop(k - 2, None)
        await done.wait()
        return len(self.arrived[k])


class _NodeWorker:
    def __init__(self, rank: int, rendezvous: Any) -> None:
        from .flight_recorder import StandInRecorder

        self.rank = rank
        self.rendezvous = rendezvous
        self.recorder = StandInRecorder(rank)

    def node(self) -> str:
        import ray

        ctx = ray.get_runtime_context()
        return f"{ctx.get_node_id()[:8]} ({os.uname().nodename}, pid {os.getpid()})"

    def all_reduce(self, k: int) -> int:
        """Meet every other worker of step ``k``, as ranks meet in a collective."""
        import ray

        entry = self.recorder.started("all_reduce", k)
        world = ray.get(self.rendezvous.arrive.remote(k, self.rank))
        self.recorder.completed(entry)
        return int(world)

    def step(self, k: int) -> int:
        self.all_reduce(k)
        return k
