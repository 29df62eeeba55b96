"""How long waits and follows ride out an unreachable cluster.

A long :meth:`Run.wait <rl_lustre.run.Run.wait>` or ``run.logs(follow=True)`` outlives
things that are normal on GKE: a dropped port-forward stream, an API server that
restarts (a zonal cluster's control plane is unreachable for minutes during an upgrade
or repair), a head that briefly stops answering. Each failure of that kind is retried
with exponential backoff and logged at WARNING (``rl_lustre.outages``); the outage ends
at the first success (logged at INFO). Only a continuous outage longer than
:attr:`OutageBudget.max_outage` (default 600 s) ends the wait, with the last error.

Examples:
    >>> budget = OutageBudget(max_outage=120)
    >>> budget.delay(0), budget.delay(3), budget.delay(10)
    (0.5, 4.0, 15.0)
"""

from __future__ import annotations

import logging
import time

import attrs

from . import _validate as v
from ._public import public
from .errors import KubernetesError, RayError, RemoteError

__all__ = ["TRANSIENT", "Outage", "OutageBudget"]

logger = logging.getLogger("rl_lustre.outages")

# Errors that mean "cannot reach it right now", not "it said no".
TRANSIENT: tuple[type[BaseException], ...] = (RayError, KubernetesError)


@public("rl_lustre")
@attrs.frozen
class OutageBudget:
    """How long a wait or a follow keeps retrying through a continuous outage.

    Attributes:
        max_outage: seconds of continuous failure tolerated before giving up
            (a zonal GKE control plane restarts in a few minutes).
        initial_delay: seconds before the first retry; doubles per failure.
        max_delay: the longest pause between retries.
    """

    max_outage: float = attrs.field(default=600.0, validator=v.number(ge=0))
    initial_delay: float = attrs.field(default=0.5, validator=v.number(ge=0))
    max_delay: float = attrs.field(default=15.0, validator=v.number(ge=0))

    def delay(self, attempt: int) -> float:
        """The pause before retry number ``attempt`` (0-based)."""
        return float(min(self.max_delay, self.initial_delay * 2**attempt))


class Outage:
    """One wait's (or follow's) view of the current outage: call :meth:`failed` with each
    transient error (it sleeps, or raises once the budget is spent) and :meth:`ok` after
    each success.

    Examples:
        >>> outage = Outage(OutageBudget(max_outage=0), "waiting for job j")
        >>> outage.failed(RayError("connection refused"))  # doctest: +NORMALIZE_WHITESPACE
        Traceback (most recent call last):
        rl_lustre.errors.RayError: waiting for job j: gave up after 0s of failures (outage budget 0s):
        connection refused
    """

    def __init__(self, budget: OutageBudget, what: str) -> None:
        self.budget = budget
        self.what = what
        self.started: float | None = None
        self.retries = 0
        self.total_retries = 0

    def ok(self) -> None:
        """A call succeeded: the outage, if there was one, is over."""
        if self.started is not None:
            logger.info(
                "%s: reachable again after %.1fs and %d retries",
                self.what,
                time.monotonic() - self.started,
                self.retries,
            )
        self.started, self.retries = None, 0

    def failed(self, exc: BaseException, *, deadline: float | None = None) -> None:
        """Sleep before the next retry, or raise when the budget (or ``deadline``) is spent.

        Raises:
            RayError: or :class:`KubernetesError` (the kind of ``exc``): the outage outlasted
                :attr:`OutageBudget.max_outage`; chained to ``exc``.
        """
        now = time.monotonic()
        if self.started is None:
            self.started = now
        elapsed = now - self.started
        left = self.budget.max_outage - elapsed
        if left <= 0:
            kind = type(exc) if isinstance(exc, RemoteError) and type(exc) in (RayError, KubernetesError) else RayError
            raise kind(
                f"{self.what}: gave up after {elapsed:.0f}s of failures "
                f"(outage budget {self.budget.max_outage:g}s): {exc}"
            ) from exc
        pause = min(self.budget.delay(self.retries), left)
        if deadline is not None:
            pause = max(0.0, min(pause, deadline - now))
        self.retries += 1
        self.total_retries += 1
        logger.warning(
            "%s: %s; retry %d in %.1fs (%.0fs of the %gs outage budget left)",
            self.what,
            exc,
            self.retries,
            pause,
            left,
            self.budget.max_outage,
        )
        time.sleep(pause)
