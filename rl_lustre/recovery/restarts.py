"""A run's recoveries as the client reads them: :class:`Restart` records parsed from the
supervisor's lines in the job's log (:data:`~rl_lustre.oncluster.records.RESTART_MARK`,
:data:`~rl_lustre.oncluster.records.RESUMED_MARK`), for :meth:`rl_lustre.Run.restarts`.
"""

from __future__ import annotations

import datetime as _dt
import json
from typing import Any

import attrs

from .._public import public
from ..oncluster.records import RESTART_MARK, RESUMED_MARK

__all__ = ["LostNode", "Restart", "parse_restarts"]


@public("rl_lustre")
@attrs.frozen
class LostNode:
    """A worker node that died during an attempt, as Ray's node table reported it.

    Attributes:
        node_id: Ray's node id.
        address: the node's IP address.
        name: the node's name (on GKE, the pod's host name).
        reason: why, in Ray's words (e.g. a failed health check, or the node's own
            shutdown message), or ``left Ray's node table``.
    """

    node_id: str
    address: str
    name: str
    reason: str


@public("rl_lustre")
@attrs.frozen
class Restart:
    """One recovery: the run was rerun from its newest checkpoint.

    Attributes:
        number: 1 for the first recovery of the run, 2 for the second, ...
        cause: why: ``preempted`` (worker nodes were lost: a Spot preemption, a node
            repair), ``capacity-ended`` (NeMo-RL saved and stopped at the end of the
            capacity it ran on, such as a flex-start node's run duration), ``hung`` (the
            run made no progress for its hang timeout, or NeMo-RL's NCCL watchdog ended it:
            see ``step``, ``silence`` and ``bundle``).
        lost_at: when the nodes were lost (seconds since the epoch): when Ray declared
            the first of them dead, a few seconds after the VM went away; for ``hung``,
            when the stalled attempt was stopped.
        nodes: the worker nodes lost.
        resumed_from_step: the newest complete checkpoint (``step_N``) the rerun resumed
            from; None when there was none and the rerun started over.
        last_step: the (global) step that was running when the nodes were lost.
        exit_code: how the interrupted attempt ended.
        first_step: the first step the rerun printed; None until it has.
        seconds_lost: seconds from ``lost_at`` to the rerun's first step header: what the
            preemption cost in wall-clock time, waiting for GPUs included; None until then.
        capacity_seconds: of those, the seconds spent waiting for the GPUs to come back.
        first_step_at: when the rerun printed its first step header (the head's clock).
        step: for ``hung``, the step the run stalled at.
        silence: for ``hung``, the seconds it had made no progress when it was found stalled.
        bundle: for ``hung``, the diagnostics bundle kept before it was stopped (a directory
            in the run's directory on the volume; see :meth:`rl_lustre.Run.diagnostics`).
        last_progress_at: for ``hung``, when its last progress was seen.
    """

    number: int
    lost_at: float
    nodes: tuple[LostNode, ...]
    resumed_from_step: int | None
    last_step: int
    exit_code: int
    cause: str = "preempted"
    first_step: int | None = None
    seconds_lost: float | None = None
    capacity_seconds: float | None = None
    first_step_at: float | None = None
    step: int | None = None
    silence: float | None = None
    bundle: str | None = None
    last_progress_at: float | None = None

    @property
    def when(self) -> _dt.datetime:
        """``lost_at`` as an aware UTC datetime."""
        return _dt.datetime.fromtimestamp(self.lost_at, tz=_dt.timezone.utc)

    @property
    def steps_redone(self) -> int:
        """Steps run again: those after the checkpoint resumed from, up to the one interrupted."""
        return max(0, self.last_step - (self.resumed_from_step or 0))


def parse_restarts(log: str) -> list[Restart]:
    """The recoveries the supervisor recorded in a job's log, oldest first.

    Examples:
        >>> log = ('RL_LUSTRE_RESTART {"restart": 1, "lost_at": 100.0, "nodes": [{"node_id": "ab", '
        ...        '"address": "10.0.0.3", "name": "w1", "reason": "health check failed"}], '
        ...        '"resume_step": 4, "last_step": 6, "exit_code": 1}\\n'
        ...        'RL_LUSTRE_RESUMED {"restart": 1, "first_step": 5, "seconds_lost": 12.5, '
        ...        '"capacity_seconds": 3.0}\\n')
        >>> [(r.number, r.resumed_from_step, r.first_step, r.seconds_lost, r.steps_redone) for r in parse_restarts(log)]
        [(1, 4, 5, 12.5, 2)]
    """
    restarts: dict[int, Restart] = {}
    resumed: dict[int, dict[str, Any]] = {}
    for line in log.splitlines():
        if line.startswith(RESTART_MARK):
            r = _json(line[len(RESTART_MARK) :])
            if r is None:
                continue
            restarts[int(r["restart"])] = Restart(
                number=int(r["restart"]),
                lost_at=float(r["lost_at"]),
                nodes=tuple(
                    LostNode(
                        str(n.get("node_id") or ""),
                        str(n.get("address") or ""),
                        str(n.get("name") or ""),
                        str(n.get("reason") or ""),
                    )
                    for n in r.get("nodes") or []
                ),
                resumed_from_step=None if r.get("resume_step") is None else int(r["resume_step"]),
                last_step=int(r.get("last_step") or 0),
                exit_code=int(r.get("exit_code") or 0),
                cause=str(r.get("cause") or "preempted"),
                step=None if r.get("step") is None else int(r["step"]),
                silence=None if r.get("silence") is None else float(r["silence"]),
                bundle=None if r.get("bundle") is None else str(r["bundle"]),
                last_progress_at=None if r.get("last_progress_at") is None else float(r["last_progress_at"]),
            )
        elif line.startswith(RESUMED_MARK):
            r = _json(line[len(RESUMED_MARK) :])
            if r is not None:
                resumed[int(r["restart"])] = r
    out = []
    for number in sorted(restarts):
        r = resumed.get(number)
        restart = restarts[number]
        if r is not None:
            restart = attrs.evolve(
                restart,
                first_step=int(r["first_step"]),
                seconds_lost=float(r["seconds_lost"]),
                capacity_seconds=float(r.get("capacity_seconds") or 0.0),
                first_step_at=None if r.get("first_step_at") is None else float(r["first_step_at"]),
            )
        out.append(restart)
    return out


def _json(text: str) -> dict[str, Any] | None:
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) and "restart" in value else None
