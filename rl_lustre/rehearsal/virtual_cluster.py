"""NeMo-RL's ``RayVirtualCluster`` at rehearsal scale: the job's GPUs held in Ray placement groups.

NeMo-RL v0.4.0 (``NVIDIA-NeMo/RL`` tag ``v0.4.0``, commit ``c751f81``,
``nemo_rl/distributed/virtual_cluster.py``, Apache-2.0) reserves a GRPO run's GPUs like
this, and the rehearsal does the same, written afresh, so that a local sweep meets the
contention a GKE sweep meets:

- **Shape** (``nemo_rl/algorithms/grpo.py`` ``setup``): with generation colocated (the
  recipes' default) one cluster ``grpo_policy_cluster`` of ``cluster.gpus_per_node``
  bundles on each of ``cluster.num_nodes`` nodes, each bundle ``{"CPU": 2, "GPU": 1}``
  for vLLM (``{"CPU": 1, ...}`` for Megatron generation). Not colocated: a
  ``grpo_train_cluster`` and a ``grpo_inference_cluster`` of one CPU per bundle, the
  inference taking ``policy.generation.colocated.resources`` (on one node, its GPUs
  come out of the train cluster's). A reward model's nodes come off the policy's.
- **Groups** (``_create_placement_groups_internal``, ``vllm_generation.py``): one ``PACK``
  group per node, named ``<cluster>-node<i>``; one group of every bundle,
  ``<cluster>-unified``, when vLLM's tensor x pipeline parallel size exceeds a node
  (strategy ``SPREAD`` when colocated, ``PACK`` when not).
- **Check and retries** (``_init_placement_groups``): before creating groups, the
  cluster's *total* GPUs and CPUs (``ray.cluster_resources()``) must cover the bundles,
  else :class:`ResourceInsufficientError`; that is retried
  ``NRL_VIRTUAL_CLUSTER_MAX_RETRIES`` times (default 6, which must be > 0) after
  ``2**i`` seconds each, then fails "Maximum number of retries reached". GPUs that exist
  but are taken pass the check.
- **Ready wait**: ``ray.get([pg.ready() ...], timeout=180)``; on timeout every group
  created is removed and the builtin ``TimeoutError`` ("Timed out waiting for placement
  groups to be ready...") is raised, with no retry.

The messages are NeMo-RL's, word for word: they are what a user and a log reader see.
One difference, announced in the log when used: ``RL_LUSTRE_REHEARSAL_PG_READY_TIMEOUT``
shortens the ready wait (NeMo-RL's is a fixed 180 s), so that tests of the failure are
quick.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections.abc import Mapping
from typing import Any

__all__ = [
    "MAX_RETRIES_ENV",
    "NEMO_RL_READY_TIMEOUT",
    "READY_TIMEOUT_ENV",
    "ResourceInsufficientError",
    "Shape",
    "VirtualCluster",
    "max_retries",
    "ready_timeout",
    "shapes",
]

MAX_RETRIES_ENV = "NRL_VIRTUAL_CLUSTER_MAX_RETRIES"
READY_TIMEOUT_ENV = "RL_LUSTRE_REHEARSAL_PG_READY_TIMEOUT"
NEMO_RL_MAX_RETRIES = 6
NEMO_RL_READY_TIMEOUT = 180.0


class ResourceInsufficientError(Exception):
    """The Ray cluster has fewer GPUs or CPUs in total than the job asks for (NeMo-RL's name)."""


@dataclasses.dataclass(frozen=True)
class Shape:
    """One ``RayVirtualCluster`` of GRPO's setup.

    Attributes:
        name: ``grpo_policy_cluster``, ``grpo_train_cluster`` or ``grpo_inference_cluster``.
        bundles_per_node: bundles (one GPU each) on each node.
        cpus_per_bundle: NeMo-RL's ``max_colocated_worker_groups``: 2 for vLLM colocated, else 1.
        unified: one group of every bundle instead of one per node.
        strategy: the unified group's strategy (per-node groups are always ``PACK``).
    """

    name: str
    bundles_per_node: tuple[int, ...]
    cpus_per_bundle: int
    unified: bool = False
    strategy: str = "PACK"

    @property
    def gpus(self) -> int:
        return sum(self.bundles_per_node)


def shapes(cfg: Mapping[str, Any]) -> list[Shape]:
    """The placement-group shapes GRPO's setup makes for the resolved config ``cfg``.

    Examples:
        >>> cfg = {"cluster": {"num_nodes": 2, "gpus_per_node": 8},
        ...        "policy": {"generation": {"backend": "vllm", "colocated": {"enabled": True},
        ...                                  "vllm_cfg": {"tensor_parallel_size": 8, "pipeline_parallel_size": 1}}}}
        >>> shapes(cfg)
        [Shape(name='grpo_policy_cluster', bundles_per_node=(8, 8), cpus_per_bundle=2, unified=False, strategy='PACK')]
    """
    cluster = cfg["cluster"]
    total, gpn = int(cluster["num_nodes"]), int(cluster["gpus_per_node"])
    gen = cfg["policy"]["generation"]
    backend = gen.get("backend", "vllm")
    colocated = bool((gen.get("colocated") or {}).get("enabled", True))
    vllm = gen.get("vllm_cfg") or {}
    model_parallel = int(vllm.get("tensor_parallel_size") or 1) * int(vllm.get("pipeline_parallel_size") or 1)
    reward = (cfg.get("env") or {}).get("reward_model") or {}
    rm_nodes, rm_gpus = 0, 0
    if reward.get("enabled"):
        rm_nodes = int((reward.get("resources") or {}).get("num_nodes") or 0)
        rm_gpus = int((reward.get("resources") or {}).get("gpus_per_node") or 0)
    policy_nodes = total if total == 1 else total - rm_nodes
    if colocated:
        policy_gpn = gpn - rm_gpus if total == 1 else gpn
        unified = backend == "vllm" and model_parallel > policy_gpn
        return [
            Shape(
                "grpo_policy_cluster",
                (policy_gpn,) * policy_nodes,
                1 if backend == "megatron" else 2,
                unified=unified,
                strategy="SPREAD" if unified else "PACK",
            )
        ]
    resources = gen.get("colocated", {}).get("resources") or {}
    inference_gpn = int(resources.get("gpus_per_node") or 0)
    inference_nodes = int(resources.get("num_nodes") or 0)
    train_gpn, train_nodes = gpn, policy_nodes
    if policy_nodes == 1:
        inference_nodes = 1
        train_gpn -= inference_gpn + (rm_gpus if total == 1 and reward.get("enabled") else 0)
    else:
        train_nodes -= inference_nodes
    return [
        Shape("grpo_train_cluster", (train_gpn,) * train_nodes, 1),
        Shape(
            "grpo_inference_cluster",
            (inference_gpn,) * inference_nodes,
            1,
            unified=model_parallel > inference_gpn,
            strategy="PACK",
        ),
    ]


def max_retries(env: Mapping[str, str] | None = None) -> int:
    """``NRL_VIRTUAL_CLUSTER_MAX_RETRIES`` (default 6), checked as NeMo-RL checks it."""
    value = int((os.environ if env is None else env).get(MAX_RETRIES_ENV, NEMO_RL_MAX_RETRIES))
    assert value > 0, f"{MAX_RETRIES_ENV}={value} must be an integer greater than 0"
    return value


def ready_timeout(env: Mapping[str, str] | None = None) -> float:
    """Seconds to wait for the groups: NeMo-RL's 180, unless ``RL_LUSTRE_REHEARSAL_PG_READY_TIMEOUT`` says."""
    text = (os.environ if env is None else env).get(READY_TIMEOUT_ENV)
    return NEMO_RL_READY_TIMEOUT if not text else float(text)


class VirtualCluster:
    """The placement groups of one :class:`Shape`, reserved as NeMo-RL reserves them."""

    def __init__(self, shape: Shape, *, retries: int, timeout: float, say: Any = print) -> None:
        self.shape = shape
        self.retries = retries
        self.timeout = timeout
        self.say = say
        self.groups: list[Any] = []

    def reserve(self) -> list[Any]:
        """Create the groups and wait until they hold their GPUs; NeMo-RL's errors otherwise."""
        for i in range(self.retries):
            try:
                self.groups = self._create()
                return self.groups
            except ResourceInsufficientError as exc:
                self.say(str(exc))
                self.say(f"Retrying placement group creation... {i + 1}/{self.retries}. Next retry in {2**i} seconds.")
                time.sleep(2**i)
        raise ResourceInsufficientError(
            f"Maximum number of retries reached ({self.retries}). Cluster resources may be insufficient or cluster "
            "itself is highly unstable. Please check your cluster configuration and your cluster logs."
        )

    def _create(self) -> list[Any]:
        import ray
        from ray.util.placement_group import placement_group, remove_placement_group

        total = ray.cluster_resources()
        gpus, cpus = self.shape.gpus, self.shape.gpus * self.shape.cpus_per_bundle
        if gpus > int(total.get("GPU", 0)):
            raise ResourceInsufficientError(
                f"Not enough GPUs available. Requested {gpus} GPUs, but only {int(total.get('GPU', 0))} are "
                "available in the cluster."
            )
        if cpus > int(total.get("CPU", 0)):
            raise ResourceInsufficientError(
                f"Not enough CPUs available. Requested {cpus} CPUs, but only {int(total.get('CPU', 0))} are "
                "available in the cluster."
            )
        bundle = {"CPU": self.shape.cpus_per_bundle, "GPU": 1}
        if self.shape.unified:
            groups = [
                placement_group(
                    [dict(bundle) for _ in range(gpus)], strategy=self.shape.strategy, name=f"{self.shape.name}-unified"
                )
            ]
        else:
            groups = [
                placement_group(
                    [dict(bundle) for _ in range(count)], strategy="PACK", name=f"{self.shape.name}-node{i}"
                )
                for i, count in enumerate(self.shape.bundles_per_node)
                if count > 0
            ]
        try:
            ray.get([g.ready() for g in groups], timeout=self.timeout)
        except (TimeoutError, ray.exceptions.GetTimeoutError) as exc:
            for g in groups:
                try:
                    remove_placement_group(g)
                except Exception as cleanup:  # as NeMo-RL: the cleanup never hides the timeout
                    logging.getLogger(__name__).debug("could not remove %s: %s", g, cleanup)
            raise TimeoutError(
                "Timed out waiting for placement groups to be ready. The cluster may not have enough resources "
                "to satisfy the requested configuration, or the resources may be busy with other tasks."
            ) from exc
        return groups

    def release(self) -> None:
        """Remove the groups (NeMo-RL's ``shutdown``); Ray also removes them when the driver exits."""
        if not self.groups:
            return
        from ray.util.placement_group import remove_placement_group

        for g in self.groups:
            try:
                remove_placement_group(g)
            except Exception as exc:  # the driver is going away; Ray removes them then
                logging.getLogger(__name__).debug("could not remove %s: %s", g, exc)
        self.groups = []
