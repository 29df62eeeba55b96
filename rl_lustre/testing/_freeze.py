"""``freeze``: stop a job's worker processes on a worker node, the way a stuck rank stops.

A rank that hangs (a deadlock, a kernel that never returns, a collective waiting on a peer)
does not die: its node stays alive, its raylet answers health checks, and every rank that
meets it in a collective waits for ever. :func:`freeze` does that to a running deployment of
this machine: it sends SIGSTOP to the job's Ray workers on ``nodes`` worker nodes (and every
process below them), never to a raylet or an agent, which would make the node look lost.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
from typing import TYPE_CHECKING, Any

from .._public import public

if TYPE_CHECKING:
    from ..cluster import Cluster

__all__ = ["Freeze", "freeze"]

logger = logging.getLogger("rl_lustre.testing.freeze")


@public("rl_lustre.testing")
class Freeze:
    """What :func:`freeze` stopped.

    Attributes:
        nodes: the Ray names of the nodes whose workers were stopped (local: ``worker-<n>``).
        pids: the processes stopped (their actors' workers and everything below them).
        actors: ``(class name, pid)`` of the actors stopped.
        at: when (seconds since the epoch).
    """

    def __init__(self, nodes: list[str], pids: list[int], actors: list[tuple[str, int]], at: float) -> None:
        self.nodes = tuple(nodes)
        self.pids = tuple(pids)
        self.actors = tuple(actors)
        self.at = at

    def __repr__(self) -> str:
        return f"Freeze(nodes={self.nodes}, pids={self.pids})"

    def thaw(self) -> None:
        """SIGCONT what is still there (a process the run's recovery killed is gone)."""
        for pid in self.pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGCONT)


@public("rl_lustre.testing")
def freeze(cluster: Cluster, nodes: int = 1) -> Freeze:
    """Stop the job's worker processes on ``nodes`` worker nodes of a running local or fake-GKE
    deployment with SIGSTOP, as a stuck rank stops: its node stays alive.

    The workers are the Ray actors alive on the node (a rehearsal's ``_NodeWorker``, NeMo-RL's
    policy and generation workers) and every process below them; the raylet, its agents and
    idle workers are left alone. The nodes taken are those running actors, by name.

    Examples:
        >>> with Cluster.local("demo", num_nodes=2, worker_nodes=2) as cluster:  # doctest: +SKIP
        ...     run = cluster.submit(attrs.evolve(job, hang_timeout=60))
        ...     stuck = freeze(cluster, nodes=1)
        ...     run.wait()
        ...     run.restarts()[0].cause, run.diagnostics()[0].summary
        ('hung', (...))

    Args:
        cluster: a running deployment: ``Cluster.local(..., worker_nodes=N)``, or one whose
            Kubernetes API is a :class:`~rl_lustre.testing.KubeFake` of this process (its worker
            pods' raylets run on this machine).
        nodes: how many worker nodes to freeze.

    Raises:
        ValueError: fewer than ``nodes`` worker nodes run the job's actors, or the deployment's
            processes are not on this machine.
    """
    from ..backends.local import LocalBackend
    from ..oncluster.probe import descendants, proc_table
    from ..oncluster.raystate import StateApi

    if nodes < 1:
        raise ValueError(f"nodes={nodes!r}: must be at least 1")
    backend = cluster._backend()
    if not isinstance(backend, LocalBackend):
        from .kube import KubeFake

        if KubeFake.serving(cluster) is None:
            raise ValueError(
                f"cluster {cluster.name!r} is neither local nor served by a KubeFake in this process: "
                "only those run their Ray workers on this machine"
            )
    jobs: Any = getattr(backend, "jobs")  # noqa: B009 (every backend here has a Jobs API)
    api = StateApi(jobs.address, headers=dict(jobs._headers))
    table = {str(n.get("node_id")): n for n in api.list("nodes")}
    workers = {k for k, n in table.items() if n.get("state") == "ALIVE" and not n.get("is_head_node")}
    by_node: dict[str, list[tuple[str, int]]] = {}
    for a in api.list("actors"):
        node = str(a.get("node_id") or "")
        if a.get("state") == "ALIVE" and a.get("pid") and node in workers:
            by_node.setdefault(node, []).append((str(a.get("class_name") or "actor"), int(a["pid"])))
    if len(by_node) < nodes:
        raise ValueError(
            f"cannot freeze {nodes} worker node(s) of {cluster.name!r}: {len(by_node)} run a job's workers"
        )
    chosen = sorted(by_node, key=lambda k: str(table[k].get("node_name") or k))[:nodes]
    actors = [a for k in chosen for a in by_node[k]]
    pids = descendants([pid for _, pid in actors], proc_table())
    at = time.time()
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGSTOP)
    names = [str(table[k].get("node_name") or k) for k in chosen]
    logger.info("froze the workers of node(s) %s: %s", names, actors)
    return Freeze(names, pids, actors, at)
