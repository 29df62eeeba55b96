"""What each recovery of a run cost, for the goodput ledger: :class:`LostDetail`, one per
restart (a preemption, a hang, ...), from the run's recovery records and its attributed segments.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable

import attrs

from .._public import public
from .attribute import Segment
from .timeline import RunTimeline

__all__ = ["LostDetail", "recovery_details"]


@public("rl_lustre")
@attrs.frozen
class LostDetail:
    """What one recovery cost.

    Attributes:
        number: the recovery (1, 2, ...).
        lost_at: when the nodes were lost.
        resume_step: the checkpoint resumed from (None: started over).
        steps_redone: the interrupted attempt's steps after it, run again.
        redone_wall: seconds of that work (its end to the loss).
        recovery_wall: the loss to the rerun's first step (the supervisor's ``seconds_lost``);
            None until the rerun has printed one.
        capacity_wall: of those, the seconds waited for GPUs (``capacity_seconds``).
        redone_node_seconds: node-seconds of the redone work.
        recovery_node_seconds: node-seconds from the loss to the rerun's first step.
        nodes_lost: the nodes lost.
        cause: the restart's cause (``preempted``, ``hung``, ...); ``hung_wall``: a hung run's silence.
    """

    number: int
    lost_at: float
    resume_step: int | None
    steps_redone: int
    redone_wall: float
    recovery_wall: float | None
    capacity_wall: float | None
    redone_node_seconds: float
    recovery_node_seconds: float
    nodes_lost: tuple[str, ...]
    cause: str = "preempted"
    hung_wall: float = 0.0


def recovery_details(r: RunTimeline, segments: Iterable[Segment]) -> tuple[LostDetail, ...]:
    """What each recovery of run ``r`` cost, from its attributed ``segments``."""
    node_seconds: dict[str, float] = defaultdict(float)
    for s in segments:
        if s.category == "lost" and s.tag is not None:
            node_seconds[s.tag] += s.seconds
    out = []
    steps_of = {a.number: a.steps for a in r.attempts}
    for rec in r.recoveries:
        steps = [s for s in steps_of.get(rec.ended_attempt, ()) if s.step > (rec.resume_step or 0)]
        redone_from = None
        kept = [s for s in steps_of.get(rec.ended_attempt, ()) if s.step == rec.resume_step and s.end is not None]
        if kept:
            redone_from = kept[-1].end
        elif steps:
            redone_from = steps[0].start
        n = rec.number
        out.append(
            LostDetail(
                number=n,
                lost_at=rec.lost_at,
                resume_step=rec.resume_step,
                steps_redone=len(steps),
                redone_wall=max(0.0, rec.redone_until - redone_from) if redone_from is not None else 0.0,
                recovery_wall=None if rec.resumed_at is None else rec.resumed_at - rec.lost_at,
                capacity_wall=rec.capacity_seconds,
                redone_node_seconds=node_seconds[f"redone:{n}"],
                recovery_node_seconds=math.fsum(
                    v for k, v in node_seconds.items() if k.endswith(f":{n}") and not k.startswith("redone")
                ),
                nodes_lost=rec.nodes_lost,
                cause=rec.cause,
                hung_wall=rec.silence,
            )
        )
    return tuple(out)
