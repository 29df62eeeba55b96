"""The goodput ledger's evidence on a local cluster: its raylets, Ray's node table, the jobs.

A local cluster's GPU nodes are its worker raylets (``Cluster.local(worker_nodes=N)``):
each is billed from its launch to its end as ``workers.json`` records them (see
:mod:`rl_lustre.ray.workers`), Ready and its Ray worker up when Ray's node table says its
raylet registered (``start_time_ms`` of the node of that name). Without worker nodes the
head stands for the cluster's ``num_nodes`` nodes: one *lane* per node, each billed from
the head's launch (``head.json``). A local cluster costs nothing: every node is priced at
$0 (:meth:`GoodputLedger.priced <rl_lustre.goodput.GoodputLedger.priced>` shows a cloud
price).

The evidence lives in the running head (the job logs, the node table): take the ledger
before ``down()``.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from ..goodput.timeline import Evidence, NodeSpan
from ..ray.state import RayNode, node_table
from ..ray.workers import worker_records
from .goodput import TimelineCache, collect_runs

if TYPE_CHECKING:
    from .local import LocalBackend

__all__ = ["local_evidence", "worker_spans"]

# A raylet registers after its launch; one of the same name before that is an older node's.
_SLACK = 2.0


def local_evidence(
    backend: LocalBackend, since: float, until: float | None, *, cache: TimelineCache | None = None
) -> Evidence:
    """Everything the ledger needs about ``backend``'s cluster over ``[since, until)``.

    Raises:
        NotReadyError: the head is not running (its job logs and node table went with it).
        RayError: the head does not answer.
    """
    head = backend.head_for_goodput()
    now = time.time()
    ray = node_table(head.dashboard_url, head.headers())
    cluster = backend.cluster
    notes: list[str] = []
    if cluster.worker_nodes:
        nodes = worker_spans(worker_records(head.temp_dir), ray)
    else:
        nodes = head_lanes(cluster.num_nodes, int(cluster.gpus_per_node or 0), head.launched_at, ray)
    runs, foreign = collect_runs(backend.jobs, since, until, now, cache)
    return Evidence(nodes=tuple(nodes), runs=tuple(runs), now=now, foreign=tuple(foreign), notes=tuple(notes))


def worker_spans(records: dict[str, dict[str, float | None]], ray: list[RayNode]) -> list[NodeSpan]:
    """One node per worker raylet ever started, matched to Ray's nodes by name and time.

    Examples:
        >>> ray = [RayNode("id1", "worker-1", "127.0.0.1", "DEAD", 1.0, 12.0, 40.0)]
        >>> [span] = worker_spans({"worker-1": {"pid": 7, "num_gpus": 1, "launched_at": 10.0, "ready_at": 13.0,
        ...                                     "ended_at": 39.5}}, ray)
        >>> span.billed_from, span.ready_at, span.billed_to, span.ray_node_ids
        (10.0, 12.0, 39.5, ('id1',))
    """
    spans = []
    for name, r in records.items():
        launched, ended = r.get("launched_at"), r.get("ended_at")
        mine = [
            n
            for n in ray
            if n.name == name
            and n.start is not None
            and (launched is None or n.start >= launched - _SLACK)
            and (ended is None or n.start <= ended)
        ]
        first = min((n.start for n in mine if n.start is not None), default=None)
        ready = first if first is not None else r.get("ready_at")
        notes, evidence = [], {"billed_from": "workers.json launched_at", "ready_at": "Ray node table start_time_ms"}
        billed_from = launched
        if billed_from is None:
            billed_from = ready
            notes.append(f"{name} has no launch time (started by an older rl_lustre): billed from its raylet's start")
            evidence["billed_from"] = "Ray node table start_time_ms"
        if first is None:
            evidence["ready_at"] = "workers.json ready_at"
        billed_to = ended
        if billed_to is None:
            dead = [n.end for n in mine if n.state == "DEAD" and n.end is not None]
            if dead and len(dead) == len(mine):
                billed_to = max(dead)
                evidence["billed_to"] = "Ray node table end_time_ms"
        else:
            evidence["billed_to"] = "workers.json ended_at"
        seen = billed_from if billed_from is not None else ready
        if seen is None:
            continue  # neither launched nor seen by Ray: nothing is known of it
        spans.append(
            NodeSpan(
                key=name,
                kind="local",
                usd_per_hour=0.0,
                gpus=int(r.get("num_gpus") or 0),
                billed_from=billed_from,
                ready_at=ready,
                worker_at=ready,
                billed_to=billed_to,
                first_seen=seen,
                ray_node_ids=tuple(n.node_id for n in mine),
                evidence=evidence,
                notes=tuple(notes),
            )
        )
    return spans


def head_lanes(count: int, gpus: int, launched_at: float | None, ray: list[RayNode]) -> list[NodeSpan]:
    """The head of a cluster without worker nodes, as ``count`` lanes of ``gpus`` GPUs each.

    Examples:
        >>> ray = [RayNode("h", "127.0.0.1", "127.0.0.1", "ALIVE", 2.0, 5.0, None, is_head=True)]
        >>> [(s.key, s.billed_from, s.ready_at) for s in head_lanes(2, 1, 3.0, ray)]
        [('head/1', 3.0, 5.0), ('head/2', 3.0, 5.0)]
    """
    heads = [n for n in ray if n.is_head and n.state == "ALIVE"]
    if not heads:
        return []
    head = heads[-1]
    start = head.start if head.start is not None else launched_at
    billed_from = launched_at if launched_at is not None else start
    if billed_from is None:
        return []
    notes = (
        () if launched_at is not None else ("the head's launch time is not recorded: billed from its raylet's start",)
    )
    return [
        NodeSpan(
            key=f"head/{i}",
            kind="local",
            usd_per_hour=0.0,
            gpus=gpus,
            billed_from=billed_from,
            ready_at=start,
            worker_at=start,
            billed_to=None,
            first_seen=billed_from,
            ray_node_ids=(head.node_id,),
            evidence={"billed_from": "head.json launched_at", "ready_at": "Ray node table start_time_ms"},
            notes=notes,
        )
        for i in range(1, max(1, count) + 1)
    ]
