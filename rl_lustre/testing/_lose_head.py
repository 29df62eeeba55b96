"""``lose_head``: take a deployment's Ray head away the way a pod deletion does, and bring a new one back."""

from __future__ import annotations

import json
import logging
import time
from typing import TYPE_CHECKING

from .._public import public
from ._preemption import HeadLoss

if TYPE_CHECKING:
    from ..cluster import Cluster

__all__ = ["lose_head"]

logger = logging.getLogger("rl_lustre.testing.lose_head")


@public("rl_lustre.testing")
def lose_head(cluster: Cluster, *, reason: str = "Killed", back_after: float | None = 1.0) -> HeadLoss:
    """Take the Ray head of a running local or fake-GKE deployment away, as a pod deletion (or an
    OOM kill, an eviction) does, and bring a new one as KubeRay would.

    Local: every process of the head is killed at once (``ray start``, GCS, raylet, dashboard,
    the jobs' drivers and our supervisors), and its status tells ``reason``, as a pod's would.
    The worker nodes lose their GCS; without GCS fault tolerance their raylets exit, and KubeRay
    restarts their pods: after ``back_after`` seconds a new head starts (on new ports, with an
    empty job table) and as many worker nodes as before join it. The deployment's keeper (a
    process outside the head) notices and resubmits the runs. With ``back_after=None`` no head
    comes back; the worker nodes are left as they are until ``down()``.

    Fake GKE (a cluster whose Kubernetes API is a :class:`~rl_lustre.testing.KubeFake` with real
    Ray heads behind its head pod, as :class:`~rl_lustre.testing.FakeGKE` has): the head pod goes
    as GKE and KubeRay do it; see :mod:`rl_lustre.testing._kube_headloss`.

    Returns at once; the new head comes in the background (:meth:`HeadLoss.wait`).

    Examples:
        >>> with Cluster.local("demo", num_nodes=2, worker_nodes=2) as cluster:  # doctest: +SKIP
        ...     run = cluster.submit(job)
        ...     loss = lose_head(cluster, reason="OOMKilled")
        ...     run.wait()
        ...     run.restarts()[-1].cause
        'head-lost'

    Raises:
        ValueError: no head runs, or the deployment is neither local nor on a KubeFake.
    """
    from ..backends.local import LocalBackend

    backend = cluster._backend()
    if isinstance(backend, LocalBackend):
        return _lose_local(backend, reason, back_after)
    from .kube import KubeFake

    fake = KubeFake.serving(cluster)
    if fake is None:
        raise ValueError(
            f"cluster {cluster.name!r} is neither local nor served by a KubeFake in this process: "
            "only those can lose their head on purpose"
        )
    return fake.lose_head(cluster.name, reason=reason, back_after=back_after, namespace=cluster.namespace)


def _lose_local(backend: object, reason: str, back_after: float | None) -> HeadLoss:
    from ..backends.local import LocalBackend
    from ..ray.keeper import status_path
    from ..ray.processes import kill_head_processes
    from ..ray.workers import WORKERS_FILE, live_workers

    assert isinstance(backend, LocalBackend)
    head = backend._find()
    if head is None:
        raise ValueError(f"the local cluster {backend.cluster.name!r} has no Ray head running to lose")
    process = backend.head._process if backend.head is not None and backend.head.pid == head.pid else None
    workers = live_workers(head)
    sessions = {w.pid for w in workers}
    at = time.time()
    status_path(head.temp_dir).write_text(json.dumps({"pid": head.pid, "reason": reason, "at": at}))
    # Everything of the head's pod at once; the worker nodes (other pods) stay.
    kill_head_processes(head.temp_dir, spare_sessions=sessions)
    if process is not None:
        process.wait()
    backend.head, backend._jobs = None, None
    logger.info("lost the local Ray head (pid %d: %s)", head.pid, reason)
    loss = HeadLoss(f"pid {head.pid}", reason, at, back_after)
    if back_after is not None:

        def back() -> float:
            # The old worker nodes' raylets exit with their GCS gone; KubeRay restarts their pods.
            for worker in workers:
                worker.kill()
            backend.start_head(keep=(WORKERS_FILE,))
            ready = time.time()
            backend.start_workers(len(workers))
            return ready

        loss._bring_back(back)
    return loss
