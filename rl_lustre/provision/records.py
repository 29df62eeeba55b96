"""What happened to each node of a plan during one ``up()`` or ``down()``:
:class:`NodeRecord` per node, :class:`Report` for the run."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import attrs

from ..errors import _one_line

__all__ = ["UP_DONE", "NodeRecord", "Outcome", "Report"]

# Outcomes of up: created / adopted / used / skipped are successes.
Outcome = Literal[
    "pending",
    "running",
    "created",
    "adopted",
    "used",
    "skipped",
    "failed",
    "cancelled",
    "not-started",
    "deleted",
    "absent",
    "not-ours",
    "kept",
    "left",
]
UP_DONE = frozenset({"created", "adopted", "used", "skipped"})


@attrs.define(eq=False)
class NodeRecord:
    """What happened to one node of the plan during an ``up()`` or ``down()``.

    Attributes:
        key: the plan key.
        kind: the plan node's kind.
        name: the resource's name.
        action: the plan's ``"create"``, ``"use"`` or ``"cache"``.
        outcome: ``created``, ``adopted``, ``used`` or ``skipped`` (up succeeded);
            ``failed``, ``cancelled`` or ``not-started`` (up stopped); ``deleted``,
            ``absent``, ``not-ours``, ``kept`` or ``left`` (teardown).
        started: seconds from the start of the run when work on the node began.
        finished: seconds from the start of the run when it ended.
        requested: this run sent (or may have sent) a request creating the resource,
            so a rollback must delete it.
        error: the error the node failed with.
        note: a short remark (why it was skipped, what it was deleted with).
        value: what the driver returned (the resource as read), for dependent nodes.
    """

    key: str
    kind: str
    name: str
    action: str
    outcome: Outcome = "pending"
    started: float | None = None
    finished: float | None = None
    requested: bool = False
    error: BaseException | None = None
    note: str = ""
    value: Any = attrs.field(default=None, repr=False)

    @property
    def label(self) -> str:
        """``key (kind name)``, as messages name the node."""
        return f"{self.key} ({self.kind} {self.name})"

    @property
    def seconds(self) -> float | None:
        """How long the node's work took."""
        if self.started is None or self.finished is None:
            return None
        return self.finished - self.started


@attrs.frozen
class Report:
    """The records of one ``up()`` or ``down()``.

    Examples:
        >>> rec = NodeRecord("network", "compute.v1.Network", "demo-net", "create", outcome="created",
        ...                  started=0.0, finished=1.5)
        >>> report = Report("up", {"network": rec}, wall=1.6)
        >>> report.keys("created"), report.get("network").seconds
        (['network'], 1.5)

    Attributes:
        operation: ``"up"``, ``"down"`` or ``"rollback"``.
        records: one per plan node, in plan order.
        wall: seconds the whole run took.
        start: the executor's clock (``time.monotonic()``) when the run began; the
            records' times count from it.
    """

    operation: str
    records: Mapping[str, NodeRecord]
    wall: float
    start: float = 0.0

    def keys(self, *outcomes: str) -> list[str]:
        """Keys of the nodes that ended with one of ``outcomes`` (all keys without any)."""
        return [k for k, r in self.records.items() if not outcomes or r.outcome in outcomes]

    def get(self, key: str) -> NodeRecord:
        """The record of node ``key``."""
        return self.records[key]

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON data: the operation, its wall time and one entry per node.

        Examples:
            >>> rec = NodeRecord("network", "compute.v1.Network", "demo-net", "create", outcome="created",
            ...                  started=0.0, finished=1.5)
            >>> Report("up", {"network": rec}, wall=1.6).to_dict()["resources"][0]["outcome"]
            'created'
        """
        return {
            "operation": self.operation,
            "wall_seconds": round(self.wall, 3),
            "resources": [
                {
                    "key": r.key,
                    "kind": r.kind,
                    "name": r.name,
                    "action": r.action,
                    "outcome": r.outcome,
                    "seconds": None if r.seconds is None else round(r.seconds, 3),
                    "note": r.note,
                    "error": None if r.error is None else _one_line(r.error),
                }
                for r in self.records.values()
            ],
        }

    def __str__(self) -> str:
        rows = [("key", "outcome", "start", "seconds", "note")]
        for r in self.records.values():
            start = "-" if r.started is None else f"{r.started:.2f}"
            secs = "-" if r.seconds is None else f"{r.seconds:.2f}"
            rows.append((r.key, r.outcome, start, secs, r.note or (_one_line(r.error) if r.error else "")))
        widths = [max(len(row[c]) for row in rows) for c in range(4)]
        lines = [f"{self.operation} took {self.wall:.2f}s"]
        lines += [
            "  " + "  ".join(c.ljust(w) for c, w in zip(row[:4], widths, strict=True)) + "  " + row[4] for row in rows
        ]
        return "\n".join(line.rstrip() for line in lines)
