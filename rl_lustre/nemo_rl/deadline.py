"""Saving before capacity that ends goes away: NeMo-RL's ``checkpointing.checkpoint_must_save_by``.

Flex-start nodes live at most ``max_run_duration`` from when they arrive. NeMo-RL (v0.4.0)
takes ``checkpointing.checkpoint_must_save_by`` as a duration written ``DD:HH:MM:SS``
(``"00:03:30:00"``: three and a half hours), counted from the start of its training loop,
and saves, then stops, before it runs out (allowing for a step's time). A job submitted on
such capacity is given the time from submission to the capacity's end, less
:data:`SAVE_MARGIN_SECONDS`: what passes before NeMo-RL's clock starts (loading the model,
starting vLLM), and the save itself.

A value the user set is kept; it is reported when it lies past the capacity's end.

Examples:
    >>> save_by_text(3 * 3600 + 30 * 60)
    '00:03:30:00'
    >>> d = Deadline(end=10_000.0 + 3 * 86400)
    >>> d.override(now=10_000.0)
    {'checkpointing.checkpoint_must_save_by': '02:23:30:00'}
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from ..oncluster.nemo_formats import DEADLINE_KEY, parse_save_by, save_by_text

__all__ = ["DEADLINE_KEY", "SAVE_MARGIN_SECONDS", "Deadline", "parse_save_by", "save_by_text"]

# Before NeMo-RL's clock starts (model load, vLLM start-up) plus the save: 30 minutes.
SAVE_MARGIN_SECONDS = 1800.0


@attrs.frozen
class Deadline:
    """When the capacity a job runs on ends (seconds since the epoch), and what that asks of NeMo-RL.

    Attributes:
        end: when the nodes go (their arrival plus ``max_run_duration``).
        margin: how long before ``end`` the save must be done (:data:`SAVE_MARGIN_SECONDS`).
    """

    end: float
    margin: float = SAVE_MARGIN_SECONDS

    @classmethod
    def after(cls, arrived: float, max_run_duration: float) -> Deadline:
        """The deadline of nodes that arrived at ``arrived`` and live ``max_run_duration`` seconds."""
        return cls(end=arrived + max_run_duration)

    def remaining(self, now: float) -> float:
        """Seconds NeMo-RL may run from ``now``: to the end, less the margin (may be negative)."""
        return self.end - self.margin - now

    def override(self, now: float) -> dict[str, str]:
        """The override to pass for a job submitted at ``now``."""
        return {DEADLINE_KEY: save_by_text(self.remaining(now))}

    def findings(self, now: float, *, given: Any = None) -> list[str]:
        """What to warn about for a job submitted at ``now`` (``given``: the user's own value of
        the key, if any): too little time left to save, or a value past the capacity's end."""
        out: list[str] = []
        left = self.remaining(now)
        if left <= 0:
            out.append(
                f"the capacity ends in {max(0.0, self.end - now) / 60:.0f} min, less than the "
                f"{self.margin / 60:.0f} min a save needs before the nodes go: the run will not save "
                "before it loses its nodes"
            )
        mine = parse_save_by(given)
        if mine is not None and mine > max(0.0, left):
            out.append(
                f"{DEADLINE_KEY}={given!r} lies past the capacity's end (it allows "
                f"{save_by_text(max(0.0, left))} from now): NeMo-RL would still be training when the "
                "nodes go"
            )
        return out


def user_value(overrides: Mapping[str, Any]) -> Any:
    """The user's own value of the key among ``overrides`` (``key``, ``+key``, ``++key``), or None."""
    for prefix in ("", "+", "++"):
        if prefix + DEADLINE_KEY in overrides:
            return overrides[prefix + DEADLINE_KEY]
    return None
