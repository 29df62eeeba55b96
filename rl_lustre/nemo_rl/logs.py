"""Parse what NeMo-RL's GRPO loop prints: per-step results, timings, and checkpoint saves.

The format is that of ``grpo_train`` in ``nemo_rl/algorithms/grpo.py`` (v0.4.0 era; the
rehearsal driver prints the same lines). One step looks like this, in order::

    ========================= Step 3/20 =========================
    ▶ Preparing batch...
    ...
    Saving checkpoint for step 3...            (only on save steps, inside the step)
    Removing checkpoint /ckpt/step_1 due to being outside top-2

    📊 Training Results:
      • Loss: 0.0123
      • Generation KL Error: 0.0010
      • Avg Reward: 0.3125
      • Mean Generation Length: 201.2197

    ⏱️  Timing:
      • Total step time: 35.70s
      • policy_training: 10.97s (30.7%)
      • checkpointing: 6.49s (18.2%)

    🔍 Performance Metrics:
      • Mean Total Tokens per Sample: 204.01
      • Throughputs (per GPU):
        - E2E (Samples/sec/gpu): 3.59

Lines from Ray workers (``(DTensorPolicyWorker pid=123, ip=...) ...``) and the
rl_lustre supervisor's lines (``rl_lustre supervisor: ...``, ``RL_LUSTRE_...`` records)
may be interleaved anywhere and are ignored. A step is complete when the next step header,
the end-of-training line, or the end of the text arrives.

Validation inside a step (``▶ Starting validation at step S...``, ``📊 Validation
Results:``, ``⏱️  Validation Timing:`` with ``Total validation time``) belongs to that
step; the initial validation (``grpo.val_at_start``, printed before the first step
header) is kept apart, in :attr:`LogParser.initial_validation`. Epoch headers
(``===== Epoch e/E =====``) give each step its epoch, so that its global step
(:attr:`StepRecord.global_step`) is right in a run of several epochs.

Use :class:`LogParser` to follow a live log line by line, or :func:`parse_log` for a
whole text.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal

import attrs

from .._public import public
from ..oncluster.fallback import EVENT as FALLBACK_EVENT
from ..oncluster.nemo_formats import END_LINE, EPOCH_HEADER, SAVE_LINE, STEP_HEADER
from ..oncluster.records import MARK, read_journal

__all__ = ["CheckpointSave", "LogParser", "ParsedLog", "StepRecord", "parse_log"]

# The supervisor's lines for people and its records for programs (rl_lustre.recovery).
_SUPERVISOR = ("rl_lustre supervisor:", "RL_LUSTRE_")
_NUMBER = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|[-+]?nan|[-+]?inf"
# "  • Loss: 0.0123", "  • policy_training: 10.97s (30.7%)", "    - E2E (Tokens/sec/gpu): 1073.59"
_ITEM = re.compile(rf"\s*[•-]\s*(?P<label>[^:]+?):\s*(?P<value>{_NUMBER})(?P<rest>.*)")
# Ray prefixes every line a worker prints with "(ActorName pid=123, ip=10.0.0.1)".
_RAY_WORKER = re.compile(r"\((?:\S+ )?pid=\d+")

_Block = Literal["results", "timing", "performance", "validation", "validation_timing"]
_HEADERS: list[tuple[re.Pattern[str], _Block]] = [
    (re.compile(r".*Validation Timing:"), "validation_timing"),
    (re.compile(r".*Validation Results:"), "validation"),
    (re.compile(r".*Training Results:"), "results"),
    (re.compile(r".*Timing:"), "timing"),
    (re.compile(r".*Performance Metrics:"), "performance"),
]


def _key(label: str) -> str:
    """``"Avg Reward"`` → ``"avg_reward"``; NeMo-RL's timer names pass through unchanged."""
    return re.sub(r"[^a-z0-9/]+", "_", label.strip().lower()).strip("_")


@public("rl_lustre")
@attrs.frozen
class StepRecord:
    """What NeMo-RL printed for one training step.

    Attributes:
        step: the step number as printed (1-based).
        total: the number of steps the run will take, as printed in the header.
        metrics: the "Training Results" block, snake_cased (``loss``, ``avg_reward``,
            ``mean_generation_length``, ``generation_kl_error``, ...).
        timings: the "Timing" block in seconds, by NeMo-RL's timer name
            (``total_step_time``, ``policy_training``, ``generation``, ``checkpointing``, ...).
        performance: the "Performance Metrics" block, by the label as printed
            (``"E2E (Tokens/sec/gpu)"``, ...).
        validation: the "Validation Results" block, when validation ran in this step
            (``accuracy``, ``average_response_length``, ``samples_processed``).
        started_at: when the step header was read (seconds since the epoch), if known.
        validation_seconds: ``Total validation time`` of the validation in this step, if
            it ran and printed its timing (NeMo-RL times it apart from the step's timers).
        epoch: the epoch, from the last epoch header (1 when none was printed).
    """

    step: int
    total: int
    metrics: Mapping[str, float] = attrs.field(factory=dict)
    timings: Mapping[str, float] = attrs.field(factory=dict)
    performance: Mapping[str, float] = attrs.field(factory=dict)
    validation: Mapping[str, float] = attrs.field(factory=dict)
    started_at: float | None = None
    validation_seconds: float | None = None
    epoch: int = 1

    @property
    def seconds(self) -> float | None:
        """The step's total time as NeMo-RL measured it (``total_step_time``)."""
        return self.timings.get("total_step_time")

    @property
    def global_step(self) -> int:
        """The step counted over the whole run: ``(epoch - 1) * total + step``.

        NeMo-RL's header counts within an epoch, of ``min(len(dataloader), max_num_steps)``.

        Examples:
            >>> StepRecord(step=3, total=20).global_step, StepRecord(step=3, total=20, epoch=2).global_step
            (3, 23)
        """
        return global_step(self.epoch, self.step, self.total)


def global_step(epoch: int, step: int, total: int) -> int:
    """The global step of the header ``Step step/total`` printed in epoch ``epoch`` (1-based)."""
    return (max(epoch, 1) - 1) * total + step


@public("rl_lustre")
@attrs.frozen
class CheckpointSave:
    """One ``Saving checkpoint for step N...`` and how long it took.

    Attributes:
        step: the step saved.
        started_at: when the "Saving checkpoint" line was read, if known.
        ended_at: when the next line of the driver was read, if known.
        timed_seconds: the ``checkpointing`` time of that step's Timing block, if printed.
    """

    step: int
    started_at: float | None = None
    ended_at: float | None = None
    timed_seconds: float | None = None

    @property
    def wall_seconds(self) -> float | None:
        """From the "Saving checkpoint" line to the next driver line, when both were timed."""
        if self.started_at is None or self.ended_at is None:
            return None
        return max(0.0, self.ended_at - self.started_at)

    @property
    def seconds(self) -> float | None:
        """The save's duration: NeMo-RL's own ``checkpointing`` timer when printed
        (exact, and immune to log delivery delays), else the wall-clock estimate."""
        return self.timed_seconds if self.timed_seconds is not None else self.wall_seconds


@attrs.frozen
class ParsedLog:
    """Everything :func:`parse_log` found.

    Attributes:
        steps: completed steps, in the order printed.
        saves: checkpoint saves, in the order printed.
        finished: the log says training reached its end (max steps or timeout).
        initial_validation: the initial validation's results and ``total_validation_time``
            (``grpo.val_at_start``), empty when none ran.
    """

    steps: list[StepRecord]
    saves: list[CheckpointSave]
    finished: bool
    initial_validation: Mapping[str, float] = attrs.field(factory=dict)


class LogParser:
    """Incremental parser of NeMo-RL's GRPO stdout.

    Feed it lines as they arrive; :meth:`feed` returns the records each line
    completes. A :class:`CheckpointSave` is returned together with the
    :class:`StepRecord` of its step, so that it carries NeMo-RL's own timing.

    Args:
        clock: where a line's arrival time comes from when :meth:`feed` is not
            given one; None records no times.

    Examples:
        >>> p = LogParser()
        >>> p.feed("========================= Step 1/2 =========================", at=100.0)
        []
        >>> p.current_step, p.total_steps
        (1, 2)
        >>> p.feed("Saving checkpoint for step 1...", at=101.0)
        []
        >>> for line in ["", "📊 Training Results:", "  • Loss: 0.0123", "⏱️  Timing:",
        ...              "  • Total step time: 4.00s", "  • checkpointing: 2.40s (60.0%)"]:
        ...     _ = p.feed(line, at=103.5)
        >>> step, save = p.feed("========================= Step 2/2 =========================")
        >>> step.metrics["loss"], step.timings["checkpointing"]
        (0.0123, 2.4)
        >>> save.step, save.wall_seconds, save.seconds
        (1, 2.5, 2.4)
    """

    def __init__(self, clock: Callable[[], float] | None = time.time) -> None:
        self._clock = clock
        self.steps: list[StepRecord] = []
        self.saves: list[CheckpointSave] = []
        self.finished = False
        self.rehearsal = False
        # The supervisor's newest on_demand journal record (rl_lustre.oncluster.fallback), if any.
        self.on_demand: dict[str, Any] | None = None
        self.epoch = 1
        self.initial_validation: dict[str, float] = {}
        self._step: int | None = None
        self._total: int | None = None
        self._started_at: float | None = None
        self._block: _Block | None = None
        self._values: dict[_Block, dict[str, float]] = {}
        self._pending_saves: list[CheckpointSave] = []
        self._open_save: CheckpointSave | None = None

    @property
    def current_step(self) -> int | None:
        """The step whose header was read last (it may still be running)."""
        return self._step

    @property
    def total_steps(self) -> int | None:
        """The run's number of steps, from the last step header."""
        return self._total

    @property
    def completed_steps(self) -> int:
        """The highest step known to be complete, 0 before any."""
        return self.steps[-1].step if self.steps else 0

    def feed(self, line: str, at: float | None = None) -> list[StepRecord | CheckpointSave]:
        """Read one line (with or without its newline); return what it completes.

        Args:
            line: one line of the driver's stdout.
            at: when the line was read (seconds since the epoch); by default the
                parser's clock.
        """
        now = at if at is not None or self._clock is None else self._clock()
        line = line.rstrip("\r\n")
        text = line.strip()
        if text.startswith(MARK) and f'"{FALLBACK_EVENT}"' in text:
            self.on_demand = next(iter(read_journal(text)), self.on_demand)
        if _RAY_WORKER.match(text) or text.startswith(_SUPERVISOR):
            return []
        if text.startswith("rl_lustre rehearsal:"):
            self.rehearsal = True
        done: list[StepRecord | CheckpointSave] = []
        if self._open_save is not None and text:
            self._pending_saves.append(attrs.evolve(self._open_save, ended_at=now))
            self._open_save = None

        m = STEP_HEADER.fullmatch(text)
        if m:
            done += self._complete()
            self._step, self._total = int(m.group(1)), int(m.group(2))
            self._started_at = now
            return done
        m = EPOCH_HEADER.fullmatch(text)
        if m:
            done += self._complete()
            self.epoch = int(m.group(1))
            return done
        m = SAVE_LINE.fullmatch(text)
        if m:
            self._open_save = CheckpointSave(step=int(m.group(1)), started_at=now)
            self._block = None
            return done
        if END_LINE.fullmatch(text):
            self.finished = True
            return done + self._complete()
        for pattern, block in _HEADERS:
            if pattern.fullmatch(text):
                self._block = block
                return done
        if self._block is None or not text:
            return done
        item = _ITEM.fullmatch(line)
        if item is None:
            if not line.startswith((" ", "\t")):
                # An unindented line that is not an item ends the block.
                self._block = None
            return done
        label, value = item.group("label").strip(), float(item.group("value"))
        if self._block == "performance":
            self._values.setdefault(self._block, {})[label] = value
        else:
            self._values.setdefault(self._block, {})[_key(label)] = value
        return done

    def close(self) -> list[StepRecord | CheckpointSave]:
        """Complete whatever is pending at the end of the stream and return it.

        A step that printed its results is returned; a save that never finished
        (the process was stopped during it) is returned without an end time.
        """
        if self._open_save is not None:
            self._pending_saves.append(self._open_save)
            self._open_save = None
        return self._complete()

    def _complete(self) -> list[StepRecord | CheckpointSave]:
        out: list[StepRecord | CheckpointSave] = []
        values, self._values, self._block = self._values, {}, None
        timings = values.get("timing", {})
        validation_timing = values.get("validation_timing", {})
        if self._step is None and (values.get("validation") or validation_timing):
            # Printed before any step: the initial validation (grpo.val_at_start).
            self.initial_validation = {**values.get("validation", {}), **validation_timing}
        if self._step is not None and self._total is not None and (values.get("results") or timings):
            record = StepRecord(
                step=self._step,
                total=self._total,
                metrics=values.get("results", {}),
                timings=timings,
                performance=values.get("performance", {}),
                validation=values.get("validation", {}),
                started_at=self._started_at,
                validation_seconds=validation_timing.get("total_validation_time"),
                epoch=self.epoch,
            )
            self.steps.append(record)
            out.append(record)
        for save in self._pending_saves:
            if save.step == self._step and "checkpointing" in timings:
                save = attrs.evolve(save, timed_seconds=timings["checkpointing"])
            self.saves.append(save)
            out.append(save)
        self._pending_saves = []
        return out


def parse_log(text: str | Iterable[str]) -> ParsedLog:
    """Parse a whole NeMo-RL (or rehearsal) log.

    Without timestamps, a save's duration comes from the step's Timing block
    (``checkpointing``) when it was printed.

    Args:
        text: the log as one string, or an iterable of lines.

    Examples:
        >>> log = '''
        ... ========================= Step 1/1 =========================
        ... Saving checkpoint for step 1...
        ...
        ... 📊 Training Results:
        ...   • Avg Reward: 0.5000
        ...
        ... ⏱️  Timing:
        ...   • Total step time: 3.00s
        ...   • checkpointing: 1.25s (41.7%)
        ... Max number of steps has been reached, stopping training early
        ... '''
        >>> parsed = parse_log(log)
        >>> [(s.step, s.metrics["avg_reward"]) for s in parsed.steps], parsed.saves[0].seconds
        ([(1, 0.5)], 1.25)
    """
    parser = LogParser(clock=None)
    for line in text.splitlines() if isinstance(text, str) else text:
        parser.feed(line)
    parser.close()
    return ParsedLog(
        steps=parser.steps, saves=parser.saves, finished=parser.finished, initial_validation=parser.initial_validation
    )
