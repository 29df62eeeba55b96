"""Progress of ``up()`` and ``down()``: log lines always, a live per-resource view when
console output is on (see :mod:`rl_lustre._output`; rich is imported only then).

Log lines go to ``rl_lustre.provision``: one INFO line per resource created, adopted,
skipped or deleted, a WARNING for a failure, DEBUG for the rest.
"""

from __future__ import annotations

import logging
import sys
import threading
from types import TracebackType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..plan import Plan
    from .records import NodeRecord

__all__ = ["Display", "LiveDisplay", "display_for"]

logger = logging.getLogger("rl_lustre.provision")

# Remote changes get an INFO line; adopting changes nothing (up()'s summary counts it).
_VERB = {"created": "created", "deleted": "deleted"}


def _seconds(rec: NodeRecord) -> str:
    return "" if rec.seconds is None else f" in {rec.seconds:.1f}s"


class Display:
    """Reports each node's progress to the log.

    Examples:
        >>> from rl_lustre.provision.records import NodeRecord
        >>> rec = NodeRecord("network", "compute.v1.Network", "demo-net", "create", outcome="created",
        ...                  started=0.0, finished=2.0)
        >>> with Display("up") as d:
        ...     d.finished(rec)

    Args:
        operation: ``"up"``, ``"down"`` or ``"rollback"``.
    """

    def __init__(self, operation: str) -> None:
        self.operation = operation

    def __enter__(self) -> Display:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        return None

    def started(self, rec: NodeRecord) -> None:
        """Work on ``rec`` began."""
        logger.debug("%s: %s %s %s", self.operation, rec.key, rec.kind, rec.name)

    def polled(self, rec: NodeRecord, state: str) -> None:
        """A wait on ``rec`` observed ``state`` (the wait itself logs changes)."""

    def finished(self, rec: NodeRecord) -> None:
        """Work on ``rec`` ended; ``rec.outcome`` says how."""
        what = f"{rec.kind} {rec.name} ({rec.key})"
        note = f" ({rec.note})" if rec.note else ""
        if rec.outcome in _VERB:
            logger.info("%s %s%s%s", _VERB[rec.outcome], what, _seconds(rec), note)
        elif rec.outcome == "skipped":
            logger.info("skipped %s: %s", what, rec.note)
        elif rec.outcome in ("failed", "left"):
            logger.warning(
                "%s: %s %s%s: %s",
                self.operation,
                "failed" if rec.outcome == "failed" else "could not delete",
                what,
                _seconds(rec),
                rec.error if rec.error is not None else rec.note,
            )
        else:
            logger.debug("%s: %s %s%s%s", self.operation, rec.outcome, what, _seconds(rec), note)


class LiveDisplay(Display):
    """The log lines plus a live view: one row per resource with its state and elapsed time."""

    def __init__(self, operation: str, plan: Plan) -> None:
        super().__init__(operation)
        self._plan = plan
        self._tasks: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._progress: Any = None

    def __enter__(self) -> LiveDisplay:
        from rich.console import Console
        from rich.progress import Progress, ProgressColumn
        from rich.text import Text

        class Row(ProgressColumn):
            # One column: rich drops the other columns of a row too wide for the console.
            def render(self, task: Any) -> Text:
                seconds = int((task.finished_time if task.finished else task.elapsed) or 0)
                clock = f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"
                return Text(f"{clock} {task.description}", no_wrap=True, overflow="ellipsis")

        self._progress = Progress(
            Row(),
            # Built per use: sys.stdout may be swapped (pytest capture, notebooks).
            console=Console(file=sys.stdout, highlight=False),
            transient=False,
        )
        self._progress.__enter__()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._progress.__exit__(exc_type, exc, tb)

    def _row(self, rec: NodeRecord, state: str) -> str:
        return f"{self.operation} {rec.key:<16} {state:<10} {rec.kind} {rec.name}"

    def started(self, rec: NodeRecord) -> None:
        super().started(rec)
        with self._lock:
            self._tasks[rec.key] = self._progress.add_task(self._row(rec, "working"), total=None)

    def polled(self, rec: NodeRecord, state: str) -> None:
        task = self._tasks.get(rec.key)
        if task is not None:
            self._progress.update(task, description=self._row(rec, state))

    def finished(self, rec: NodeRecord) -> None:
        super().finished(rec)
        with self._lock:
            task = self._tasks.get(rec.key)
            if task is None:
                # Finished without work of its own (deleted with another node).
                task = self._tasks[rec.key] = self._progress.add_task("", total=None)
        self._progress.update(
            task, description=self._row(rec, rec.outcome + (f" ({rec.note})" if rec.note else "")), total=1, completed=1
        )
        self._progress.stop_task(task)


def display_for(operation: str, plan: Plan) -> Display:
    """A :class:`LiveDisplay` when console output is on, else a :class:`Display` (log only).

    Examples:
        >>> from rl_lustre import Cluster
        >>> from rl_lustre._output import enable_output
        >>> with enable_output(False):
        ...     type(display_for("up", Cluster.local("demo", volume_dir="/tmp/v").plan())).__name__
        'Display'
    """
    from .._output import output_enabled

    return LiveDisplay(operation, plan) if output_enabled() else Display(operation)
