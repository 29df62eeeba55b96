"""The client's side of the queue: a job's queue state and timeline, read from its log.

The supervisor writes every step of the job's life in the queue into the job's own log
(see :mod:`rl_lustre.queueing` for the records), so any process that can read the log
through the Jobs API (this laptop, another one, ``rl-lustre status``) sees the same
state, with nothing kept anywhere else.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import attrs

from .._public import public
from ..oncluster.queue.member import ordinal
from ..oncluster.records import MARK, RESTART_MARK, read_journal

__all__ = ["QueueState", "Timeline", "parse_queue", "timeline"]

_EVENTS = ("queued", "waiting", "granted", "held", "released")


@public("rl_lustre")
@attrs.frozen
class QueueState:
    """Where a job stands in its cluster's queue.

    Attributes:
        state: ``queued`` (waiting its turn), ``running`` (it holds its nodes),
            ``recovering`` (it lost nodes and keeps its claim until they are back) or
            ``released`` (it gave its nodes back).
        nodes: the nodes it takes.
        place: its place among the queued jobs (1 is next), while queued.
        queued: how many jobs are queued, while queued.
        usable: the nodes it could use when last looked at.
        capacity: the cluster's nodes.
        ahead: the jobs ahead of it: ``(id, state, nodes)``, the holders first.
        waiting_for: what it waits for, in words; None once it runs.
        since: when it joined the queue (the head's clock).
        slots: the queue's node numbers it holds, once running.
    """

    state: str
    nodes: int
    place: int | None = None
    queued: int | None = None
    usable: int | None = None
    capacity: int | None = None
    ahead: tuple[tuple[str, str, int], ...] = ()
    waiting_for: str | None = None
    since: float | None = None
    slots: tuple[int, ...] = ()

    def __str__(self) -> str:
        if self.state == "queued":
            where = f"{ordinal(self.place)} of {self.queued}" if self.place and self.queued else "queued"
            return f"{where}, waiting for {self.waiting_for}" if self.waiting_for else where
        if self.state == "recovering":
            return f"recovering, waiting for {self.waiting_for}" if self.waiting_for else "recovering"
        if self.state == "running":
            return f"holds {self.nodes} of {self.capacity} nodes"
        return "released its nodes"


@public("rl_lustre")
@attrs.frozen
class Timeline:
    """When a job waited and when it held which of the queue's nodes (the head's clock).

    Attributes:
        nodes: the nodes it takes.
        gpus_per_node: the GPUs of each.
        joined_at: when its supervisor joined the queue.
        admissions: every ``(when, slots)`` it was let start: the first start, then each
            rerun after a recovery.
        recoveries: ``(lost_at, back_at)`` per recovery (``back_at`` None while it waits).
        held_nodes: the Ray node names its placement groups held, in the order first seen.
        released_at: when it gave its nodes back; None while it holds them.
        reason: why (``succeeded``, ``failed``, ``stopped``, ``gave-up``).
        capacity: the cluster's nodes, as its queue counted them.
    """

    nodes: int
    gpus_per_node: float
    joined_at: float | None
    admissions: tuple[tuple[float, tuple[int, ...]], ...]
    recoveries: tuple[tuple[float, float | None], ...] = ()
    held_nodes: tuple[str, ...] = ()
    released_at: float | None = None
    reason: str | None = None
    capacity: int | None = None

    @property
    def started_at(self) -> float | None:
        """The first admission, or None if it never started."""
        return self.admissions[0][0] if self.admissions else None

    @property
    def slots(self) -> tuple[int, ...]:
        """The slots of its first admission."""
        return self.admissions[0][1] if self.admissions else ()


def parse_queue(log: str) -> QueueState | None:
    """The job's queue state from its log; None before its supervisor joined a queue.

    Examples:
        >>> log = ('RL_LUSTRE_EVENT {"v": 1, "at": 10.0, "event": "queued", "job": "b", "state": "queued", '
        ...        '"need": 4, "place": 2, "queued": 3, "usable": 2, "capacity": 8, "ahead": [["a", "holding", 6]], '
        ...        '"waiting_for": "4 nodes: 2 of the cluster\\'s 8 are free (6 held by 1 job)"}\\n')
        >>> print(parse_queue(log))
        2nd of 3, waiting for 4 nodes: 2 of the cluster's 8 are free (6 held by 1 job)
        >>> parse_queue(log + 'RL_LUSTRE_EVENT {"v": 1, "at": 12.0, "event": "granted", "slots": [0, 1]}\\n').state
        'running'
    """
    state: QueueState | None = None
    for kind, record in _records(log):
        if kind == "restart":
            if state is not None:
                state = attrs.evolve(state, state="recovering", waiting_for=None)
            continue
        event = record["event"]
        if event in ("queued", "waiting"):
            since = record.get("at") if state is None or event == "queued" else state.since
            state = QueueState(
                state="recovering" if record.get("state") == "recovering" else "queued",
                nodes=int(record.get("need") or (state.nodes if state else 0)),
                place=record.get("place"),
                queued=record.get("queued"),
                usable=record.get("usable"),
                capacity=record.get("capacity"),
                waiting_for=record.get("waiting_for"),
                ahead=tuple((str(a[0]), str(a[1]), int(a[2])) for a in record.get("ahead") or ()),
                since=since,
                slots=state.slots if state else (),
            )
        elif event == "granted" and state is not None:
            state = attrs.evolve(
                state,
                state="running",
                place=None,
                queued=None,
                waiting_for=None,
                slots=tuple(record.get("slots") or ()),
            )
        elif event == "released" and state is not None:
            state = attrs.evolve(state, state="released", place=None, queued=None, waiting_for=None)
    return state


def timeline(log: str) -> Timeline | None:
    """The job's timeline from its log; None when it never joined a queue."""
    nodes, gpus, joined, capacity = 0, 0.0, None, None
    admissions: list[tuple[float, tuple[int, ...]]] = []
    recoveries: list[list[float | None]] = []
    held: dict[str, None] = {}
    released, reason = None, None
    seen = False
    for kind, record in _records(log):
        if kind == "restart":
            recoveries.append([float(record.get("lost_at") or 0.0), None])
            continue
        event, at = record["event"], float(record.get("at") or 0.0)
        if event == "queued" and not seen:
            seen, joined = True, at
            nodes, gpus = int(record.get("need") or 0), float(record.get("gpus_per_node") or 0)
        if event in ("queued", "waiting") and record.get("capacity") is not None:
            capacity = int(record["capacity"])
        elif event == "granted":
            admissions.append((at, tuple(int(s) for s in record.get("slots") or ())))
            if recoveries and recoveries[-1][1] is None and len(admissions) > 1:
                recoveries[-1][1] = at
        elif event == "held":
            held.update(dict.fromkeys(str(n.get("name") or n.get("node_id") or "?") for n in record.get("nodes") or ()))
        elif event == "released":
            released, reason = at, record.get("reason")
    if not seen:
        return None
    return Timeline(
        nodes=nodes,
        gpus_per_node=gpus,
        joined_at=joined,
        admissions=tuple(admissions),
        recoveries=tuple((float(a or 0.0), b) for a, b in recoveries),
        held_nodes=tuple(held),
        released_at=released,
        reason=reason,
        capacity=capacity,
    )


def _records(log: str) -> Sequence[tuple[str, dict[str, Any]]]:
    """The queue's journal records and the recoveries' RESTART records, in log order."""
    out: list[tuple[str, dict[str, Any]]] = []
    for line in log.splitlines():
        if line.startswith(MARK):
            for record in read_journal(line):
                if record["event"] in _EVENTS:
                    out.append(("event", record))
        elif line.startswith(RESTART_MARK):
            try:
                record = json.loads(line[len(RESTART_MARK) :])
            except ValueError:
                continue
            if isinstance(record, dict):
                out.append(("restart", record))
    return out
