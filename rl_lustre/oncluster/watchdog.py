"""The watchdog: a running attempt's progress, from what NeMo-RL prints and writes, and when
its silence is a stall.

A run whose nodes are all alive can still stop moving: a collective that waits for ever on
a rank stuck elsewhere, a save that never completes, a generation engine that deadlocked.
Nothing fails, so nothing else notices. The supervisor feeds every line the command prints
to a :class:`Watchdog` and shows it the checkpoint directory; the watchdog says when the
run has been silent for longer than it may be.

What counts as progress (each resets the silence)
    - NeMo-RL's own lines, as the supervisor stamps them (:mod:`.stamps`): ``SETUP
      COMPLETE``, an epoch or step header, ``Saving checkpoint for step S...``,
      ``▶ Starting validation at step S...``, ``📊 Training Results:``, the loop's last line;
    - the line that opens each phase of a step (``▶ Generating responses...``,
      ``▶ Training policy...``, ...) and the timers after a step or a validation
      (``• Total step time: 35.70s``, ``• Total validation time: 4.20s``);
    - on the volume: a ``tmp_step_N`` that appears or grows (a save writing), a ``step_N``
      that appears (a save completed).

    Anything else -- Ray workers' lines, warnings, a heartbeat a stuck process keeps
    printing -- is not progress.

How long a silence may last (the allowance)
    - from the attempt's start until its first step is done (model loading, engine
      start-up, compilation, the first step): ``startup_timeout`` (never less than the
      allowance below);
    - then ``hang_timeout`` when the job sets one; by default it adapts: ``factor`` x the
      longest step, save or validation seen so far in the run (every attempt; an
      attempt's first step, slow by nature, is left out), and never less than ``floor``.
      A slow generation step, a long save or a validation pass is never a stall;
    - the run's first save and first validation, which nothing has timed yet, have the
      start-up allowance too.

A save that never completes counts: while a ``tmp_step_N`` stays without growing, its
silence grows like any other, and the stall says so. Only a running attempt is watched:
a job in the queue, or waiting for capacity after a preemption, is not stalled.

    >>> w = Watchdog(hang_timeout=None, startup_timeout=100.0, floor=10.0, factor=3.0)
    >>> w.start(now=0.0)
    >>> w.allowance()[0]    # before the first step is done: the start-up allowance
    100.0
    >>> w.feed("========================= Step 1/9 =========================", {"event": "step", "step": 1}, now=50.0)
    >>> w.feed("  • Total step time: 30.00s", None, now=80.0)
    >>> w.feed("========================= Step 2/9 =========================", {"event": "step", "step": 2}, now=80.0)
    >>> w.feed("  • Total step time: 6.00s", None, now=86.0)
    >>> w.allowance()        # 3 x the longest step seen (the first is left out), at least 10 s
    (18.0, '3 x the longest step, save or validation seen (6s), at least 10s')
    >>> w.stall(now=100.0) is None, w.stall(now=104.5).step
    (True, 2)

It runs on the cluster (shipped with the supervisor; standard library only).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import threading
import time
from typing import Any

from .nemo_formats import (
    NCCL_TIMEOUT_LINE,
    PHASE_LINE,
    SAVING,
    STEP_TIME_LINE,
    VALIDATION_TIME_LINE,
    checkpoint_name,
    checkpoint_step,
)

__all__ = ["DEFAULT_FACTOR", "DEFAULT_FLOOR", "DEFAULT_STARTUP", "Stall", "Watchdog"]

# The adaptive default: 3 x the longest step, save or validation seen, at least 10 minutes
# (NeMo-RL's own NCCL timeout is PyTorch's 10 minutes: a collective hang usually ends the
# attempt that way first, and is a hang all the same).
DEFAULT_FLOOR = 600.0
DEFAULT_FACTOR = 3.0
# Model loading, vLLM's start-up and compilation, and the first step: an hour.
DEFAULT_STARTUP = 3600.0


@dataclasses.dataclass(frozen=True)
class Stall:
    """An attempt that made no progress for longer than its allowance.

    Attributes:
        phase: where it was: ``startup`` (before its first step header), ``step``,
            ``save``, ``validation`` or ``finishing`` (after the loop's last line).
        step: the (global) step that was running; 0 before the first.
        since: when the last progress was seen (seconds since the epoch).
        detected_at: when the silence was found too long.
        allowance: the silence allowed, in seconds.
        why: how the allowance was set.
        saving: during a save, the ``tmp_step_N`` that stays; else None.
    """

    phase: str
    step: int
    since: float
    detected_at: float
    allowance: float
    why: str
    saving: str | None = None

    @property
    def silence(self) -> float:
        """Seconds without progress when it was found."""
        return self.detected_at - self.since

    def describe(self) -> str:
        """One line for people.

        Examples:
            >>> Stall("save", 4, 100.0, 712.5, 600.0, "hang_timeout=600s", "tmp_step_4").describe()
            'no progress for 612.5s in the save of step 4 (tmp_step_4 stays) (allowed: 600s, hang_timeout=600s)'
        """
        where = {
            "startup": "before the first step (start-up)",
            "step": f"in step {self.step}",
            "save": f"in the save of step {self.step}" + (f" ({self.saving} stays)" if self.saving else ""),
            "validation": f"in the validation at step {self.step}",
            "finishing": f"after the last step ({self.step}), before the command exited",
        }.get(self.phase, f"at step {self.step}")
        return f"no progress for {self.silence:.1f}s {where} (allowed: {self.allowance:g}s, {self.why})"


class Watchdog:
    """The progress of the running attempt, and its allowance (see the module).

    Args:
        hang_timeout: the job's ``hang_timeout`` (seconds), or None: adapt.
        startup_timeout: the allowance until an attempt's first step is done.
        floor: the adaptive allowance's minimum.
        factor: the adaptive allowance's multiple of the longest step, save or validation.
    """

    def __init__(
        self,
        *,
        hang_timeout: float | None,
        startup_timeout: float = DEFAULT_STARTUP,
        floor: float = DEFAULT_FLOOR,
        factor: float = DEFAULT_FACTOR,
    ) -> None:
        self.hang_timeout = hang_timeout
        self.startup_timeout = startup_timeout
        self.floor = floor
        self.factor = factor
        self._lock = threading.Lock()
        # The run's longest step, save and validation, over every attempt.
        self.longest: dict[str, float] = {}
        self.start(now=time.time())

    def start(self, *, now: float | None = None) -> None:
        """A new attempt starts: its start-up allowance applies until its first step is done."""
        now = time.time() if now is None else now
        with self._lock:
            self.started_at = now
            self.last_progress = now
            self.phase = "startup"
            self.step = 0
            self.steps_begun = 0
            self.first_done = False
            self.phase_since = now
            self.step_began: float | None = None
            self.nccl_timeout: str | None = None
            # Checkpoint directories: those there at the start, the tmp_step_N being written (and its size).
            self._seen: set[str] | None = None
            self._saving: tuple[str, int] | None = None

    # -- what the command prints ----------------------------------------------------------

    def feed(self, line: str, record: dict[str, Any] | None, *, now: float | None = None) -> None:
        """One line of the command's output, with its stamped record (:mod:`.stamps`), if any."""
        now = time.time() if now is None else now
        text = line.strip()
        with self._lock:
            if self.nccl_timeout is None and NCCL_TIMEOUT_LINE.search(text):
                self.nccl_timeout = text[-500:]
            if record is not None:
                self._record(record, now)
                return
            if not text or text[0] == "(":  # a Ray worker's line: "(Actor pid=...) ..."
                return
            m = STEP_TIME_LINE.search(text)
            if m:
                if self.steps_begun > 1:  # an attempt's first step is slow by nature
                    self._seen_took("step", float(m.group(1)))
                self._progress(now)
                return
            m = VALIDATION_TIME_LINE.search(text)
            if m:
                self._seen_took("validation", float(m.group(1)))
                if self.phase == "validation":
                    self.phase = "step" if self.steps_begun else "startup"
                self._progress(now)
                return
            if PHASE_LINE.fullmatch(text):
                self._progress(now)

    def _record(self, record: dict[str, Any], now: float) -> None:
        event = record.get("event")
        if event == "step":
            if self.step_began is not None and self.steps_begun > 1:
                self._seen_took("step", now - self.step_began)
            if self.steps_begun >= 1:
                self.first_done = True
            self._end_save(now)
            self.steps_begun += 1
            self.step = int(record.get("step") or self.step)
            self.phase, self.phase_since, self.step_began = "step", now, now
        elif event == "save":
            self.step = int(record.get("step") or self.step)
            self.phase, self.phase_since = "save", now
        elif event == "validation":
            if self.phase == "save":
                self._end_save(now)
            self.phase, self.phase_since = "validation", now
        elif event == "results":
            self._end_save(now)
            if self.steps_begun:
                self.first_done = True
            self.phase = "step"
        elif event == "finished":
            self._end_save(now)
            self.phase, self.phase_since = "finishing", now
        self._progress(now)

    def _end_save(self, now: float) -> None:
        if self.phase == "save":
            self._seen_took("save", now - self.phase_since)
            self.phase = "step"

    def _seen_took(self, what: str, seconds: float) -> None:
        if seconds > self.longest.get(what, 0.0):
            self.longest[what] = seconds

    def _progress(self, now: float) -> None:
        self.last_progress = max(self.last_progress, now)

    # -- what it writes -------------------------------------------------------------------

    def look(self, checkpoint_dir: str, *, now: float | None = None) -> None:
        """Read the checkpoint directory once: a ``tmp_step_N`` that appears or grows, and a
        ``step_N`` that appears, are progress, as of when they changed (not when they were seen)."""
        now = time.time() if now is None else now
        try:
            names = set(os.listdir(checkpoint_dir))
        except OSError:
            return
        saving = sorted(n for n in names if checkpoint_step(n, SAVING) is not None)
        size, written = _size(os.path.join(checkpoint_dir, saving[-1])) if saving else (0, 0.0)
        with self._lock:
            seen, self._seen = self._seen, names
            if seen is None:  # the directory as the attempt found it
                self._saving = (saving[-1], size) if saving else None
                return
            for name in sorted(names - seen):
                step = checkpoint_step(name)
                if step is not None:  # a save completed: when it was renamed
                    at = min(now, _changed(os.path.join(checkpoint_dir, name), now))
                    if self.phase == "save" and step >= self.step:
                        self._end_save(at)
                    self._progress(at)
            if saving:
                current = (saving[-1], size)
                if current != self._saving:  # a save began or grew
                    at = min(now, written or now)
                    if self.phase not in ("save", "finishing") and checkpoint_step(current[0], SAVING) == self.step:
                        self.phase, self.phase_since = "save", at
                    self._progress(at)
                self._saving = current
            else:
                self._saving = None

    # -- the verdict ----------------------------------------------------------------------

    def allowance(self) -> tuple[float, str]:
        """The silence allowed now, in seconds, and how it was set."""
        with self._lock:
            return self._allowance()

    def _allowance(self) -> tuple[float, str]:
        if self.hang_timeout is not None:
            steady, why = self.hang_timeout, f"hang_timeout={self.hang_timeout:g}s"
        else:
            longest = max(self.longest.values(), default=0.0)
            steady = max(self.floor, self.factor * longest)
            seen = f"{self.factor:g} x the longest step, save or validation seen ({longest:.3g}s)"
            why = f"{seen}, at least {self.floor:g}s" if longest else f"nothing timed yet: at least {self.floor:g}s"
        if self.startup_timeout > steady:
            if not self.first_done and self.phase != "finishing":
                return self.startup_timeout, f"startup_timeout={self.startup_timeout:g}s (the first step is not done)"
            if self.phase in ("save", "validation") and self.phase not in self.longest:
                return self.startup_timeout, f"startup_timeout={self.startup_timeout:g}s (the run's first {self.phase})"
        return steady, why

    def stall(self, *, now: float | None = None) -> Stall | None:
        """The stall, if the attempt has been silent longer than its allowance; else None."""
        now = time.time() if now is None else now
        with self._lock:
            allowed, why = self._allowance()
            if now - self.last_progress < allowed:
                return None
            saving = None
            if self.phase == "save":
                saving = self._saving[0] if self._saving is not None else checkpoint_name(self.step, SAVING)
            return Stall(self.phase, self.step, self.last_progress, now, allowed, why, saving)

    def silence(self, *, now: float | None = None) -> float:
        """Seconds since the last progress."""
        now = time.time() if now is None else now
        with self._lock:
            return now - self.last_progress


def _size(path: str) -> tuple[int, float]:
    """Bytes under ``path`` (a save being written), and when the newest of its files changed."""
    total, newest = 0, 0.0
    for top, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                st = os.lstat(os.path.join(top, name))
                total += st.st_size
                newest = max(newest, st.st_mtime)
    return total, newest


def _changed(path: str, default: float) -> float:
    """When ``path`` last changed (its inode: a rename counts), or ``default``."""
    try:
        return os.stat(path).st_ctime
    except OSError:
        return default
