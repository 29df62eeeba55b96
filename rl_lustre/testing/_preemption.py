"""``Preemption`` and ``HeadLoss``: what a simulated Spot preemption (or head loss) took away,
and what it brings back.

Made by :func:`rl_lustre.testing.preempt` (local worker raylets) and
:meth:`rl_lustre.testing.KubeFake.preempt` (fake GKE worker pods); by
:func:`rl_lustre.testing.lose_head` and :meth:`rl_lustre.testing.KubeFake.lose_head`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from .._public import public

__all__ = ["HeadLoss", "Preemption"]

logger = logging.getLogger("rl_lustre.testing.preempt")


@public("rl_lustre.testing")
class Preemption:
    """What :func:`preempt` did, and the replacements it brings back.

    Attributes:
        nodes: the names of the nodes taken away (local: ``worker-<n>``; fake GKE: the pods).
        at: when they were taken away (seconds since the epoch).
        back_after: seconds until replacements start, or None when capacity never returns.
        replacements: the names of the replacement nodes, once started.
        error: why starting a replacement failed, if it did.
    """

    def __init__(self, nodes: list[str], at: float, back_after: float | None) -> None:
        self.nodes = tuple(nodes)
        self.at = at
        self.back_after = back_after
        self.replacements: list[str] = []
        self.error: BaseException | None = None
        self._done = threading.Event()
        if back_after is None:
            self._done.set()

    def __repr__(self) -> str:
        return f"Preemption(nodes={self.nodes}, back_after={self.back_after}, replacements={self.replacements})"

    def wait(self, timeout: float | None = None) -> list[str]:
        """Wait until the replacements run (immediately when none come); return their names.

        Raises:
            TimeoutError: they were not up within ``timeout``.
        """
        if not self._done.wait(timeout):
            raise TimeoutError(f"the replacements of {self.nodes} were not up after {timeout}s")
        if self.error is not None:
            raise self.error
        return list(self.replacements)

    def _bring_back(self, start: object) -> None:
        def run() -> None:
            assert self.back_after is not None
            time.sleep(self.back_after)
            try:
                self.replacements = list(start())  # type: ignore[operator]
                logger.info("preemption of %s: replacements %s are up", self.nodes, self.replacements)
            except BaseException as exc:  # reported through wait()
                self.error = exc
            finally:
                self._done.set()

        threading.Thread(target=run, name="rl_lustre-preempt", daemon=True).start()


@public("rl_lustre.testing")
class HeadLoss:
    """What :func:`lose_head` did, and the head it brings back.

    Attributes:
        head: the head taken away (local: ``pid <n>``; fake GKE: its pod's name).
        reason: its termination reason, as its pod's status tells it (``Killed``, ``OOMKilled``, ``Evicted``).
        at: when it went (seconds since the epoch).
        back_after: seconds until the new head starts; None when none comes.
        ready_at: when the new head was ready (its Jobs API answered; the worker nodes follow).
        error: why bringing the new head back failed, if it did.
    """

    def __init__(self, head: str, reason: str, at: float, back_after: float | None) -> None:
        self.head = head
        self.reason = reason
        self.at = at
        self.back_after = back_after
        self.ready_at: float | None = None
        self.error: BaseException | None = None
        self._done = threading.Event()
        if back_after is None:
            self._done.set()

    def __repr__(self) -> str:
        return f"HeadLoss(head={self.head!r}, reason={self.reason!r}, back_after={self.back_after})"

    def wait(self, timeout: float | None = None) -> float | None:
        """Wait until the new head is ready (at once when none comes); returns when it was.

        Raises:
            TimeoutError: it was not ready within ``timeout``.
        """
        if not self._done.wait(timeout):
            raise TimeoutError(f"the head that replaces {self.head} was not ready after {timeout}s")
        if self.error is not None:
            raise self.error
        return self.ready_at

    def _bring_back(self, start: Callable[[], float | None]) -> None:
        """Run ``start`` after ``back_after`` seconds: it brings the head back and returns when the
        new head was ready (None: when it returned)."""

        def run() -> None:
            assert self.back_after is not None
            time.sleep(self.back_after)
            try:
                ready = start()
                self.ready_at = ready if ready is not None else time.time()
                logger.info("the head that replaces %s is ready", self.head)
            except BaseException as exc:  # reported through wait()
                self.error = exc
            finally:
                self._done.set()

        threading.Thread(target=run, name="rl_lustre-lose-head", daemon=True).start()
