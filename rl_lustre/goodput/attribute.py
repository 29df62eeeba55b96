"""Every billed GPU-node-second, exactly once: an owner (a run, or the cluster) and a category.

:func:`attribute` cuts each node's billed interval (inside a window) at every recorded
event time: its own (billed, Ready, Ray worker), the holds on it, and every event of the
runs that own any of it. On each piece between two cuts nothing recorded changes, so one
owner and one category hold for all of it; they are decided at its midpoint by the rules
below, in order, the first that matches wins. The pieces of a node are disjoint and cover
its billed time exactly, so the categories sum to the billed node-seconds.

Who owns an instant of a node
    A run, while it holds the node: from when its attempt's placement groups held it (the
    supervisor's ``held`` record) to the attempt's end, the last attempt until the job's
    end; without ``held`` records, a run that takes the whole cluster holds every node
    from its start (or queue grant) to its end. A run also owns a node's free time just
    before it holds it, from its submission on: it was waiting for that node. Anything
    else is the cluster's.

A run's instant
    1. inside a recovery (the loss to the rerun's first step): ``lost``; a hung run's
       silence, from its last progress until it was stopped: ``hung``;
    2. the work of an interrupted attempt after the checkpoint the rerun resumed from, up
       to the loss (a hung run's: up to its last progress): ``lost``;
    3. the node not Ready yet: ``capacity``;
    4. queued: ``idle`` when the cluster had the nodes it needs, else ``capacity``;
    5. the initial validation: ``validation``;
    6. from submission to the first attempt's first step: ``startup``;
    7. - 9. inside a step: its save is ``checkpoint``, its validation ``validation``, the
       rest ``training``;
    10. after the last step until the job's end: ``idle``;
    11. anything else: ``unattributed``, with the missing record named.

The cluster's instant
    not Ready: ``capacity``; Ready but its Ray worker not up: ``startup``; a GPU worker
    pod pending for a node: ``capacity``; else ``idle`` -- unless a record is missing
    (the Ray worker's start, which nodes a run held, what a job not submitted through
    rl_lustre used), then ``unattributed`` with why.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections import defaultdict
from collections.abc import Iterable, Sequence

import attrs

from .._public import public
from .timeline import Attempt, Evidence, Interval, NodeSpan, Recovery, RunTimeline, StepSpan

__all__ = ["CATEGORIES", "Hold", "Segment", "attribute", "derive_holds"]

CATEGORIES = ("capacity", "startup", "training", "checkpoint", "validation", "lost", "hung", "idle", "unattributed")

# Why seconds are unattributed: fixed wordings, so that they group.
NO_JOURNAL = (
    "run {run} has no goodput records in its log (submitted by an rl_lustre without the "
    "journal, or not an rl_lustre job)"
)
NO_STEP = "run {run} attempt {attempt}: no step was recorded after step {step}"
NO_WORKER = "when the Ray worker on {node} started is not recorded"
NO_READY = "the Ready time of {node} is not recorded"
UNIDENTIFIED = "run {run} held {k} of these nodes; which ones is not recorded"
TWO_HOLDERS = "two runs held {node} at once; their GPU shares are not recorded"
FOREIGN = "job {job} (not submitted by rl_lustre) was running; its use of the nodes is not recorded"


@public("rl_lustre")
@attrs.frozen
class Segment:
    """A piece of one node's billed time with one owner and one category.

    Attributes:
        node: the node's key.
        start: seconds since the epoch.
        end: seconds since the epoch.
        category: one of :data:`CATEGORIES`.
        owner: the run (submission id) that owned it; None: the cluster.
        why: for ``unattributed``, the record that is missing.
        tag: a finer cause (``redone:1``, ``capacity:1``, ``restart:1``, ``nemo-rl-setup``, ...).
    """

    node: str
    start: float
    end: float
    category: str
    owner: str | None
    why: str | None = None
    tag: str | None = None

    @property
    def seconds(self) -> float:
        """Its length."""
        return self.end - self.start


@attrs.frozen
class Hold:
    """A run holds a node over ``[start, end)`` (``end`` None: still)."""

    run: str
    node: str
    start: float
    end: float | None
    source: str  # "placement-group" or "whole-cluster"


_Label = tuple[str, "str | None", "str | None"]  # category, why, tag


def _ready(n: NodeSpan) -> float:
    """When the node was Ready, or (not recorded) its first evidence."""
    return n.ready_at if n.ready_at is not None else n.first_seen


class _Cluster:
    """What holds for the whole cluster at an instant: the GPU nodes Ready."""

    def __init__(self, nodes: Sequence[NodeSpan], now: float) -> None:
        changes: list[tuple[float, int]] = []
        for n in nodes:
            up, down = _ready(n), n.billed(now)[1]
            if up < down:
                changes += [(up, 1), (down, -1)]
        changes.sort()
        self.times = [t for t, _ in changes]
        self.counts: list[int] = []
        count = 0
        for _, d in changes:
            count += d
            self.counts.append(count)

    def ready(self, t: float) -> int:
        i = bisect.bisect_right(self.times, t)
        return self.counts[i - 1] if i else 0

    def cuts(self) -> set[float]:
        return set(self.times)


def derive_holds(ev: Evidence) -> tuple[dict[str, list[Hold]], dict[str, int]]:
    """Which run held which node when, and the runs whose nodes are not known (with their size)."""
    by_ray: dict[str, list[NodeSpan]] = defaultdict(list)
    for n in ev.nodes:
        for rid in n.ray_node_ids:
            by_ray[rid].append(n)
    cluster = _Cluster(ev.nodes, ev.now)
    holds: dict[str, list[Hold]] = defaultdict(list)
    unknown: dict[str, int] = {}
    records: list[tuple[float, RunTimeline, Attempt | None, str, float | None]] = []
    for r in ev.runs:
        if r.holds:
            attempts = {a.number: a for a in r.attempts}
            seen: set[tuple[int, str]] = set()
            for h in sorted(r.holds, key=lambda h: h.at):
                for rid, gpus in h.nodes:
                    if (h.attempt, rid) not in seen:
                        seen.add((h.attempt, rid))
                        records.append((h.at, r, attempts.get(h.attempt), rid, gpus))
            continue
        start = r.granted_at
        if r.nodes_needed is not None and r.nodes_needed < cluster.ready(start):
            unknown[r.run] = r.nodes_needed
            continue
        for n in ev.nodes:
            lo, hi = n.billed(ev.now)
            a, b = max(start, lo), min(r.ended_at if r.ended_at is not None else math.inf, hi)
            if a < b:
                holds[n.key].append(
                    Hold(r.run, n.key, a, None if b == ev.now and r.ended_at is None else b, "whole-cluster")
                )
    for at, r, attempt, rid, gpus in sorted(records, key=lambda x: x[0]):
        end = _attempt_end(r, attempt)
        spans = by_ray.get(rid, [])
        if len(spans) > 1:  # lanes of one Ray node: as many as the GPUs held, the free ones first
            per = spans[0].gpus or 1
            want = len(spans) if gpus is None else max(1, math.ceil(gpus / per - 1e-9))
            spans = sorted(spans, key=lambda n: (_busy(holds[n.key], r.run, at, end), n.key))[:want]
        for n in spans:
            billed_to = n.billed_to
            stop = end if billed_to is None else (billed_to if end is None else min(end, billed_to))
            if stop is None or at < stop:
                holds[n.key].append(Hold(r.run, n.key, at, stop, "placement-group"))
    for key in holds:
        holds[key].sort(key=lambda h: h.start)
    return dict(holds), unknown


def _attempt_end(r: RunTimeline, attempt: Attempt | None) -> float | None:
    """An attempt holds its nodes until it ends; the last one until the job ends."""
    if attempt is None or attempt is r.attempts[-1]:
        return r.ended_at
    return attempt.ended_at if attempt.ended_at is not None else r.ended_at


def _busy(holds: Iterable[Hold], run: str, start: float, end: float | None) -> bool:
    stop = math.inf if end is None else end
    return any(h.run != run and h.start < stop and start < (math.inf if h.end is None else h.end) for h in holds)


class _Run:
    """One run's rules (1, 2, 4 - 11 of the module's list) as a function of time."""

    def __init__(self, r: RunTimeline, now: float, cluster: _Cluster) -> None:
        self.r, self.now, self.cluster = r, now, cluster
        self.end = r.ended_at if r.ended_at is not None else now
        self.steps: list[tuple[float, float, StepSpan, Attempt]] = []
        for a in r.attempts:
            a_end = a.ended_at if a.ended_at is not None else (r.ended_at if r.ended_at is not None else now)
            for s in a.steps:
                s_end = min(s.end if s.end is not None else a_end, a_end)
                self.steps.append((s.start, max(s.start, s_end), s, a))
        self.steps.sort(key=lambda x: x[0])
        self.starts = [s[0] for s in self.steps]
        self.recovery: list[tuple[float, float, Recovery]] = []
        self.redone: list[tuple[float, float, Recovery]] = []
        self.hung: list[tuple[float, float, Recovery]] = []
        for i, rec in enumerate(r.recoveries):
            nxt = r.recoveries[i + 1].lost_at if i + 1 < len(r.recoveries) else self.end
            stop = rec.resumed_at if rec.resumed_at is not None else nxt
            self.recovery.append((rec.lost_at, max(rec.lost_at, stop), rec))
            # A hung run's silence is its own category; its work before that, since the
            # checkpoint resumed from, is lost like a preempted run's.
            if rec.silence > 0:
                self.hung.append((rec.redone_until, rec.lost_at, rec))
            frm = self._lost_from(rec)
            if frm is not None and frm < rec.redone_until:
                self.redone.append((frm, rec.redone_until, rec))
        first = r.attempts[0] if r.attempts else None
        self.first = first
        # Start-up ends at the first step; without one, the run never got past it.
        self.startup_end = next((a.steps[0].start for a in r.attempts if a.steps), math.inf)
        last = r.attempts[-1] if r.attempts else None
        self.after = self.steps[-1][1] if last is not None and last.steps and self.steps else None

    def _lost_from(self, rec: Recovery) -> float | None:
        attempt = next((a for a in self.r.attempts if a.number == rec.ended_attempt), None)
        if attempt is None:
            return None
        mine = [x for x in self.steps if x[3] is attempt]
        kept = [x for x in mine if rec.resume_step is not None and x[2].step == rec.resume_step]
        if kept:
            return kept[-1][1]
        if mine:
            return mine[0][0]
        return attempt.started_at if attempt.number >= 2 else None

    def cuts(self) -> set[float]:
        r = self.r
        out = {r.submitted_at, self.end}
        for q in r.queued:
            out |= {q.start, q.end if q.end is not None else self.end}
        for a in r.attempts:
            out |= {a.started_at, *(t for t in (a.ended_at, a.setup_done_at) if t is not None)}
            if a.initial_validation is not None:
                out |= set(a.initial_validation.closed(self.now))
        for start, end, s, _ in self.steps:
            out |= {start, end}
            for iv in (s.checkpoint, s.validation):
                if iv is not None:
                    lo, hi = iv.closed(end)
                    out |= {min(max(lo, start), end), min(max(hi, start), end)}
        for lo, hi, rec in self.recovery:
            out |= {lo, hi, *(t for t in (rec.capacity_wait_at, rec.capacity_back_at) if t is not None)}
        for lo, hi, _ in self.redone + self.hung:
            out |= {lo, hi}
        if self.startup_end != math.inf:
            out.add(self.startup_end)
        return {t for t in out if math.isfinite(t)}

    def lost(self, t: float) -> _Label | None:
        for lo, hi, rec in self.recovery:
            if lo <= t < hi:
                wait, back = rec.capacity_wait_at, rec.capacity_back_at
                if wait is None and back is None:
                    part = "recovery"  # the supervisor did not record its wait
                elif wait is not None and t < wait:
                    part = "detect"  # the loss seen, the attempt ending
                elif back is None or t < back:
                    part = "capacity"
                else:
                    part = "restart"  # the rerun's start, up to its first step
                return "lost", None, f"{part}:{rec.number}"
        for lo, hi, rec in self.hung:
            if lo <= t < hi:
                return "hung", None, f"hung:{rec.number}"
        for lo, hi, rec in self.redone:
            if lo <= t < hi:
                return "lost", None, f"redone:{rec.number}"
        return None

    def rest(self, t: float) -> _Label:
        r = self.r
        if not r.journal:
            return "unattributed", NO_JOURNAL.format(run=r.run), None
        for q in r.queued:
            if q.start <= t < (q.end if q.end is not None else self.end):
                need = r.nodes_needed
                if need is None or self.cluster.ready(t) >= need:
                    return "idle", None, "queued"
                return "capacity", None, "queued"
        first = self.first
        if first is not None and first.initial_validation is not None:
            lo, hi = first.initial_validation.closed(self.startup_end if self.startup_end != math.inf else self.end)
            if lo <= t < hi:
                return "validation", None, "initial"
        if r.submitted_at <= t < self.startup_end:
            if first is None or t < first.started_at:
                return "startup", None, "ray-job"
            if first.setup_done_at is None or t < first.setup_done_at:
                return "startup", None, "nemo-rl-setup"
            return "startup", None, "pre-step"
        i = bisect.bisect_right(self.starts, t) - 1
        if i >= 0:
            _start, end, s, a = self.steps[i]
            if t < end:
                for iv, cat in ((s.checkpoint, "checkpoint"), (s.validation, "validation")):
                    if iv is not None:
                        lo, hi = iv.closed(end)
                        if lo <= t < hi:
                            return cat, None, None
                return "training", None, None
            if self.after is not None and t >= self.after and a is r.attempts[-1]:
                return "idle", None, "after-run"
            return "unattributed", NO_STEP.format(run=r.run, attempt=a.number, step=s.step), None
        return "unattributed", NO_STEP.format(run=r.run, attempt=first.number if first else 1, step=0), None


def _holders(holds: Sequence[Hold], t: float) -> set[str]:
    return {h.run for h in holds if h.start <= t < (math.inf if h.end is None else h.end)}


def _next_holder(holds: Sequence[Hold], t: float) -> str | None:
    later = [h for h in holds if h.start > t]
    return min(later, key=lambda h: h.start).run if later else None


def attribute(ev: Evidence, window: Interval) -> list[Segment]:
    """Every billed node-second of ``ev`` inside ``window``, as segments (see the module)."""
    holds, unknown = derive_holds(ev)
    cluster = _Cluster(ev.nodes, ev.now)
    runs = {r.run: r for r in ev.runs}
    rules = {r.run: _Run(r, ev.now, cluster) for r in ev.runs}
    unidentified = [(runs[k], k_nodes) for k, k_nodes in unknown.items()]
    shared: set[float] = cluster.cuts()
    for iv in ev.pending:
        shared |= set(iv.closed(ev.now))
    for _, iv in ev.foreign:
        shared |= set(iv.closed(ev.now))
    for r, _ in unidentified:
        shared |= {r.granted_at, r.ended_at if r.ended_at is not None else ev.now}
    w_end = window.end if window.end is not None else ev.now
    out: list[Segment] = []
    for n in ev.nodes:
        billed_lo, billed_hi = n.billed(ev.now)
        lo, hi = max(window.start, billed_lo), min(w_end, billed_hi)
        if hi <= lo:
            continue
        mine = holds.get(n.key, [])
        cuts = {lo, hi, n.first_seen} | {t for t in (n.ready_at, n.worker_at) if t is not None} | shared
        for h in mine:
            cuts |= {h.start, h.end if h.end is not None else hi}
        for run in {h.run for h in mine}:
            cuts |= rules[run].cuts()
        points = sorted(t for t in cuts if lo <= t <= hi)
        for a, b in itertools.pairwise(points):
            if b <= a:
                continue
            mid = (a + b) / 2
            holders = _holders(mine, mid)
            label: _Label
            if len(holders) > 1:
                owner, label = None, ("unattributed", TWO_HOLDERS.format(node=n.key), None)
            else:
                owner = next(iter(holders), None)
                if owner is None:
                    nxt = _next_holder(mine, mid)
                    if nxt is not None and runs[nxt].submitted_at <= mid:
                        owner = nxt
                label = (
                    _run_label(rules[owner], n, mid) if owner is not None else _cluster_label(ev, n, mid, unidentified)
                )
            out.append(Segment(n.key, a, b, label[0], owner, label[1], label[2]))
    return merge_adjacent(out)


def _run_label(rule: _Run, n: NodeSpan, t: float) -> _Label:
    lost = rule.lost(t)
    if lost is not None:
        return lost
    if n.ready_at is None and t < n.first_seen:
        return "unattributed", NO_READY.format(node=n.key), None
    if t < _ready(n):
        return "capacity", None, "not-ready"
    return rule.rest(t)


def _cluster_label(ev: Evidence, n: NodeSpan, t: float, unidentified: list[tuple[RunTimeline, int]]) -> _Label:
    if n.ready_at is None and t < n.first_seen:
        return "unattributed", NO_READY.format(node=n.key), None
    if t < _ready(n):
        return "capacity", None, "booting"
    if n.worker_at is None:
        return "unattributed", NO_WORKER.format(node=n.key), None
    if t < n.worker_at:
        return "startup", None, "ray-worker"
    for r, k in unidentified:
        if r.granted_at <= t < (r.ended_at if r.ended_at is not None else ev.now):
            return "unattributed", UNIDENTIFIED.format(run=r.run, k=k), None
    for job, iv in ev.foreign:
        lo, hi = iv.closed(ev.now)
        if lo <= t < hi:
            return "unattributed", FOREIGN.format(job=job), None
    for iv in ev.pending:
        lo, hi = iv.closed(ev.now)
        if lo <= t < hi:
            return "capacity", None, "pending"
    return "idle", None, None


def merge_adjacent(segments: Iterable[Segment]) -> list[Segment]:
    """Join touching segments of one node that agree on everything but their bounds."""
    out: list[Segment] = []
    for s in segments:
        last = out[-1] if out else None
        if (
            last is not None
            and last.node == s.node
            and last.end == s.start
            and last.category == s.category
            and last.owner == s.owner
            and last.why == s.why
            and last.tag == s.tag
        ):
            out[-1] = attrs.evolve(last, end=s.end)
        else:
            out.append(s)
    return out
