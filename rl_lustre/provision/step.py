"""What a provisioning driver is: the :class:`Driver` protocol, the :class:`Step` it works
on, the :class:`Done` it returns, and :class:`Cancelled`, raised in its thread when the
run stops. The executor (:mod:`rl_lustre.provision.executor`) calls drivers; the
drivers (:mod:`rl_lustre.provision.drivers`) implement the protocol."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, Protocol

import attrs

from ..plan import PlanGraphError
from .records import NodeRecord

if TYPE_CHECKING:
    from ..plan import Plan, PlannedResource

__all__ = ["Cancelled", "Done", "Driver", "Step"]


class Cancelled(BaseException):
    """Raised inside a node's thread when ``up()`` stops; a BaseException, so that no
    ``except Exception`` in a driver or client library swallows it."""


@attrs.frozen
class Done:
    """What a driver's ``ensure`` did.

    Attributes:
        outcome: ``"created"``, ``"adopted"``, ``"used"`` or ``"skipped"``.
        value: the resource as read (dependent nodes read it, e.g. the PSA range's block).
        note: a short remark for the report (why it was skipped, ...).
    """

    outcome: Literal["created", "adopted", "used", "skipped"]
    value: Any = None
    note: str = ""


@attrs.define(eq=False)
class Step:
    """What a driver gets to work on one node.

    Attributes:
        node: the plan node.
        plan: the whole plan.
        record: this node's record.
        records: every node's record (a dependency's ``value`` is its output).
        cancel: set when the run is stopping.
        operation: ``"up"``, ``"down"`` or ``"rollback"`` (a failed ``up()`` undoing its work).
    """

    node: PlannedResource
    plan: Plan
    record: NodeRecord
    records: Mapping[str, NodeRecord]
    cancel: threading.Event
    operation: str = "up"

    def dep(self, key: str) -> Any:
        """The value a finished dependency's driver returned."""
        if key not in self.node.depends_on:
            raise PlanGraphError(f"{self.node.key} reads {key!r}, which it does not depend on")
        return self.records[key].value

    def requesting(self) -> None:
        """Call right before sending the request that creates the resource: from then on
        a rollback deletes it, whatever happens next. (Not a ``"cache"`` node's: a rollback
        keeps those, and their drivers clean up their own half-made work.)"""
        if self.node.action != "cache":
            self.record.requested = True

    def check(self) -> None:
        """Raise :class:`Cancelled` when the run is stopping."""
        if self.cancel.is_set():
            raise Cancelled


class Driver(Protocol):
    """The remote side of one plan node.

    Attributes:
        deleted_with: the plan key whose deletion also deletes this node's resource (a
            node pool goes with its GKE cluster), or None.
        interruptible: whether a cancelled run may stop waiting for this node's
            resource. True only where the resource exists, and can be deleted, from
            the moment the create request returns (a Lustre instance, a GKE cluster);
            Compute resources appear only when their operation ends, so their short
            waits run to the end and the rollback finds what it must delete.
    """

    deleted_with: str | None
    interruptible: bool

    def ensure(self, step: Step) -> Done:
        """Create the resource, adopt it (ours, already there) or check it (``"use"``),
        and wait until it is ready. Call ``step.requesting()`` before a create request.

        Raises:
            OwnershipError: a same-named resource exists without our labels.
        """

    def delete(self, step: Step) -> Literal["deleted", "absent", "skipped", "kept"]:
        """Delete the resource if it exists and is ours, and wait until it is gone;
        ``"kept"`` (with ``step.record.note`` saying why) when it must stay, e.g. a cache
        still in use.

        Raises:
            OwnershipError: it exists without our labels (it is left alone).
        """
