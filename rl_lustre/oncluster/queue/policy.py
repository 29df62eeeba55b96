"""Who starts next: best-effort FIFO over whole nodes, with priority and a backfill window.

Pure (no I/O): :func:`decide` looks at one job's claim, every live claim and, when
given, Ray's live view of the cluster, and says whether the job may start now.

- A job takes whole nodes. The nodes it may use are those no other claim holds
  (``holding`` or ``recovering``) *and* that Ray shows up and free: a lost Spot node,
  one not joined yet, or GPUs held by something outside the queue keep jobs waiting
  instead of letting NeMo-RL fail on a placement-group timeout.
- A ``recovering`` job (it lost nodes and runs again from its checkpoint) keeps its
  claim: it is counted as holding its nodes by every other job, and starts again as
  soon as enough usable nodes exist, ahead of every queued job.
- Queued jobs go in order of priority, then submission. A job that does not fit does
  not hold up later jobs that do (Kueue's ``BestEffortFIFO``, which the GKE A4
  blueprint's ClusterQueue uses), until it has been passed over for its
  ``backfill_window``: from then on nothing passes it. A window of 0 is strict FIFO.
  Nothing running is ever preempted.

It runs on the cluster (shipped with the supervisor; standard library only).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from .claims import Claim

__all__ = ["Capacity", "Decision", "decide", "free_slots"]


@dataclasses.dataclass(frozen=True)
class Capacity:
    """Ray's view in whole nodes of the job's size: those up, and those with no GPU reserved."""

    up: int
    free: int


@dataclasses.dataclass(frozen=True)
class Decision:
    """Whether the job starts now, and if not, where it stands and why.

    Attributes:
        admit: start now.
        slots: the queue's node numbers it takes (when admitted).
        place: its place among the queued jobs, 1-based (None while recovering).
        queued: how many jobs are queued.
        ahead: the jobs ahead of it, as (id, state, nodes): every held claim, then the
            queued jobs before it.
        usable: nodes it could use now.
        capacity: the cluster's nodes.
        up: GPU nodes Ray shows up (None without Ray's view).
        waiting_for: what it waits for, in words (None when admitted).
        passed: queued jobs ahead of it that it passes (they start counting their window).
        blocked_by: the job whose spent backfill window holds it.
    """

    admit: bool
    slots: tuple[int, ...] = ()
    place: int | None = None
    queued: int = 0
    ahead: tuple[tuple[str, str, int], ...] = ()
    usable: int = 0
    capacity: int = 0
    up: int | None = None
    waiting_for: str | None = None
    passed: tuple[str, ...] = ()
    blocked_by: str | None = None


def decide(me: Claim, claims: Sequence[Claim], capacity: Capacity | None, now: float) -> Decision:
    """Whether ``me`` may start now; ``claims`` are the live claims (``me`` among them or not).

    Without ``capacity`` the ledger alone decides, as if every node of the cluster were
    up and free; the supervisor asks Ray only when the ledger says yes.

    Examples:
        >>> big = Claim(job="big", nodes=8, gpus_per_node=8, cluster_nodes=8, state="holding", slots=list(range(8)))
        >>> small = Claim(job="small", nodes=1, gpus_per_node=8, cluster_nodes=8, submitted_at=1.0)
        >>> d = decide(small, [big, small], None, now=10.0)
        >>> d.admit, d.place, d.waiting_for
        (False, 1, "1 node: 0 of the cluster's 8 are free (8 held by 1 job)")
        >>> decide(small, [small], Capacity(up=8, free=8), now=10.0).slots
        (0,)
    """
    others = [c for c in claims if c.job != me.job]
    held = [c for c in others if c.held]
    held_nodes = sum(c.nodes for c in held)
    total = me.cluster_nodes
    ledger = total - held_nodes
    if capacity is None:
        usable, up = ledger, None
    else:
        occupied = capacity.up - capacity.free
        usable = min(ledger, capacity.up - max(held_nodes, occupied))
        up = capacity.up
    usable = max(usable, 0)
    queue = sorted([c for c in others if not c.held] + ([me] if not me.held else []), key=Claim.key)
    ahead_held = tuple((c.job, c.state, c.nodes) for c in sorted(held, key=Claim.key))

    def made(**fields: Any) -> Decision:
        return Decision(queued=len(queue), usable=usable, capacity=total, up=up, **fields)

    def short(avail: int) -> str:
        need = f"{me.nodes} node{'s' if me.nodes != 1 else ''}"
        if capacity is not None and capacity.up < total and usable < me.nodes:
            return f"{need}: only {capacity.up} GPU nodes are up in Ray ({total} expected)"
        if capacity is not None and capacity.up - capacity.free > held_nodes and usable < me.nodes:
            outside = capacity.up - capacity.free - held_nodes
            return (
                f"{need}: {outside} GPU node{'s are' if outside != 1 else ' is'} in use outside the "
                "queue (a job not run by rl_lustre, or one that is still letting go of its GPUs)"
            )
        if avail < usable:
            return f"{need}: {usable} of the cluster's {total} are free and jobs ahead of it take {usable - avail}"
        jobs = len(held)
        return (
            f"{need}: {max(ledger, 0)} of the cluster's {total} are free "
            f"({held_nodes} held by {jobs} job{'s' if jobs != 1 else ''})"
        )

    if me.held:
        if usable >= me.nodes:
            return made(admit=True, slots=tuple(me.slots) or free_slots(me, held), ahead=ahead_held)
        return made(admit=False, ahead=ahead_held, waiting_for=short(usable))

    avail = usable
    passed: list[str] = []
    before: list[tuple[str, str, int]] = []
    for place, claim in enumerate(queue, start=1):
        if claim.job == me.job:
            if me.nodes <= avail:
                return made(
                    admit=True,
                    slots=free_slots(me, held),
                    place=place,
                    passed=tuple(passed),
                    ahead=ahead_held + tuple(before),
                )
            return made(admit=False, place=place, ahead=ahead_held + tuple(before), waiting_for=short(avail))
        before.append((claim.job, claim.state, claim.nodes))
        if claim.nodes <= avail:
            avail -= claim.nodes  # an earlier job that fits keeps its room
            continue
        window = claim.backfill_window
        since = claim.bypassed_since
        if window <= 0 or (since is not None and now - since >= window):
            mine = next(i for i, c in enumerate(queue, start=1) if c.job == me.job)
            why = (
                "lets no later job start ahead of it (backfill_window=0)"
                if window <= 0
                else f"has waited {now - since:.0f}s, past its backfill window ({window:g}s)"  # type: ignore[operator]
            )
            return made(
                admit=False,
                place=mine,
                ahead=ahead_held + tuple(before),
                blocked_by=claim.job,
                waiting_for=f"its turn: {claim.job} ({claim.nodes} nodes) {why}",
            )
        passed.append(claim.job)
    raise AssertionError("the job is not in its own queue")  # pragma: no cover


def free_slots(me: Claim, held: Sequence[Claim]) -> tuple[int, ...]:
    """The lowest node numbers no held claim has, ``me.nodes`` of them.

    Examples:
        >>> a = Claim(job="a", nodes=2, gpus_per_node=8, cluster_nodes=4, state="holding", slots=[0, 2])
        >>> free_slots(Claim(job="b", nodes=2, gpus_per_node=8, cluster_nodes=4), [a])
        (1, 3)
    """
    taken = {s for c in held for s in c.slots}
    out: list[int] = []
    slot = 0
    while len(out) < me.nodes:
        if slot not in taken:
            out.append(slot)
        slot += 1
    return tuple(out)
