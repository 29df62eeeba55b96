"""A job's log as a :class:`~rl_lustre.goodput.timeline.RunTimeline`: when each attempt,
step, save, validation, wait and recovery began and ended.

The *when* comes from the supervisor's journal (:mod:`rl_lustre.oncluster.records`: its
own records and its stamps on NeMo-RL's lines, :mod:`rl_lustre.oncluster.stamps`), the
*how long* from NeMo-RL's own timers in the same log (``Total step time``, the
``checkpointing`` timer, ``Total validation time``; :mod:`rl_lustre.nemo_rl.logs`), the
recoveries from the supervisor's RESTART / RESUMED records
(:func:`rl_lustre.recovery.parse_restarts`), and the queue's waits and the nodes each
attempt held from the queue's journal records (``queued``, ``granted``, ``held``).

A step runs from its header to the next header; the last of an attempt for NeMo-RL's
``Total step time`` (else until its results were printed; else, cut off by the attempt's
end, or running). A save lasts from its ``Saving checkpoint`` line for the step's
``checkpointing`` timer, a validation from its ``Starting validation`` line for its
``Total validation time`` -- both inside their step (a late stamp that would run one past
its step's end is moved back to end with the step, see :func:`_inside`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import attrs

from ..nemo_rl.logs import LogParser, StepRecord
from ..oncluster.records import MARK, RESTART_MARK
from ..recovery import parse_restarts
from .timeline import Attempt, HeldRecord, Interval, Recovery, RunTimeline, StepSpan

__all__ = ["run_timeline"]

TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED")


@attrs.define
class _Attempt:
    number: int
    started_at: float
    parser: LogParser = attrs.field(factory=lambda: LogParser(clock=None))
    ended_at: float | None = None
    exit_code: int | None = None
    setup_done_at: float | None = None
    initial_validation_at: float | None = None
    steps: list[dict[str, Any]] = attrs.field(factory=list)
    saves: dict[int, float] = attrs.field(factory=dict)
    validations: dict[int, float] = attrs.field(factory=dict)
    results: dict[int, float] = attrs.field(factory=dict)


def run_timeline(
    run: str,
    log: str,
    *,
    status: str,
    submitted_at: float,
    ended_at: float | None,
    name: str | None = None,
    nodes_needed: int | None = None,
) -> RunTimeline:
    """The timeline of run ``run`` from its (raw) log and its Jobs API record.

    Args:
        run: the submission id.
        log: the whole log so far, journal records included (``Run.logs(records=True)``).
        status: the Jobs API's status.
        submitted_at: the Jobs API's start time.
        ended_at: its end time (used only once the status is terminal).
        name: the job's name (by default the id).
        nodes_needed: the GPU nodes it takes, when its log does not say.
    """
    attempts: list[_Attempt] = []
    queued: list[list[float | None]] = []
    holds: list[HeldRecord] = []
    waits: dict[int, list[float | None]] = {}
    restart_attempt: dict[int, int] = {}
    restart = 0
    journal = False
    need = nodes_needed
    for line in log.splitlines():
        if line.startswith(MARK):
            record = _json(line[len(MARK) :])
            if record is None or not isinstance(record.get("at"), (int, float)):
                continue
            journal = True
            at, event = float(record["at"]), record.get("event")
            current = attempts[-1] if attempts else None
            if event == "start" and int(record.get("nodes") or 0) > 0 and need is None:
                need = int(record["nodes"])
            elif event == "attempt":
                attempts.append(_Attempt(int(record.get("attempt") or len(attempts) + 1), at))
            elif current is None:
                _queue(event, record, at, queued, holds)
                if event in ("queued", "waiting", "granted") and record.get("need"):
                    need = int(record["need"])
            elif event == "exit":
                current.ended_at, current.exit_code = at, _int(record.get("code"))
            elif event == "setup_done":
                current.setup_done_at = at
            elif event == "step":
                current.steps.append({"step": int(record["step"]), "at": at})
            elif event == "save":
                current.saves[int(record["step"])] = at
            elif event == "validation":
                step = int(record["step"])
                if step == 0 and not current.steps:
                    current.initial_validation_at = at
                else:
                    current.validations[step] = at
            elif event == "results":
                current.results[int(record.get("step") or 0)] = at
            elif event in ("capacity_wait", "capacity_back") and restart:
                waits.setdefault(restart, [None, None])[event == "capacity_back"] = at
            else:
                _queue(event, record, at, queued, holds)
            continue
        if line.startswith(RESTART_MARK):
            record = _json(line[len(RESTART_MARK) :])
            if record is not None and "restart" in record:
                restart = int(record["restart"])
                restart_attempt[restart] = attempts[-1].number if attempts else 1
            continue
        if attempts:
            attempts[-1].parser.feed(line)
    done = [_attempt(a) for a in attempts]
    recoveries = []
    for r in parse_restarts(log):
        wait, back = waits.get(r.number, [None, None])
        ended = restart_attempt.get(r.number, 1)
        resumed = r.first_step_at
        if resumed is None and r.first_step is not None:
            later = [a for a in done if a.number > ended and a.steps]
            resumed = later[0].steps[0].start if later else None
        recoveries.append(
            Recovery(
                number=r.number,
                lost_at=r.lost_at,
                resume_step=r.resumed_from_step,
                ended_attempt=ended,
                capacity_wait_at=wait,
                capacity_back_at=back,
                capacity_seconds=r.capacity_seconds,
                resumed_at=resumed,
                nodes_lost=tuple(n.name or n.address or n.node_id for n in r.nodes),
                cause=r.cause,
                hung_from=r.last_progress_at if r.cause == "hung" else None,
            )
        )
    notes = []
    if not journal:
        notes.append(f"the log of {run} has no goodput records: its seconds are unattributed")
    terminal = status in TERMINAL
    if terminal and attempts and attempts[-1].ended_at is None:
        notes.append(f"run {run} is {status} but its log ends before its end")
    return RunTimeline(
        run=run,
        name=name or run,
        submitted_at=submitted_at,
        ended_at=ended_at if terminal else None,
        status=status,
        nodes_needed=need,
        queued=tuple(Interval(float(q[0]), q[1]) for q in queued if q[0] is not None),
        attempts=tuple(done),
        recoveries=tuple(recoveries),
        holds=tuple(holds),
        journal=journal,
        rehearsal=any(a.parser.rehearsal for a in attempts),
        notes=tuple(notes),
    )


def _queue(
    event: Any, record: Mapping[str, Any], at: float, queued: list[list[float | None]], holds: list[HeldRecord]
) -> None:
    """The queue's records: its first wait (``queued`` to ``granted``) and the nodes held."""
    if event == "queued" and not queued:
        queued.append([at, None])
    elif event == "granted" and queued and queued[-1][1] is None and record.get("after") != "recovering":
        queued[-1][1] = at
    elif event == "held":
        nodes = tuple(
            (str(n.get("node_id")), _float(n.get("gpus")))
            for n in record.get("nodes") or []
            if isinstance(n, Mapping) and n.get("node_id")
        )
        holds.append(HeldRecord(int(record.get("attempt") or 1), at, nodes))


def _attempt(a: _Attempt) -> Attempt:
    a.parser.close()
    timed: dict[int, StepRecord] = {s.global_step: s for s in a.parser.steps}
    steps = []
    for i, stamp in enumerate(a.steps):
        k, start = stamp["step"], stamp["at"]
        record = timed.get(k)
        total = None if record is None else record.seconds
        if i + 1 < len(a.steps):
            end: float | None = a.steps[i + 1]["at"]
        elif total is not None:
            end = start + total
        else:
            end = a.results.get(k)
        if end is not None and a.ended_at is not None:
            end = min(end, a.ended_at)
        stop = end if end is not None else a.ended_at
        checkpoint = _inside(
            a.saves.get(k),
            None if record is None else record.timings.get("checkpointing"),
            a.results.get(k),
            start,
            stop,
        )
        # NeMo-RL validates before it saves: a validation ends by the save's start.
        validation = _inside(
            a.validations.get(k),
            None if record is None else record.validation_seconds,
            a.results.get(k),
            start,
            stop if checkpoint is None else checkpoint.start,
        )
        steps.append(
            StepSpan(step=k, start=start, end=end, total_seconds=total, checkpoint=checkpoint, validation=validation)
        )
    initial = None
    if a.initial_validation_at is not None:
        seconds = a.parser.initial_validation.get("total_validation_time")
        first = a.steps[0]["at"] if a.steps else a.ended_at
        initial = _inside(a.initial_validation_at, seconds, None, a.setup_done_at or a.started_at, first)
    return Attempt(
        number=a.number,
        started_at=a.started_at,
        ended_at=a.ended_at,
        exit_code=a.exit_code,
        setup_done_at=a.setup_done_at,
        initial_validation=initial,
        steps=tuple(steps),
    )


def _inside(
    at: float | None, seconds: float | None, results: float | None, start: float, stop: float | None
) -> Interval | None:
    """``[at, at + seconds)`` inside its step (``[start, stop)``); without the timer, up to the
    results (or the step's end).

    The supervisor stamps a line when it reads it: on a loaded machine it reads a save's line
    together with the lines after it (the next step's header), so the stamp is late, and
    ``at + seconds`` would run past the step's end, which NeMo-RL's own timers say it does not
    (its ``checkpointing`` and validation timers run inside ``Total step time``). Then the
    interval is moved back to end with its step, keeping the timer's duration (no earlier than
    the step's start): clamping it would hand the save's recorded seconds to the next step."""
    if at is None:
        return None
    if seconds is not None:
        if stop is not None and at + seconds > stop:
            at = max(start, min(at, stop - seconds))
        end: float | None = at + seconds
    else:
        end = results if results is not None and results >= at else stop
    if end is not None and stop is not None:
        end = min(end, stop)
    return Interval(at, None if end is None else max(at, end))


def _json(text: str) -> dict[str, Any] | None:
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _float(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
