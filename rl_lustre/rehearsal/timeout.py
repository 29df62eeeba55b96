"""NeMo-RL's save-by timeout, as the rehearsal keeps it.

NeMo-RL v0.4.0's ``grpo_train`` (``nemo_rl/algorithms/grpo.py``) starts a clock when it
begins (after setup: model loading and vLLM come before it) from
``checkpointing.checkpoint_must_save_by`` (``DD:HH:MM:SS``, or null: no limit). After
every step it asks whether the time is up, or would be by the end of another step as long
as the steps so far took on average (``TimeoutChecker`` with ``fit_last_save_time``, in
``nemo_rl/utils/timer.py``); the first time it is, that step saves (with checkpointing
on), then the loop prints ``Timeout has been reached, stopping training early`` and ends.

    >>> t = SaveBy("00:00:00:10", now=100.0)
    >>> t.mark(now=103.0), t.due(now=103.0)    # one step of 3 s: 3 + 3 < 10
    (None, False)
    >>> t.mark(now=108.0), t.due(now=108.0)    # steps of 4 s on average: 8 + 4 >= 10
    (None, True)
    >>> t.due(now=200.0)                       # only once
    False
    >>> SaveBy(None, now=0.0).due(now=1e9)
    False
"""

from __future__ import annotations

import time
from typing import Any

from ..oncluster.nemo_formats import parse_save_by

__all__ = ["SaveBy"]


class SaveBy:
    """The clock of one ``grpo_train`` call; ``value``: ``checkpoint_must_save_by``."""

    def __init__(self, value: Any, *, now: float | None = None) -> None:
        seconds = parse_save_by(value)
        self.limit = float("inf") if seconds is None else seconds
        self.start = time.time() if now is None else now
        self.previous = self.start
        self.steps: list[float] = []
        self.fired = False

    def mark(self, *, now: float | None = None) -> None:
        """A step ended."""
        now = time.time() if now is None else now
        self.steps.append(now - self.previous)
        self.previous = now

    def due(self, *, now: float | None = None) -> bool:
        """Whether this step saves and the loop ends: true once, when the time is (nearly) up."""
        if self.fired:
            return False
        elapsed = (time.time() if now is None else now) - self.start
        average = sum(self.steps) / len(self.steps) if self.steps else 0.0
        self.fired = elapsed + average >= self.limit
        return self.fired
