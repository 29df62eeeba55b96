"""Stamps on NeMo-RL's own lines: the journal records that say *when* each thing happened.

NeMo-RL's log says how long things took (``Total step time``, the ``checkpointing``
timer, ``Total validation time``), never when; a finished log carries no time at all. So
the supervisor, which copies every line the command prints, stamps the lines that begin
something with the head's clock as it reads them, as journal records
(:mod:`rl_lustre.oncluster.records`) right after the line:

====================  =========================================  =============================
event                 the line                                   fields
====================  =========================================  =============================
``epoch``             ``===== Epoch e/E =====``                  ``epoch``, ``of``
``setup_done``        ``SETUP COMPLETE`` (the end of ``setup``)
``step``              ``===== Step k/N =====`` (the step begins)  ``epoch``, ``k``, ``of``, ``step``
``validation``        ``▶ Starting validation at step S...``     ``step`` (S; 0 for the initial)
``save``              ``Saving checkpoint for step S...``        ``step``
``results``           ``📊 Training Results:`` (the step's work    ``step``
                      is done; its logging follows)
``finished``          ``Max number of steps ...`` / ``Timeout``  ``why`` (``max_steps``, ``timeout``)
====================  =========================================  =============================

``step`` is the global step, ``(epoch - 1) * N + k``: NeMo-RL's header counts within an
epoch. The supervisor adds its own records around them (``start``, ``attempt``, ``exit``,
``capacity_wait``, ``capacity_back``, ``end``); :mod:`rl_lustre.goodput.runlog` reads them
all back. It runs on the cluster (shipped with the supervisor; standard library only).

    >>> s = Stamper()
    >>> s.feed("========================= Epoch 2/3 =========================")
    {'event': 'epoch', 'epoch': 2, 'of': 3}
    >>> s.feed("========================= Step 4/10 =========================")
    {'event': 'step', 'epoch': 2, 'k': 4, 'of': 10, 'step': 14}
    >>> s.feed("(DTensorPolicyWorker pid=7) Saving checkpoint for step 14...") is None
    True
    >>> s.feed("Saving checkpoint for step 14...")
    {'event': 'save', 'step': 14}
    >>> s.step
    14
"""

from __future__ import annotations

from typing import Any

from .nemo_formats import (
    END_LINE,
    EPOCH_HEADER,
    RESULTS_LINE,
    SAVE_LINE,
    SETUP_DONE,
    STEP_HEADER,
    VALIDATION_LINE,
)

__all__ = ["Stamper"]


class Stamper:
    """Turns the command's output lines into journal records (zero or one per line).

    Attributes:
        epoch: the epoch of the last epoch header (1 before any).
        step: the global step of the last step header (0 before any).
    """

    def __init__(self) -> None:
        self.epoch = 1
        self.step = 0

    def feed(self, line: str) -> dict[str, Any] | None:
        """The record for one line (without ``v`` and ``at``), or None; it never raises."""
        text = line.strip()
        if not text or text[0] == "(":  # empty, or a Ray worker's line: "(Actor pid=...) ..."
            return None
        try:
            return self._record(text)
        except (ValueError, IndexError):
            return None

    def _record(self, text: str) -> dict[str, Any] | None:
        m = STEP_HEADER.fullmatch(text)
        if m:
            k, of = int(m.group(1)), int(m.group(2))
            self.step = (self.epoch - 1) * of + k
            return {"event": "step", "epoch": self.epoch, "k": k, "of": of, "step": self.step}
        m = SAVE_LINE.fullmatch(text)
        if m:
            return {"event": "save", "step": int(m.group(1))}
        m = VALIDATION_LINE.fullmatch(text)
        if m:
            return {"event": "validation", "step": int(m.group(1))}
        if RESULTS_LINE.fullmatch(text):
            return {"event": "results", "step": self.step}
        m = EPOCH_HEADER.fullmatch(text)
        if m:
            self.epoch = int(m.group(1))
            return {"event": "epoch", "epoch": self.epoch, "of": int(m.group(2))}
        if text == SETUP_DONE:
            return {"event": "setup_done"}
        m = END_LINE.fullmatch(text)
        if m:
            return {"event": "finished", "why": "timeout" if m.group(1) == "Timeout" else "max_steps"}
        return None
