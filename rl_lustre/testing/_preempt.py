"""``preempt``: take worker nodes away the way a Spot preemption does, and bring replacements back."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from .._public import public
from ._preemption import Preemption

if TYPE_CHECKING:
    from ..cluster import Cluster

__all__ = ["Preemption", "preempt"]

logger = logging.getLogger("rl_lustre.testing.preempt")


@public("rl_lustre.testing")
def preempt(cluster: Cluster, nodes: int = 1, back_after: float | None = 5.0) -> Preemption:
    """Preempt ``nodes`` worker nodes of a running local or fake-GKE deployment, as Spot does.

    Local (``Cluster.local(..., worker_nodes=N)``): every process of the worker nodes
    is killed at once (raylet, agents and the job's workers on them), as a vanishing
    VM takes them; Ray declares the nodes dead when their health checks fail. After
    ``back_after`` seconds as many new worker raylets start.

    Fake GKE (a cluster whose Kubernetes API is a :class:`~rl_lustre.testing.KubeFake`
    backing its worker pods with local raylets): the fake does what GKE does to a Spot
    node: see :meth:`KubeFake.preempt <rl_lustre.testing.KubeFake.preempt>`.

    Returns at once; the replacements come in the background.

    Examples:
        >>> with Cluster.local("demo", num_nodes=2, worker_nodes=2) as cluster:  # doctest: +SKIP
        ...     run = cluster.submit(job)
        ...     gone = preempt(cluster, nodes=1, back_after=5)
        ...     run.wait()
        ...     run.restarts()[0].nodes

    Args:
        cluster: a running deployment.
        nodes: how many worker nodes to take away.
        back_after: seconds until replacements start; None: capacity never returns.

    Raises:
        ValueError: fewer than ``nodes`` worker nodes run, or the backend has none.
    """
    from ..backends.local import LocalBackend

    if nodes < 1:
        raise ValueError(f"nodes={nodes!r}: must be at least 1")
    backend = cluster._backend()
    if isinstance(backend, LocalBackend):
        return _preempt_local(backend, nodes, back_after)
    from .kube import KubeFake

    fake = KubeFake.serving(cluster)
    if fake is None:
        raise ValueError(
            f"cluster {cluster.name!r} is neither local nor served by a KubeFake in this process: "
            "only those can be preempted on purpose"
        )
    return fake.preempt(cluster.name, nodes=nodes, back_after=back_after, namespace=cluster.namespace)


def _preempt_local(backend: object, nodes: int, back_after: float | None) -> Preemption:
    from ..backends.local import LocalBackend

    assert isinstance(backend, LocalBackend)
    running = backend.workers()
    if len(running) < nodes:
        raise ValueError(
            f"cannot preempt {nodes} worker node(s) of {backend.cluster.name!r}: {len(running)} run "
            "(start them with Cluster.local(..., worker_nodes=N))"
        )
    victims = running[:nodes]
    at = time.time()
    for worker in victims:
        worker.kill()
    logger.info("preempted local worker node(s) %s", [w.name for w in victims])
    preemption = Preemption([w.name for w in victims], at, back_after)
    if back_after is not None:
        preemption._bring_back(lambda: [w.name for w in backend.start_workers(len(running))])
    return preemption
