"""The goodput ledger's evidence on GKE: Kubernetes Nodes, Pods and Events, Ray's node table,
the live node pools and the jobs' logs.

Each GPU node (one incarnation of a Kubernetes Node: its ``uid``; a Spot VM that GKE
recreates under the same name is a new one) becomes a
:class:`~rl_lustre.goodput.timeline.NodeSpan`:

=============  ===============================================  =========================================
time           first choice                                     else
=============  ===============================================  =========================================
billed from    the Node's ``creationTimestamp``                 its ``RegisteredNode`` Event; its raylet's
                                                                start (a note: the time before is unknown)
Ready          its first ``NodeReady`` Event; the ``Ready``     its registration, when a raylet ran on it
               condition's ``lastTransitionTime`` when True     (a node with a raylet was Ready)
Ray worker     Ray's ``start_time_ms`` of the raylet named      the worker pod's ``Ready`` transition
               after the node (``--node-name``, see
               :mod:`rl_lustre.kube.raycluster`)
billed to      its ``RemovingNode`` Event                       its ``deletionTimestamp``; once the Node
                                                                is gone, its raylet's end
=============  ===============================================  =========================================

The GPU nodes are those of the deployment's ComputeClass (the label every GPU pool's nodes
carry, ``cloud.google.com/compute-class``), whichever pool they came from, and those of the
pools an older deployment named. A node's price is that of its kind of capacity at
``Prices.machine_rate`` for the machine type: the kind its labels say (``rl-lustre/capacity``,
which every pool of the class puts on its nodes; else GKE's ``cloud.google.com/gke-spot`` and
``cloud.google.com/gke-flex-start``), else its node pool's
(:func:`rl_lustre.gcp.pool_provisioning.pool_provisioning`). Cluster time while a GPU worker
pod waited unschedulable is ``pending``.
Kubernetes keeps Events one hour and drops Nodes and Pods with their VMs: past that, what
is no longer known is said in ``notes`` and never guessed. :func:`gke_node_spans` is the
pure part (dicts in the API server's shape in, spans out); :func:`gke_evidence` reads them.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from ..catalog import (
    CAPACITY_KIND_LABEL,
    COMPUTE_CLASS_LABEL,
    GKE_FLEX_START_LABEL,
    GKE_NODEPOOL_LABEL,
    GKE_SPOT_LABEL,
)
from ..goodput.timeline import Evidence, Interval, NodeSpan
from ..kube.readiness import seconds
from ..ray.state import RayNode, node_table
from .goodput import TimelineCache, collect_runs

if TYPE_CHECKING:
    from ..prices import Prices
    from .gke import GKEBackend

__all__ = ["PoolPrice", "gke_evidence", "gke_node_spans", "pool_prices"]

_SLACK = 2.0  # seconds: clocks of the API server, the kubelets and the Ray head differ a little
_KINDS = {"Spot": "spot", "on-demand": "on-demand", "reserved": "reserved", "flex-start": "flex-start"}
_CAPACITY_EVENTS = ("TriggeredScaleUp", "NotTriggerScaleUp", "FailedScaleUp")


@attrs.frozen
class PoolPrice:
    """What a GPU pool's nodes cost: its capacity kind and USD per node-hour (None: unknown)."""

    kind: str
    usd_per_hour: float | None
    gpus: int
    note: str = ""


def _event_time(e: Mapping[str, Any], last: bool = False) -> float | None:
    first = seconds(e.get("lastTimestamp" if last else "firstTimestamp")) or seconds(e.get("eventTime"))
    return first if first is not None else seconds((e.get("metadata") or {}).get("creationTimestamp"))


def _condition(obj: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == kind), None)


@attrs.define
class _Incarnation:
    uid: str
    name: str
    live: bool = False
    labels: dict[str, str] = attrs.field(factory=dict)
    created: float | None = None
    registered: float | None = None
    ready_event: float | None = None
    ready_condition: float | None = None
    removed: float | None = None
    deleting: float | None = None


def gke_node_spans(
    nodes: Sequence[Mapping[str, Any]],
    pods: Sequence[Mapping[str, Any]],
    events: Sequence[Mapping[str, Any]],
    ray: Sequence[RayNode],
    pools: Mapping[str, PoolPrice],
    now: float,
    *,
    compute_class: str | None = None,
    kinds: Mapping[str, PoolPrice] | None = None,
) -> tuple[list[NodeSpan], list[Interval], list[str], dict[str, Any]]:
    """The GPU nodes (of ``compute_class``, or of ``pools``), the intervals GPU worker pods
    waited unschedulable, notes, and the capacity events, from what the Kubernetes and Ray
    APIs return. ``kinds``: the price of a node by the kind of capacity its labels say
    (``spot``, ``on-demand``, ``flex-start``, ``reservation``)."""
    found: dict[str, _Incarnation] = {}
    for n in nodes:
        meta = n.get("metadata") or {}
        inc = found.setdefault(str(meta.get("uid")), _Incarnation(str(meta.get("uid")), str(meta.get("name"))))
        inc.live, inc.labels = True, dict(meta.get("labels") or {})
        inc.created, inc.deleting = seconds(meta.get("creationTimestamp")), seconds(meta.get("deletionTimestamp"))
        ready = _condition(n, "Ready")
        if ready is not None and ready.get("status") == "True":
            inc.ready_condition = seconds(ready.get("lastTransitionTime"))
    for e in events:
        obj = e.get("involvedObject") or {}
        if obj.get("kind") != "Node" or not obj.get("uid"):
            continue
        inc = found.setdefault(str(obj["uid"]), _Incarnation(str(obj["uid"]), str(obj.get("name"))))
        at = _event_time(e)
        reason = e.get("reason")
        if reason == "RegisteredNode":
            inc.registered = _earliest(inc.registered, at)
        elif reason == "NodeReady":
            inc.ready_event = _earliest(inc.ready_event, at)
        elif reason == "RemovingNode":
            inc.removed = _earliest(inc.removed, at)
    notes: list[str] = []
    spans: list[NodeSpan] = []
    by_name: dict[str, int] = defaultdict(int)
    pod_ready = _pod_ready_by_node(pods)
    for inc in sorted(found.values(), key=lambda i: (i.created or i.registered or now, i.uid)):
        price = _node_price(inc, pools, compute_class, kinds or {})
        if price is None:
            continue  # not a GPU node of this deployment
        span = _span(inc, price, ray, pod_ready.get(inc.name), now, notes)
        if span is None:
            continue
        by_name[inc.name] += 1
        if by_name[inc.name] > 1:
            span = attrs.evolve(span, key=f"{inc.name}#{by_name[inc.name]}")
        spans.append(span)
    matched = {rid for s in spans for rid in s.ray_node_ids}
    for r in ray:
        if not r.is_head and r.gpus > 0 and r.node_id not in matched and r.start is not None:
            notes.append(
                f"a raylet at {r.address or r.name} ran from {_clock(r.start)} to "
                f"{_clock(r.end) if r.end else 'now'} on a node that is not known (its Node and Events are "
                "gone): not counted"
            )
    pending, details = _pending(pods, events, now), _capacity_events(events)
    return spans, pending, notes, details


def _span(
    inc: _Incarnation, price: PoolPrice, ray: Sequence[RayNode], pod_ready: float | None, now: float, notes: list[str]
) -> NodeSpan | None:
    evidence: dict[str, str] = {}
    billed_from = inc.created if inc.created is not None else inc.registered
    evidence["billed_from"] = "Node.metadata.creationTimestamp" if inc.created is not None else "event RegisteredNode"
    billed_to = inc.removed if inc.removed is not None else inc.deleting
    if billed_to is not None:
        evidence["billed_to"] = "event RemovingNode" if inc.removed is not None else "Node.metadata.deletionTimestamp"
    lo = (billed_from if billed_from is not None else -1e18) - _SLACK
    hi = billed_to if billed_to is not None else now
    mine = sorted(
        (r for r in ray if r.name == inc.name and r.start is not None and lo <= r.start <= hi + _SLACK),
        key=lambda r: r.start or 0.0,
    )
    worker_at = mine[0].start if mine else pod_ready
    evidence["worker_at"] = "Ray node table start_time_ms" if mine else "worker pod Ready condition"
    node_notes = []
    if billed_from is None:
        billed_from = worker_at
        evidence["billed_from"] = "its raylet's start"
        if billed_from is None:
            return None
        node_notes.append(
            f"billed time of {inc.name} before {_clock(billed_from)} is not known (its Node object "
            "and events are gone): not counted"
        )
    if billed_to is None and not inc.live:
        ends = [r.end for r in mine if r.end is not None]
        billed_to = max(ends) if ends else None
        evidence["billed_to"] = "its raylet's end (the Node is gone)"
        if billed_to is None:
            billed_to = billed_from
            node_notes.append(
                f"when {inc.name} was removed is not recorded: its billed time after its start is not counted"
            )
    ready = _earliest(inc.ready_event, inc.ready_condition)
    evidence["ready_at"] = (
        "event NodeReady" if inc.ready_event is not None and ready == inc.ready_event else "Node Ready condition"
    )
    if ready is None and mine:
        ready = billed_from
        evidence["ready_at"] = "inferred from its raylet (a node with a raylet was Ready)"
    if ready is not None:
        ready = max(ready, billed_from)
    if worker_at is not None and ready is not None and worker_at < ready:
        if ready - worker_at > _SLACK:
            node_notes.append(
                f"{inc.name}: its Ray worker started {ready - worker_at:.1f}s before it was Ready (the clocks differ)"
            )
        worker_at = ready
    return NodeSpan(
        key=inc.name,
        kind=price.kind,
        usd_per_hour=price.usd_per_hour,
        gpus=price.gpus,
        billed_from=billed_from,
        ready_at=ready,
        worker_at=worker_at,
        billed_to=billed_to,
        first_seen=billed_from,
        ray_node_ids=tuple(r.node_id for r in mine),
        evidence=evidence,
        price_note=price.note,
        notes=tuple(node_notes),
    )


def _pod_ready_by_node(pods: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for p in pods:
        node = (p.get("spec") or {}).get("nodeName")
        ready = _condition(p, "Ready")
        at = seconds(ready.get("lastTransitionTime")) if ready is not None and ready.get("status") == "True" else None
        if node and at is not None:
            out[node] = min(out.get(node, at), at)
    return out


def _pending(pods: Sequence[Mapping[str, Any]], events: Sequence[Mapping[str, Any]], now: float) -> list[Interval]:
    """While GPU worker pods waited for a node: from the pods still there, else their Events."""
    failed: dict[str, list[float]] = defaultdict(list)
    scheduled: dict[str, float] = {}
    for e in events:
        obj = e.get("involvedObject") or {}
        if obj.get("kind") != "Pod":
            continue
        uid = str(obj.get("uid"))
        if e.get("reason") == "FailedScheduling":
            failed[uid] += [t for t in (_event_time(e), _event_time(e, last=True)) if t is not None]
        elif e.get("reason") == "Scheduled" and (at := _event_time(e)) is not None:
            scheduled[uid] = at
    out: list[Interval] = []
    live = set()
    for p in pods:
        meta = p.get("metadata") or {}
        uid = str(meta.get("uid"))
        live.add(uid)
        cond = _condition(p, "PodScheduled")
        created = seconds(meta.get("creationTimestamp"))
        if cond is None or created is None:
            continue
        if cond.get("status") == "False" and cond.get("reason") == "Unschedulable":
            out.append(Interval(created, None))
        elif cond.get("status") == "True" and uid in failed and (at := seconds(cond.get("lastTransitionTime"))):
            out.append(Interval(created, max(created, at)))
    for uid, times in failed.items():
        if uid not in live and times:
            end = scheduled.get(uid, max(times))
            out.append(Interval(min(times), max(min(times), end)))
    return out


def _capacity_events(events: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    seen = [
        {
            "reason": e.get("reason"),
            "message": e.get("message"),
            "count": e.get("count"),
            "first": _event_time(e),
            "last": _event_time(e, last=True),
        }
        for e in events
        if e.get("reason") in _CAPACITY_EVENTS
    ]
    return {"capacity_evidence": seen} if seen else {}


def on_demand_notes(spans: Sequence[NodeSpan], first_kind: str) -> list[str]:
    """A loud note when GPU nodes ran on on-demand capacity though the policy starts with
    another kind: the ComputeClass fell back to its costliest rule.

    Examples:
        >>> from rl_lustre.goodput.timeline import NodeSpan
        >>> span = NodeSpan(key="gke-demo-gpu-ondemand-b-1", kind="on-demand", usd_per_hour=101.15, gpus=8,
        ...                 billed_from=0.0, ready_at=60.0, worker_at=90.0, billed_to=None, first_seen=0.0)
        >>> on_demand_notes([span], "spot")  # doctest: +ELLIPSIS
        ['ON-DEMAND FALLBACK: 1 GPU node(s) ran on on-demand capacity, the costliest kind ...']
        >>> on_demand_notes([span], "on-demand")
        []
    """
    nodes = sorted({s.key for s in spans if s.kind == "on-demand"})
    if not nodes or first_kind == "on-demand":
        return []
    return [
        f"ON-DEMAND FALLBACK: {len(nodes)} GPU node(s) ran on on-demand capacity, the costliest kind of the "
        f"policy, which starts with {first_kind}: {', '.join(nodes)}"
    ]


def _node_price(
    inc: _Incarnation, pools: Mapping[str, PoolPrice], compute_class: str | None, kinds: Mapping[str, PoolPrice]
) -> PoolPrice | None:
    """What a node costs, by its kind of capacity (see the module's doc); None: not ours."""
    pool = inc.labels.get(GKE_NODEPOOL_LABEL) or _pool_in_name(inc.name, pools)
    ours = bool(compute_class) and inc.labels.get(COMPUTE_CLASS_LABEL) == compute_class
    if not ours and (pool is None or pool not in pools):
        return None
    kind = inc.labels.get(CAPACITY_KIND_LABEL)
    if kind is None and inc.labels.get(GKE_SPOT_LABEL) == "true":
        kind = "spot"
    elif kind is None and inc.labels.get(GKE_FLEX_START_LABEL) == "true":
        kind = "flex-start"
    if kind is not None and kind in kinds:
        return kinds[kind]
    if pool is not None and pool in pools:
        return pools[pool]
    return PoolPrice(kind or "unknown", None, 0, "its kind of capacity is not known: not priced")


def _pool_in_name(name: str, pools: Mapping[str, PoolPrice]) -> str | None:
    """The pool a node belonged to, from its name (GKE's node names hold their pool's)."""
    hits = [p for p in pools if f"-{p}-" in f"-{name}-"]
    return max(hits, key=len) if hits else None


def _earliest(*times: float | None) -> float | None:
    return min((t for t in times if t is not None), default=None)


def _clock(t: float) -> str:
    return time.strftime("%H:%M:%S UTC", time.gmtime(t))


def pool_prices(
    live_pools: Iterable[Any] | None, fallback: Mapping[str, tuple[str, str, int]], prices: Prices, region: str | None
) -> dict[str, PoolPrice]:
    """Each GPU pool's price: from the live pools (``container_v1.NodePool``), else from
    ``fallback`` (``{pool: (machine type, provisioning, gpus)}``, the plan's)."""
    from ..gcp.pool_provisioning import pool_provisioning

    def price(machine: str, provisioning: str, gpus: int, note: str = "") -> PoolPrice:
        rate, why = prices.machine_rate(machine, provisioning, region)
        return PoolPrice(_KINDS.get(provisioning, "unknown"), rate, gpus, "; ".join(x for x in (why, note) if x))

    out: dict[str, PoolPrice] = {}
    for pool in live_pools or ():
        if pool.config.accelerators:
            gpus = int(pool.config.accelerators[0].accelerator_count or 0)
            out[pool.name] = price(pool.config.machine_type, pool_provisioning(pool), gpus)
    for name, (machine, provisioning, gpus) in fallback.items():
        if name not in out:
            out[name] = price(machine, provisioning, gpus, "its node pool is gone: priced as the plan has it")
    return out


def gke_evidence(
    backend: GKEBackend,
    since: float,
    until: float | None,
    *,
    prices: Prices | None = None,
    cache: TimelineCache | None = None,
) -> Evidence:
    """Everything the ledger needs about ``backend``'s deployment over ``[since, until)``."""
    from .. import naming
    from ..kube.client import ResourceClient, translate_errors
    from ..plan.capacity import PROVISIONING
    from ..prices import Prices
    from ..spec.lanes import capacity_lanes

    cluster = backend.cluster
    api = backend._kube_api()
    now = time.time()
    ns = cluster.namespace
    with translate_errors("read the nodes, pods and events for the goodput ledger"):
        nodes, _ = ResourceClient(api, "Node").list()
        pods, _ = ResourceClient(api, "Pod", ns).list(
            label_selector=f"ray.io/cluster={naming.raycluster_name(cluster)},ray.io/node-type=worker"
        )
        events = list(ResourceClient(api, "Event", ns).list()[0])
        if ns != "default":
            events += ResourceClient(api, "Event", "default").list()[0]
    jobs = backend.jobs
    ray = node_table(jobs.address, jobs.headers)
    live = backend.live_node_pools()
    gpus = int(cluster.gpus_per_node or 0)
    # The plan's pools (priced as the plan has them once their pool is gone), and an older
    # version's standby pool beside Spot.
    fallback = {
        lane.pool_name: (cluster.machine_type, PROVISIONING[lane.kind], gpus) for lane in capacity_lanes(cluster)
    }
    fallback.setdefault(naming.gpu_standby_pool_name(cluster), (cluster.machine_type, "flex-start", gpus))
    chosen = prices or Prices()
    pools = pool_prices(live, fallback, chosen, cluster.region)
    by_kind = pool_prices(
        None, {k: (cluster.machine_type, p, gpus) for k, p in PROVISIONING.items()}, chosen, cluster.region
    )
    kinds = {k: attrs.evolve(v, note="") for k, v in by_kind.items()}
    spans, pending, notes, details = gke_node_spans(
        nodes, pods, events, ray, pools, now, compute_class=naming.compute_class_name(cluster), kinds=kinds
    )
    notes += on_demand_notes(spans, cluster.capacity[0].kind if cluster.capacity else "spot")
    notes += [
        "VM boot before a node registers with Kubernetes is billed but not visible (typically about a minute "
        "per node): not counted",
        "Kubernetes time stamps have whole-second precision",
    ]
    runs, foreign = collect_runs(jobs, since, until, now, cache)
    return Evidence(
        nodes=tuple(spans),
        runs=tuple(runs),
        now=now,
        pending=tuple(pending),
        foreign=tuple(foreign),
        notes=tuple(notes),
        details=details,
    )
