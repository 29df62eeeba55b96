"""``lose_head``: take a deployment's Ray head away the way a pod deletion does, and bring a new one back."""

from __future__ import annotations

import json
import logging
import signal
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..cluster import Cluster

__all__ = ["HeadLoss", "lose_head"]

logger = logging.getLogger("rl_lustre.testing.lose_head")


class HeadLoss:
    """What :func:`lose_head` did, and the head it brings back.

    Attributes:
        head: the head taken away (local: ``pid <n>``; fake GKE: its pod's name).
        reason: its termination reason, as its pod's status tells it (``Killed``, ``OOMKilled``, ``Evicted``).
        at: when it went (seconds since the epoch).
        back_after: seconds until the new head starts; None when none comes.
        ready_at: when the new head (and the worker nodes restarted with it) was ready.
        error: why bringing the new head back failed, if it did.
    """

    def __init__(self, head: str, reason: str, at: float, back_after: float | None) -> None:
        self.head = head
        self.reason = reason
        self.at = at
        self.back_after = back_after
        self.ready_at: float | None = None
        self.error: BaseException | None = None
        self._done = threading.Event()
        if back_after is None:
            self._done.set()

    def __repr__(self) -> str:
        return f"HeadLoss(head={self.head!r}, reason={self.reason!r}, back_after={self.back_after})"

    def wait(self, timeout: float | None = None) -> float | None:
        """Wait until the new head is ready (at once when none comes); returns when it was.

        Raises:
            TimeoutError: it was not ready within ``timeout``.
        """
        if not self._done.wait(timeout):
            raise TimeoutError(f"the head that replaces {self.head} was not ready after {timeout}s")
        if self.error is not None:
            raise self.error
        return self.ready_at

    def _bring_back(self, start: Callable[[], None]) -> None:
        def run() -> None:
            assert self.back_after is not None
            time.sleep(self.back_after)
            try:
                start()
                self.ready_at = time.time()
                logger.info("the head that replaces %s is ready", self.head)
            except BaseException as exc:  # reported through wait()
                self.error = exc
            finally:
                self._done.set()

        threading.Thread(target=run, name="rl_lustre-lose-head", daemon=True).start()


def lose_head(cluster: Cluster, *, reason: str = "Killed", back_after: float | None = 1.0) -> HeadLoss:
    """Take the Ray head of a running local deployment away, as a pod deletion (or an
    OOM kill, an eviction) does, and bring a new one as KubeRay would.

    Local: every process of the head is killed at once (``ray start``, GCS, raylet, dashboard,
    the jobs' drivers and our supervisors), and its status tells ``reason``, as a pod's would.
    The worker nodes lose their GCS; without GCS fault tolerance their raylets exit, and KubeRay
    restarts their pods: after ``back_after`` seconds a new head starts (on new ports, with an
    empty job table) and as many worker nodes as before join it. The deployment's keeper (a
    process outside the head) notices and resubmits the runs. With ``back_after=None`` no head
    comes back; the worker nodes are left as they are until ``down()``.

    Returns at once; the new head comes in the background (:meth:`HeadLoss.wait`).

    Examples:
        >>> with Cluster.local("demo", num_nodes=2, worker_nodes=2) as cluster:  # doctest: +SKIP
        ...     run = cluster.submit(job)
        ...     loss = lose_head(cluster, reason="OOMKilled")
        ...     run.wait()
        ...     run.restarts()[-1].cause
        'head-lost'

    Raises:
        ValueError: no head runs, or the deployment is not local.
    """
    from ..backends.local import LocalBackend

    backend = cluster._backend()
    if isinstance(backend, LocalBackend):
        return _lose_local(backend, reason, back_after)
    raise ValueError(f"cluster {cluster.name!r} is not local: only a local cluster can lose its head on purpose")


def _lose_local(backend: object, reason: str, back_after: float | None) -> HeadLoss:
    from ..backends.local import LocalBackend
    from ..oncluster.procs import session_of
    from ..ray.keeper import status_path
    from ..ray.processes import marked_pids, send_signal
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
    for _ in range(50):
        victims = [pid for pid in marked_pids(head.temp_dir) if session_of(pid) not in sessions]
        if not victims:
            break
        for pid in victims:
            send_signal(pid, signal.SIGKILL)
        time.sleep(0.05)
    if process is not None:
        process.wait()
    backend.head, backend._jobs = None, None
    logger.info("lost the local Ray head (pid %d: %s)", head.pid, reason)
    loss = HeadLoss(f"pid {head.pid}", reason, at, back_after)
    if back_after is not None:

        def back() -> None:
            # The old worker nodes' raylets exit with their GCS gone; KubeRay restarts their pods.
            for worker in workers:
                worker.kill()
            backend.start_head(keep=(WORKERS_FILE,))
            backend.start_workers(len(workers))

        loss._bring_back(back)
    return loss
