"""The supervisor's side of its run's directory: record the run there, and go on from it.

:meth:`RunHome.open` makes the supervisor the run's writer (:mod:`.runrecords`) and sends
everything it prints into the run's records too. A resubmission by the keeper after a head
loss (metadata :data:`~.records.HEAD_LOST`) goes on where the lost supervisor stopped: its
restarts count against the same ``--max-restarts`` (:attr:`RunHome.restarts`), its attempts
go on numbering (:attr:`RunHome.attempts`), a run that held its nodes joins the queue as
``recovering``, ahead of every queued run (:attr:`RunHome.held`), and the loss itself is a
restart of cause ``head-lost`` (:meth:`RunHome.head_lost_restart`).

Standard library only (part of the on-cluster package).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from typing import Any

from .nemo_formats import checkpoint_name
from .records import HEAD_LOST, REPLAY_BEGIN, REPLAY_END, RESTART_MARK, VERSION
from .runrecords import RunWriter, Tee, mark_stopped
from .runview import RunView, as_log

__all__ = ["RunHome"]


class RunHome:
    """The run's directory, as its supervisor keeps it."""

    def __init__(self, writer: RunWriter, before: RunView, head_lost: dict[str, Any] | None) -> None:
        self.writer = writer
        self.head_lost = head_lost
        resumes = head_lost is not None
        # What the lost supervisor left, when this one goes on from it.
        self.restarts: list[dict[str, Any]] = [_restart(r) for r in before.restarts] if resumes else []
        self.attempts = before.attempts if resumes else 0
        self.held = before.held if resumes else False
        self.last_step = before.last_step if resumes else 0

    @classmethod
    def open(cls, run_dir: str | None, metadata: dict[str, Any]) -> RunHome | None:
        """Take the run's directory over (None without one) and tee ``sys.stdout`` into it."""
        if not run_dir:
            return None
        config = _job_config()
        given = config.get("runtime_env")
        runtime_env: dict[str, Any] = given if isinstance(given, dict) else {}
        before = RunView(run_dir)
        writer = RunWriter.open(
            run_dir,
            submission=metadata.get("job_submission_id"),
            metadata={k: v for k, v in metadata.items() if k != "job_submission_id"},
            runtime_env=runtime_env,
            argv=sys.argv[1:],
        )
        lost = _head_lost(metadata)
        if lost is not None and before.records:
            _replay(before, lost)
        sys.stdout = Tee(sys.stdout, writer)
        return cls(writer, before, lost)

    def stopped(self, by: str) -> None:
        """The run was stopped: it is never resubmitted."""
        mark_stopped(self.writer.path, by, submission=self.writer.submission)

    def resume(
        self,
        restarts: list[dict[str, Any]],
        max_restarts: int,
        resume_step: int | None,
        say: Callable[[str], None],
        record: Callable[[str, dict[str, Any]], None],
    ) -> tuple[int, float] | None:
        """After a head loss, record it as a restart (appended to ``restarts``): its number and
        when it was lost; None for a submission that does not resume the run. A number above
        ``max_restarts`` means the budget is used up: the run does not go on."""
        if self.head_lost is None:
            return None
        number = len(restarts) + 1
        restart = self.head_lost_restart(number, max_restarts, resume_step)
        restarts.append(restart)
        if number > max_restarts:
            say(f"resubmitted after its Ray head was lost, but max_restarts={max_restarts} is used up: not run")
            return number, restart["lost_at"]
        start = checkpoint_name(resume_step) if resume_step is not None else "the start (no checkpoint yet)"
        say(
            f"resubmitted after its Ray head was lost ({restart['nodes'][0]['reason']}): recovery {number} of at "
            f"most {max_restarts}, from {start}"
        )
        record(RESTART_MARK, restart)
        return number, restart["lost_at"]

    def head_lost_restart(self, number: int, max_restarts: int, resume_step: int | None) -> dict[str, Any]:
        """The restart record of the head loss this submission recovers from."""
        lost = self.head_lost or {}
        return {
            "restart": number,
            "cause": "head-lost",
            "max_restarts": max_restarts,
            "lost_at": float(lost.get("lost_at") or 0.0),
            "nodes": [
                {
                    "node_id": str(lost.get("session") or ""),
                    "address": "",
                    "name": str(lost.get("head") or "the Ray head"),
                    "reason": str(lost.get("reason") or "lost"),
                }
            ],
            "exit_code": -9,
            "last_step": self.last_step,
            "resume_step": resume_step,
        }


def _replay(before: RunView, lost: dict[str, Any]) -> None:
    """Print the run's records so far into this submission's log (not into the run's
    directory, which has them), the lost attempt ended at the loss."""
    records = list(before.records)
    attempts = [r for r in records if r.get("event") == "attempt"]
    if attempts and not any(
        r.get("event") == "exit" and r.get("attempt") == attempts[-1].get("attempt") for r in records
    ):
        at = float(lost.get("lost_at") or before.last_at or 0.0)
        records.append(
            {"v": VERSION, "at": round(at, 3), "event": "exit", "attempt": attempts[-1].get("attempt"), "code": -9}
        )
    sys.stdout.write(f"{REPLAY_BEGIN}\n{as_log(records)}{REPLAY_END}\n")
    sys.stdout.flush()


def _restart(record: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in record.items() if k not in ("event", "v", "at")}


def _head_lost(metadata: dict[str, Any]) -> dict[str, Any] | None:
    raw = metadata.get(HEAD_LOST)
    if raw is None:
        return None
    try:
        value = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _job_config() -> dict[str, Any]:
    try:
        config = json.loads(os.environ.get("RAY_JOB_CONFIG_JSON_ENV_VAR") or "{}")
    except ValueError:
        return {}
    return config if isinstance(config, dict) else {}
