"""GPU capacity per kind and zone, over time, as the fakes hand it out.

By default every kind is there in every zone (a deployment that works elsewhere works
here). Tests and the capacity benchmark take it away:

- :meth:`Stock.out`: a kind (``"spot"``, ``"on-demand"``, ``"flex-start"``) has nothing in a
  zone (or everywhere) from now, or from ``after`` seconds on, until :meth:`Stock.back`.
  A Spot or on-demand node pool's creation then ends as GKE's does on a stock-out
  (``GCE_STOCKOUT`` ... "does not have enough resources available"), the pool in ERROR.
- :meth:`Stock.flex_start`: how a flex-start request is answered in a zone: granted
  ``after`` seconds once asked, never (it stays queued, as DWS does), or failed with a
  message.
- :meth:`Stock.reservation`: a specific reservation with ``free`` nodes in a zone (of this
  or another project, which shares it); a pool consuming it takes nodes from it, and
  gives them back when deleted; asking for more than is free fails as Compute does.

The cluster autoscaler's scale-ups of a pool (and its instance group's re-creation of lost
VMs) are answered by :meth:`Stock.scale_up` from the same capacity.

Seconds are the fake's (multiplied by its ``time_scale``, as latencies are). Every
decision is recorded in :attr:`Stock.events` with the fake's monotonic time it took
effect, so the capacity benchmark measures how long ``up()`` took to react.
"""

from __future__ import annotations

from typing import Any

import attrs

from ._core import Core

__all__ = ["Stock", "StockEvent"]

_ANY = "*"


@attrs.frozen
class StockEvent:
    """A capacity decision: ``what`` (``"asked"``: a scale-up of ``pool`` asked for, ``"stockout"``,
    ``"granted"``, ``"failed"``, ``"reserved"``, ``"reservation-full"``) for ``kind`` in ``zone``
    at fake time ``at`` (``time.monotonic()``)."""

    at: float
    kind: str
    zone: str
    what: str
    pool: str = ""


@attrs.define
class _Flex:
    after: float | None  # None: never granted
    fail: str | None = None


@attrs.define
class _Reservation:
    zone: str
    free: int
    held: dict[str, int] = attrs.field(factory=dict)


class Stock:
    """The fake's GPU capacity per kind and zone (see the module's doc).

    Examples:
        >>> from rl_lustre.testing import FakeGCP
        >>> with FakeGCP() as gcp:
        ...     gcp.stock.out("spot", zone="us-east1-b")
        ...     gcp.stock.flex_start(after=1200)
        ...     gcp.stock.reservation("my-res", zone="us-east1-b", free=8)
    """

    def __init__(self, core: Core) -> None:
        self.core = core
        self._out: dict[tuple[str, str], tuple[float, float | None]] = {}
        self._flex: dict[str, _Flex] = {}
        self._reservations: dict[str, _Reservation] = {}
        self.events: list[StockEvent] = []
        # Scale-ups already recorded (pool, asked at): one event per ask, however often asked.
        self._refused: set[tuple[str, float]] = set()
        self._granted: set[tuple[str, float]] = set()
        self._asked: set[tuple[str, float]] = set()

    def reset(self) -> None:
        with self.core.lock:
            self._out.clear()
            self._flex.clear()
            self._reservations.clear()
            self.events.clear()
            self._refused.clear()
            self._granted.clear()
            self._asked.clear()

    def out(self, kind: str, *, zone: str = _ANY, after: float = 0.0, until: float | None = None) -> None:
        """``kind`` has no capacity in ``zone`` (``"*"``: every zone) from ``after`` seconds from
        now, until ``until`` seconds from now (None: until :meth:`back`)."""
        now = self.core.now()
        scale = self.core.time_scale
        with self.core.lock:
            self._out[(kind, zone)] = (now + after * scale, None if until is None else now + until * scale)

    def back(self, kind: str, *, zone: str = _ANY) -> None:
        """``kind`` has capacity in ``zone`` again."""
        with self.core.lock:
            self._out.pop((kind, zone), None)

    def flex_start(self, *, zone: str = _ANY, after: float | None = 0.0, fail: str | None = None) -> None:
        """Flex-start requests in ``zone`` are granted ``after`` seconds once asked (None: never,
        they stay queued), or fail at once with ``fail`` as the message."""
        with self.core.lock:
            self._flex[zone] = _Flex(None if after is None else after * self.core.time_scale, fail)

    def reservation(self, name: str, *, zone: str, free: int, project: str | None = None) -> None:
        """A specific reservation ``name`` (``projects/<project>/reservations/<name>`` when shared
        from ``project``) in ``zone`` with ``free`` nodes."""
        key = f"projects/{project}/reservations/{name}" if project else name
        with self.core.lock:
            self._reservations[key] = _Reservation(zone, free)

    def free(self, name: str) -> int:
        """Nodes of reservation ``name`` nobody holds."""
        with self.core.lock:
            return self._reservations[name].free

    # -- what the GKE fake asks (under the core's lock) -----------------------------------

    def _record(self, at: float, kind: str, zone: str, what: str, pool: str = "") -> None:
        self.events.append(StockEvent(at, kind, zone, what, pool))

    def is_out(self, kind: str, zone: str, at: float) -> bool:
        for key in ((kind, zone), (kind, _ANY)):
            window = self._out.get(key)
            if window is not None and window[0] <= at and (window[1] is None or at < window[1]):
                return True
        return False

    def node_pool_problem(self, pool: Any, project: str, zone: str, at: float, name: str) -> str | None:
        """Why GKE cannot give ``pool`` its nodes at fake time ``at`` (the operation's message), or None."""
        config = pool.config
        if config.flex_start or not config.accelerators or pool.initial_node_count == 0:
            return None  # no VM asked for yet: the cluster autoscaler's scale-ups ask (scale_up)
        affinity = config.reservation_affinity
        if affinity.consume_reservation_type == type(affinity).Type.SPECIFIC_RESERVATION:
            return self._reserve(list(affinity.values), pool.initial_node_count, project, zone, at, name)
        kind = "spot" if config.spot else "on-demand"
        if self.is_out(kind, zone, at):
            self._record(at, kind, zone, "stockout", name)
            return (
                f"Google Compute Engine: Not all instances running in IGM after 37.2s. Expected "
                f"{pool.initial_node_count}, running 0, transitioning {pool.initial_node_count}. Current errors: "
                f"[GCE_STOCKOUT]: Instance 'gke-{name}-0' creation failed: The zone 'projects/{project}/zones/"
                f"{zone}' does not have enough resources available to fulfill the request.  Try a different "
                "zone, or try again later."
            )
        self._record(at, kind, zone, "granted", name)
        return None

    def _reserve(self, values: list[str], count: int, project: str, zone: str, at: float, name: str) -> str | None:
        wanted = values[0] if values else ""
        found = self._reservations.get(wanted) or self._reservations.get(
            wanted.removeprefix(f"projects/{project}/reservations/")
        )
        path = wanted if wanted.startswith("projects/") else f"projects/{project}/reservations/{wanted}"
        if found is None or found.zone != zone:
            self._record(at, "reservation", zone, "reservation-missing", name)
            return f"Specified reservation '{path}' does not exist in zone {zone}."
        if found.free < count:
            self._record(at, "reservation", zone, "reservation-full", name)
            return (
                f"Specified reservation '{path}' does not have available resources for the request: "
                f"{found.free} of {count} nodes free."
            )
        found.free -= count
        found.held[name] = found.held.get(name, 0) + count
        self._record(at, "reservation", zone, "granted", name)
        return None

    def scale_up(self, pool: Any, project: str, zone: str, asked_at: float, now: float, count: int) -> tuple[str, str]:
        """``("wait" | "granted" | "failed", message)`` for the cluster autoscaler's scale-up of
        ``pool`` to ``count`` nodes asked at ``asked_at`` (or its instance group's re-creation of
        lost VMs): flex-start as :meth:`flex_decision`; Spot and on-demand granted
        ``gke.scale_up`` after the ask, or refused ``gke.scale_up_stockout`` after it when the
        kind is out in the zone then; a reservation's pool holds ``count`` of its nodes."""
        config, name = pool.config, pool.name
        if (name, asked_at) not in self._asked:
            self._asked.add((name, asked_at))
            kind = "flex-start" if config.flex_start else "spot" if config.spot else "on-demand"
            self._record(asked_at, kind, zone, "asked", name)
        if config.flex_start:
            return self.flex_decision(zone, asked_at, now, name)
        affinity = config.reservation_affinity
        if affinity.consume_reservation_type == type(affinity).Type.SPECIFIC_RESERVATION:
            if now < asked_at + self.core.delay("gke.scale_up"):
                return "wait", "scale-up under way"
            held = sum(r.held.get(name, 0) for r in self._reservations.values())
            problem = self._reserve(list(affinity.values), max(0, count - held), project, zone, now, name)
            return ("failed", problem) if problem else ("granted", "")
        kind = "spot" if config.spot else "on-demand"
        if self.is_out(kind, zone, asked_at):
            if now < asked_at + self.core.delay("gke.scale_up_stockout"):
                return "wait", "scale-up under way"
            if (name, asked_at) not in self._refused:
                self._refused.add((name, asked_at))
                self._record(asked_at + self.core.delay("gke.scale_up_stockout"), kind, zone, "stockout", name)
            return (
                "failed",
                f"Node scale up in zones {zone} associated with this pod failed: GCE out of resources. "
                "Pod is at risk of not being scheduled.",
            )
        if now < asked_at + self.core.delay("gke.scale_up"):
            return "wait", "scale-up under way"
        if (name, asked_at) not in self._granted:
            self._granted.add((name, asked_at))
            self._record(now, kind, zone, "granted", name)
        return "granted", ""

    def node_pool_deleted(self, name: str) -> None:
        """A pool's reserved nodes go back to their reservation."""
        for res in self._reservations.values():
            res.free += res.held.pop(name, 0)

    def flex_decision(self, zone: str, asked_at: float, now: float, pool: str) -> tuple[str, str]:
        """``("wait" | "granted" | "failed", message)`` for a flex-start request asked at ``asked_at``."""
        flex = self._flex.get(zone) or self._flex.get(_ANY) or _Flex(0.0)
        if flex.fail is not None:
            self._record(now, "flex-start", zone, "failed", pool)
            return "failed", flex.fail
        if self.is_out("flex-start", zone, now) or flex.after is None:
            return (
                "wait",
                "Waiting for resources. Currently there are not enough resources available to fulfill the request.",
            )
        if now >= asked_at + flex.after:
            self._record(asked_at + flex.after, "flex-start", zone, "granted", pool)
            return "granted", "Provisioning Request was successfully provisioned."
        return (
            "wait",
            "Waiting for resources. Currently there are not enough resources available to fulfill the request.",
        )
