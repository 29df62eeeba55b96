"""What one attempt watches in Ray's node table: the worker nodes lost, and which were its own.

On a cluster that several jobs share, a node lost by one job is no concern of the
others. So the watch finds this attempt's nodes: the submission's driver (NeMo-RL,
checked to be a process of this attempt's session) and the nodes its placement groups
hold (:func:`rl_lustre.oncluster.raystate.attempt_nodes`), looked up every poll until found,
then every :data:`ATTRIBUTE_EVERY` seconds (groups are made in stages), and kept once
seen (a group rescheduled after a loss no longer names the dead node). A loss is the
attempt's own when it is one of those nodes, or, before they are known (NeMo-RL still
setting up), any worker node.

It runs on the cluster (shipped with the supervisor; standard library only).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from .procs import session_of
from .raystate import NodeView, StateApi, attempt_nodes, read_view

__all__ = ["ATTRIBUTE_EVERY", "NodeWatch", "clock", "describe", "describe_restarts"]

ATTRIBUTE_EVERY = 10.0


class NodeWatch:
    """The worker nodes of one attempt: those lost since it started, and its own.

    Args:
        api: Ray's state API.
        submission_id: the job's submission id (None: its nodes are never told apart).
        say: prints a line for people.
        on_held: called with the attempt's nodes whenever more of them are found.
    """

    def __init__(
        self,
        api: StateApi,
        submission_id: str | None,
        *,
        say: Callable[[str], None],
        on_held: Callable[[list[dict[str, Any]]], None],
    ) -> None:
        self.api = api
        self.submission_id = submission_id
        self.say = say
        self.on_held = on_held
        self.watched: dict[str, NodeView] = {}
        self.lost: dict[str, dict[str, Any]] = {}
        self.mine: set[str] | None = None
        self._gpus: dict[str, float] = {}
        self.session: int | None = None
        self._next_attribution = 0.0
        self._failing = False

    def start(self, session: int | None) -> None:
        """A new attempt, whose command leads session ``session``."""
        self.watched, self.lost, self.mine, self._gpus = {}, {}, None, {}
        self.session = session
        self._next_attribution = 0.0
        workers = self._workers()
        self.watched = {k: n for k, n in (workers or {}).items() if n.alive}

    def look(self) -> None:
        """Read the node table once: note lost nodes, and find the attempt's own."""
        now = self._workers()
        if now is None:
            return
        for node_id, node in now.items():
            if node.alive and node_id not in self.lost:
                self.watched[node_id] = node
        for node_id, node in self.watched.items():
            if node_id in self.lost:
                continue
            current = now.get(node_id)
            if current is None or not current.alive:
                record = (current or node).record()
                record["dead_at"] = current.dead_at if current is not None else None
                record["detected_at"] = time.time()
                if not record.get("reason"):
                    record["reason"] = "left Ray's node table"
                self.lost[node_id] = record
                whose = (
                    ""
                    if self.mine is None
                    else (" (one of this run's)" if node_id in self.mine else " (not one of this run's)")
                )
                self.say(f"worker node {describe(record)} is lost{whose}: {record['reason']}")
        self._attribute(now)

    def own_losses(self) -> list[dict[str, Any]]:
        """The lost nodes that were this attempt's (any lost node, before its own are known)."""
        nodes = [n for k, n in self.lost.items() if self.mine is None or k in self.mine]
        return sorted(nodes, key=lambda n: n["detected_at"])

    def others_losses(self) -> list[dict[str, Any]]:
        """The lost nodes that were some other job's."""
        if self.mine is None:
            return []
        return sorted((n for k, n in self.lost.items() if k not in self.mine), key=lambda n: n["detected_at"])

    def settle(self, seconds: float, poll: float, *, siblings: float = 5.0) -> None:
        """After the command failed: look for lost nodes for up to ``seconds``, since the node
        table may say so a moment after the command failed. Nodes taken at once are declared dead
        one health check apart, so once one is found the look goes on for ``siblings`` seconds
        (within ``seconds``) after the latest, unless every node it could lose is lost."""
        deadline = time.monotonic() + seconds
        found, end = len(self.own_losses()), deadline
        if found:
            end = min(deadline, time.monotonic() + siblings)
        while True:
            self.look()
            own = len(self.own_losses())
            if own > found:
                found, end = own, min(deadline, time.monotonic() + siblings)
            candidates = self.mine if self.mine is not None else set(self.watched)
            if (candidates and candidates <= set(self.lost)) or time.monotonic() >= end:
                return
            time.sleep(min(0.5, poll))

    def first_attributed_loss(self) -> float | None:
        """When the first of this attempt's known nodes was found lost (what ``hang_grace`` counts from)."""
        if self.mine is None:
            return None
        times = [n["detected_at"] for k, n in self.lost.items() if k in self.mine]
        return min(times, default=None)

    def _attribute(self, nodes: dict[str, NodeView]) -> None:
        if self.submission_id is None or self.session is None or time.monotonic() < self._next_attribution:
            return
        try:
            found = attempt_nodes(self.api, self.submission_id, self.session, lambda pid, sid: session_of(pid) == sid)
        except Exception as exc:  # the dashboard may be busy; the next poll tries again
            if not self._failing:
                self.say(f"could not read this run's placement groups ({type(exc).__name__}: {exc}); trying again")
            self._failing = True
            return
        self._failing = False
        if found is None or not found[1]:
            return
        self._next_attribution = time.monotonic() + ATTRIBUTE_EVERY
        self._gpus.update(found[1])
        new = set(found[1]) - (self.mine or set())
        if not new:
            return
        self.mine = (self.mine or set()) | new
        self.on_held(
            [
                {**(nodes[k].record() if k in nodes else {"node_id": k}), "gpus": self._gpus.get(k)}
                for k in sorted(self.mine)
            ]
        )

    def _workers(self) -> dict[str, NodeView] | None:
        try:
            return read_view(self.api, groups=False).workers()
        except Exception as exc:  # the state API answers through the dashboard, which may be busy
            self.say(f"could not read Ray's node table ({type(exc).__name__}: {exc}); trying again")
            return None


def describe(n: dict[str, Any]) -> str:
    """A node, for a line of the log: ``<id prefix> (<name or address>)``."""
    where = n.get("name") or n.get("address") or "?"
    return f"{str(n.get('node_id', ''))[:8]} ({where})"


def clock(t: float) -> str:
    """A time of day on the head's clock, for a line of the log: ``HH:MM:SS.d UTC``."""
    return time.strftime("%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 10)} UTC"


def describe_restarts(restarts: list[dict[str, Any]]) -> str:
    """A run's restarts so far, for a line of the log (``none`` without any)."""
    return (
        "; ".join(
            f"#{r['restart']} at {clock(r['lost_at'])}: "
            + (
                f"stalled at step {r['step']} (evidence: {r['bundle']})"
                if r.get("cause") == "hung"
                else f"lost {', '.join(describe(n) for n in r['nodes'])}"
            )
            + f", resumed from step {r['resume_step'] if r['resume_step'] is not None else 0}"
            for r in restarts
        )
        or "none"
    )
