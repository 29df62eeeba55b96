"""One job's side of the cluster's queue: join, wait its turn, hold, recover, release.

The job's supervisor (:mod:`rl_lustre.oncluster.supervisor`) makes one
:class:`Member` before it starts anything. While it waits it is a sleeping process
that holds no Ray resource and no Ray connection: it reads the ledger
(:mod:`.claims`) every ``poll`` seconds, or as soon as a release bumps the ledger's
generation, and asks Ray's state API (:mod:`.view`) only when the ledger says its
turn has come. Every step is written to the job's log as a journal record
(:mod:`rl_lustre.oncluster.records`; the events are listed in :mod:`rl_lustre.oncluster.queue`)
and as a line for people.

It runs on the cluster (shipped with the supervisor; standard library only).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from typing import Any

from .. import records
from ..raystate import StateApi, read_view
from .claims import Claim, Store
from .policy import Decision, decide

__all__ = ["Member", "ordinal"]

# How often a waiting supervisor looks at the ledger's generation (a stat, cheap).
_WAKE = 0.25


class Member:
    """``claim``'s job in the queue kept in ``store``; Ray's view read through ``api``."""

    def __init__(
        self,
        store: Store,
        claim: Claim,
        api: StateApi,
        *,
        say: Callable[[str], None],
        poll: float = 1.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.claim = claim
        self.api = api
        self.say = say
        self.poll = poll
        self.clock = clock
        self.released = False
        self._shown: tuple[Any, ...] | None = None

    # -- the life of a claim ------------------------------------------------------------

    def join(self, *, recovering: bool = False) -> Decision:
        """Join the queue (state ``queued``); records ``queued`` with the ledger's first answer.

        ``recovering``: the run held its nodes on a head that was lost; it joins the new
        head's queue as ``recovering``, ahead of every queued run."""
        self.claim.joined_at = self.clock()
        if recovering:
            self.claim.state = "recovering"
        with self.store.locked():
            live, reaped = self.store.read()
            self._reaped(reaped)
            self.store.join(self.claim)
            decision = decide(self.claim, [*live, self.claim], None, self.claim.joined_at)
        self._show("queued", decision)
        return decision

    def wait(self, stopping: threading.Event, *, timeout: float | None = None) -> float | None:
        """Until the job may start: the seconds waited; None when stopped or after ``timeout``.

        A ``queued`` claim waits its turn; a ``recovering`` one (see :meth:`recovering`)
        only for enough usable nodes. Either way the claim becomes ``holding``.
        """
        start = self.clock()
        after = self.claim.state
        while not stopping.is_set():
            decision = self._try()
            if decision.admit:
                waited = self.clock() - start
                records.write(
                    {
                        "event": "granted",
                        "job": self.claim.job,
                        "need": self.claim.nodes,
                        "slots": list(decision.slots),
                        "attempt": self.claim.attempt,
                        "after": after,
                        "waited": round(waited, 3),
                    },
                    at=self.claim.admitted_at,
                )
                nodes = _nodes(self.claim.nodes)
                self.say(
                    f"admitted after {waited:.1f}s {'in the queue' if after == 'queued' else 'of recovery'}: "
                    f"{nodes} of the cluster's {self.claim.cluster_nodes} (slots {_slots(decision.slots)}); "
                    "starting the command"
                )
                return waited
            self._show("waiting", decision)
            if timeout is not None and self.clock() - start >= timeout:
                return None
            self._sleep(stopping)
        return None

    def recovering(self) -> None:
        """Keep the claim after a loss: it is held ahead of every queued job until the rerun starts."""
        with self.store.locked():
            self._refresh()
            self.claim.state = "recovering"
            self.store.save(self.claim)
        self._shown = None

    def held(self, attempt: int, nodes: list[dict[str, Any]]) -> None:
        """Record the Ray nodes this attempt's placement groups hold."""
        records.write({"event": "held", "job": self.claim.job, "attempt": attempt, "nodes": nodes})

    def release(self, reason: str) -> None:
        """Give the nodes back (``succeeded``, ``failed``, ``stopped`` or ``gave-up``); idempotent."""
        if self.released:
            return
        self.released = True
        held = self.claim.state != "queued"
        # Stamped before the claim goes, so a job admitted into its nodes is recorded later.
        at = self.clock()
        with self.store.locked():
            self.store.release(self.claim.job)
        records.write({"event": "released", "job": self.claim.job, "reason": reason, "held": held}, at=at)
        if held:
            self.say(f"released {_nodes(self.claim.nodes)} ({reason})")
        else:
            self.say(f"left the queue ({reason})")

    # -- one decision ---------------------------------------------------------------------

    def _try(self) -> Decision:
        with self.store.locked():
            live, reaped = self.store.read()
            self._reaped(reaped)
            self._refresh(live)
            decision = decide(self.claim, live, None, self.clock())
        if not decision.admit:
            return decision
        try:
            view = read_view(self.api)
        except Exception as exc:  # the dashboard may be restarting or busy: try again next poll
            return dataclasses.replace(
                decision,
                admit=False,
                slots=(),
                waiting_for=f"Ray's state API at {self.api.url}: {type(exc).__name__}: {exc}",
            )
        capacity = view.capacity(self.claim.gpus_per_node)
        with self.store.locked():
            live, reaped = self.store.read()
            self._reaped(reaped)
            self._refresh(live)
            now = self.clock()
            decision = decide(self.claim, live, capacity, now)
            if decision.admit:
                for claim in live:
                    if claim.job in decision.passed and claim.bypassed_since is None:
                        claim.bypassed_since = now
                        self.store.save(claim)
                self.claim.state = "holding"
                self.claim.slots = list(decision.slots)
                self.claim.admitted_at = now
                self.claim.attempt += 1
                self.store.save(self.claim)
        return decision

    def _refresh(self, live: list[Claim] | None = None) -> None:
        """Take what others wrote into this job's claim (when they passed it)."""
        if live is None:
            live, _ = self.store.read()
        for claim in live:
            if claim.job == self.claim.job:
                self.claim.bypassed_since = claim.bypassed_since

    def _reaped(self, reaped: list[Claim]) -> None:
        for claim in reaped:
            records.write({"event": "reaped", "job": claim.job, "state": claim.state, "nodes": claim.nodes})
            self.say(
                f"released the claim of {claim.job} ({_nodes(claim.nodes)}, {claim.state}): its supervisor is gone"
            )

    def _show(self, event: str, d: Decision) -> None:
        shown = (d.place, d.queued, d.usable, d.up, d.waiting_for, self.claim.state)
        if event == "waiting" and shown == self._shown:
            return
        self._shown = shown
        records.write(
            {
                "event": event,
                "job": self.claim.job,
                "state": self.claim.state,
                "need": self.claim.nodes,
                "gpus_per_node": self.claim.gpus_per_node,
                "priority": self.claim.priority,
                "submitted_at": self.claim.submitted_at,
                "place": d.place,
                "queued": d.queued,
                "behind": [a[0] for a in d.ahead],
                "ahead": [list(a) for a in d.ahead],
                "usable": d.usable,
                "capacity": d.capacity,
                "up": d.up,
                "waiting_for": d.waiting_for,
            }
        )
        if d.waiting_for is None:
            return
        if self.claim.state == "recovering":
            self.say(f"recovering: waiting for {d.waiting_for}")
            return
        holders = ", ".join(f"{job} ({state})" for job, state, _ in d.ahead[:4]) or "none"
        more = f" and {len(d.ahead) - 4} more" if len(d.ahead) > 4 else ""
        self.say(
            f"queued {ordinal(d.place or 0)} of {d.queued} for {_nodes(self.claim.nodes)} of the cluster's "
            f"{d.capacity}; waiting for {d.waiting_for}. Ahead: {holders}{more}"
        )

    def _sleep(self, stopping: threading.Event) -> None:
        generation = self.store.generation()
        deadline = time.monotonic() + self.poll
        while time.monotonic() < deadline:
            if stopping.wait(min(_WAKE, max(0.0, deadline - time.monotonic()))):
                return
            if self.store.generation() != generation:
                return


def ordinal(n: int) -> str:
    """1st, 2nd, 3rd, 4th, ... 11th, 12th, 13th, 21st.

    Examples:
        >>> [ordinal(n) for n in (1, 2, 3, 4, 11, 12, 13, 21, 22)]
        ['1st', '2nd', '3rd', '4th', '11th', '12th', '13th', '21st', '22nd']
    """
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _nodes(n: int) -> str:
    return f"{n} node{'s' if n != 1 else ''}"


def _slots(slots: tuple[int, ...]) -> str:
    if slots and list(slots) == list(range(slots[0], slots[0] + len(slots))) and len(slots) > 1:
        return f"{slots[0]}-{slots[-1]}"
    return ",".join(map(str, slots))
