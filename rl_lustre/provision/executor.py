"""The executor: walks a plan's dependency graph with threads, up and down.

``up``: every node starts the moment its own dependencies are done (not wave by wave),
so the Lustre branch runs alongside the GKE cluster and its pools. The first failure,
or a cancellation (a signal during ``up()``), stops the launching of new nodes and
cancels the waits of the nodes in flight; once they have settled, everything this run
created, or asked to create, is deleted again in reverse dependency order.
Adopted resources are kept: a previous ``up()`` created them, and this run's failure
is no reason to take them away. Resources the plan only uses are never touched.

``down``: reverse dependency order, concurrently where independent: a node is deleted
once everything that depends on it is gone. A node whose driver says it goes with
another node (a node pool with its GKE cluster) is not deleted separately when that
node is deleted too.

Drivers (see :mod:`rl_lustre.provision.drivers`) do the remote work of one node each;
the executor owns ordering, concurrency, cancellation, records and rollback.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import contextvars
import logging
import signal
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol

import attrs

from ..errors import (
    OwnershipError,
    ProvisioningError,
    ProvisioningInterrupted,
    TeardownError,
    _one_line,
)
from ..plan import PlanGraphError
from .progress import Display, display_for

if TYPE_CHECKING:
    from ..plan import Plan, PlannedResource

__all__ = [
    "Cancelled",
    "Done",
    "Driver",
    "Executor",
    "NodeRecord",
    "ProvisioningError",
    "ProvisioningInterrupted",
    "Report",
    "Step",
    "TeardownError",
    "cancel_on_signals",
]

logger = logging.getLogger("rl_lustre.provision")

# Outcomes of up: created / adopted / used / skipped are successes.
Outcome = Literal[
    "pending", "running", "created", "adopted", "used", "skipped", "failed", "cancelled", "not-started",
    "deleted", "absent", "not-ours", "kept", "left",
]
UP_DONE = frozenset({"created", "adopted", "used", "skipped"})
# How often the main thread looks at the cancel event while nodes run.
_TICK = 0.05


class Cancelled(BaseException):
    """Raised inside a node's thread when ``up()`` stops; a BaseException, so that no
    ``except Exception`` in a driver or client library swallows it."""


@attrs.define(eq=False)
class NodeRecord:
    """What happened to one node of the plan during an ``up()`` or ``down()``.

    Attributes:
        key: the plan key.
        kind: the plan node's kind.
        name: the resource's name.
        action: the plan's ``"create"`` or ``"use"``.
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
                {"key": r.key, "kind": r.kind, "name": r.name, "action": r.action, "outcome": r.outcome,
                 "seconds": None if r.seconds is None else round(r.seconds, 3), "note": r.note,
                 "error": None if r.error is None else _one_line(r.error)}
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
        lines += ["  " + "  ".join(c.ljust(w) for c, w in zip(row[:4], widths, strict=True)) + "  " + row[4]
                  for row in rows]
        return "\n".join(line.rstrip() for line in lines)


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
    """

    node: PlannedResource
    plan: Plan
    record: NodeRecord
    records: Mapping[str, NodeRecord]
    cancel: threading.Event

    def dep(self, key: str) -> Any:
        """The value a finished dependency's driver returned."""
        if key not in self.node.depends_on:
            raise PlanGraphError(f"{self.node.key} reads {key!r}, which it does not depend on")
        return self.records[key].value

    def requesting(self) -> None:
        """Call right before sending the request that creates the resource: from then on
        a rollback deletes it, whatever happens next."""
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

    def delete(self, step: Step) -> Literal["deleted", "absent", "skipped"]:
        """Delete the resource if it exists and is ours, and wait until it is gone.

        Raises:
            OwnershipError: it exists without our labels (it is left alone).
        """


class Executor:
    """Runs a plan's nodes through their drivers: concurrently, in dependency order.

    Examples:
        >>> from rl_lustre import Cluster
        >>> from rl_lustre.provision.executor import Done, Executor
        >>> class Noop:
        ...     deleted_with, interruptible = None, True
        ...     def ensure(self, step): return Done("used" if step.node.action == "use" else "created")
        ...     def delete(self, step): return "deleted"
        >>> plan = Cluster.local("demo", volume_dir="/tmp/rl-demo").plan()
        >>> ex = Executor(plan, {key: Noop() for key in plan.keys()})
        >>> ex.up().keys("created"), ex.down().keys("deleted")
        (['ray-head'], ['ray-head'])

    Args:
        plan: the graph.
        drivers: one driver per plan key.
        max_workers: threads; by default one per node (the graph is small and the
            threads mostly wait on remote operations).
        display: where progress goes; by default a display that logs, plus a live
            per-resource view when console output is on.
        clock: a monotonic clock (tests).
    """

    def __init__(
        self,
        plan: Plan,
        drivers: Mapping[str, Driver],
        *,
        max_workers: int | None = None,
        display: Display | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        missing = [r.key for r in plan if r.key not in drivers]
        if missing:
            raise PlanGraphError(f"no driver for plan node(s) {', '.join(missing)}")
        self.plan = plan
        self.drivers = dict(drivers)
        self._workers = max_workers or max(len(plan), 1)
        self._display = display
        self._clock = clock

    def _records(self) -> dict[str, NodeRecord]:
        return {r.key: NodeRecord(r.key, r.kind, r.name, r.action) for r in self.plan}

    def up(
        self,
        *,
        keep_on_failure: bool = False,
        cancel: threading.Event | None = None,
        abandon: threading.Event | None = None,
        reason: Callable[[], str] | None = None,
    ) -> Report:
        """Create or adopt every node; on failure or cancellation, roll back.

        Examples:
            >>> report = Executor(plan, drivers).up()  # doctest: +SKIP
            >>> report.keys("created")  # doctest: +SKIP
            ['network', 'subnet', ...]

        Args:
            keep_on_failure: on failure, keep what this run created (the error lists it).
            cancel: set it (from a signal handler or another thread) to stop and roll back.
            abandon: set it to stop the rollback too (what is left is reported).
            reason: says why ``cancel`` was set (``"SIGINT"``), for the error.

        Raises:
            ProvisioningError: a node failed; carries what was cleaned up, kept and left.
            ProvisioningInterrupted: ``cancel`` was set; likewise.
        """
        cancel = cancel if cancel is not None else threading.Event()
        t0 = self._clock()
        recs = self._records()
        waiting = {r.key: set(r.depends_on) for r in self.plan}
        failure: tuple[str | None, BaseException] | None = None
        display = self._display or display_for("up", self.plan)
        with display, concurrent.futures.ThreadPoolExecutor(self._workers, "rl-lustre-up") as pool:
            futures: dict[concurrent.futures.Future[None], str] = {}

            def launch(key: str) -> None:
                rec = recs[key]
                rec.outcome, rec.started = "running", self._clock() - t0
                display.started(rec)
                run = contextvars.copy_context().run
                futures[pool.submit(run, self._ensure, rec, recs, cancel, t0, display)] = key

            for key in [r.key for r in self.plan]:
                if not waiting[key]:
                    launch(key)
            while futures:
                try:
                    done, _ = concurrent.futures.wait(futures, timeout=_TICK,
                                                      return_when=concurrent.futures.FIRST_COMPLETED)
                except BaseException as exc:  # KeyboardInterrupt when no signal handler of ours runs
                    failure = failure or (None, exc)
                    cancel.set()
                    continue
                if cancel.is_set() and failure is None:
                    failure = (None, KeyboardInterrupt(reason() if reason else "up() was cancelled"))
                for fut in done:
                    rec = recs[futures.pop(fut)]
                    if rec.outcome == "failed" and failure is None:
                        assert rec.error is not None
                        failure = (rec.key, rec.error)
                        cancel.set()
                    elif rec.outcome in UP_DONE and failure is None:
                        for dep in self.plan.dependents(rec.key):
                            waiting[dep].discard(rec.key)
                            if not waiting[dep]:
                                launch(dep)
        if cancel.is_set() and failure is None:
            # Cancelled as the last node finished: still the caller's wish to stop.
            failure = (None, KeyboardInterrupt(reason() if reason else "up() was cancelled"))
        for rec in recs.values():
            if rec.outcome == "pending":
                rec.outcome = "not-started"
        report = Report("up", recs, self._clock() - t0, t0)
        if failure is None:
            logger.info("up() of %r done in %.1fs: %d created, %d adopted, %d used", self.plan.cluster_name,
                        report.wall, len(report.keys("created")), len(report.keys("adopted")),
                        len(report.keys("used")))
            return report
        self._fail(report, *failure, keep_on_failure=keep_on_failure, abandon=abandon)
        raise AssertionError("unreachable: _fail raises")  # pragma: no cover

    def _ensure(self, rec: NodeRecord, recs: Mapping[str, NodeRecord], cancel: threading.Event, t0: float,
                display: Display) -> None:
        from ..gcp._wait import progress_hook

        step = Step(self.plan.get(rec.key), self.plan, rec, recs, cancel)

        interruptible = self.drivers[rec.key].interruptible

        def on_poll(progress: Any) -> None:
            display.polled(rec, progress.state)
            # Waits poll with capped backoff; stopping at the next poll bounds how long
            # a cancelled up() keeps waiting on a resource it is about to delete anyway.
            if interruptible and cancel.is_set():
                raise Cancelled

        try:
            step.check()
            with progress_hook(on_poll):
                done = self.drivers[rec.key].ensure(step)
            rec.outcome, rec.value, rec.note = done.outcome, done.value, done.note
            if done.outcome == "created":
                rec.requested = True
        except Cancelled:
            rec.outcome = "cancelled"
        except BaseException as exc:  # every failure is reported through the rollback error
            rec.outcome, rec.error = "failed", exc
        finally:
            rec.finished = self._clock() - t0
            display.finished(rec)

    def _fail(self, report: Report, step: str | None, cause: BaseException, *, keep_on_failure: bool,
              abandon: threading.Event | None) -> None:
        recs = report.records
        requested = [k for k, r in recs.items() if r.requested]
        adopted = [recs[k].label for k in report.keys("adopted")]
        if step is not None:
            logger.warning("up() of %r failed at %s: %s", self.plan.cluster_name, step, _one_line(cause))
        else:
            logger.warning("up() of %r was interrupted", self.plan.cluster_name)
        error_cls = ProvisioningError if step is not None else ProvisioningInterrupted
        if keep_on_failure:
            kept = [recs[k].label for k in requested]
            raise error_cls(cause, step=step, kept=[*kept, *adopted], report=report,
                            hint="keep_on_failure=True: nothing was deleted; cluster.down() removes it") from cause
        if requested:
            logger.warning("rolling back what this up() created: %s", ", ".join(requested))
        rollback = self._teardown("rollback", requested, cancel=abandon)
        cleaned = [rollback.records[k].label for k in rollback.keys("deleted", "absent")]
        left = [rollback.records[k].label for k in rollback.keys("left", "not-ours")]
        raise error_cls(cause, step=step, cleaned=cleaned, kept=adopted, left=left, report=report,
                        rollback=rollback) from cause

    def down(self, keys: Sequence[str] | None = None, *, abandon: threading.Event | None = None) -> Report:
        """Delete the plan's ``"create"`` nodes (or only ``keys``) that exist and are ours.

        Nodes the plan only uses are never touched; a same-named resource without our
        labels is left alone (outcome ``not-ours``) and logged. Safe to run twice.
        Setting ``abandon`` stops it: no new deletion starts, waits end, and what is
        still there is reported as left.

        Examples:
            >>> Executor(plan, drivers).down().keys("deleted")  # doctest: +SKIP
            ['raycluster', 'secret', ...]

        Raises:
            TeardownError: something could not be deleted; everything else was.
        """
        targets = [k for k in (keys if keys is not None else self.plan.keys()) if self.plan.get(k).action == "create"]
        report = self._teardown("down", targets, cancel=abandon)
        failed = {k: r.error for k, r in report.records.items() if r.outcome == "left" and r.error is not None}
        left = [report.records[k].label for k in report.keys("left")]
        if left:
            raise TeardownError(left, failed, report)
        return report

    def _teardown(self, operation: str, targets: Sequence[str], *, cancel: threading.Event | None) -> Report:
        t0 = self._clock()
        recs = self._records()
        wanted = set(targets)
        for rec in recs.values():
            if rec.key not in wanted:
                rec.outcome = "used" if rec.action == "use" else "kept"
        # A node deleted with another (a pool with its cluster) waits for nothing and
        # finishes when that one does.
        riders = {k: self.drivers[k].deleted_with for k in wanted if self.drivers[k].deleted_with in wanted}
        todo = wanted - set(riders)
        # Waiting for a rider means waiting for its host: the GPU pool's extra subnets go
        # only once the pool has gone with its cluster.
        blockers = {k: {riders.get(d, d) for d in self.plan.downstream(k) if d in todo or d in riders} - {k}
                    for k in todo}
        display = self._display or display_for(operation, self.plan)
        abandon = cancel if cancel is not None else threading.Event()
        with display, concurrent.futures.ThreadPoolExecutor(self._workers, f"rl-lustre-{operation}") as pool:
            futures: dict[concurrent.futures.Future[None], str] = {}

            def launch(key: str) -> None:
                rec = recs[key]
                if abandon.is_set():
                    rec.outcome, rec.note = "left", "abandoned"
                    display.finished(rec)
                    settle(rec)
                    return
                rec.outcome, rec.started = "running", self._clock() - t0
                display.started(rec)
                run = contextvars.copy_context().run
                futures[pool.submit(run, self._delete, rec, recs, abandon, t0, display)] = key

            def settle(rec: NodeRecord) -> None:
                for rider, owner in riders.items():
                    if owner == rec.key:
                        r = recs[rider]
                        r.started, r.finished = rec.started, rec.finished
                        r.outcome = rec.outcome if rec.outcome in ("deleted", "absent") else "left"
                        r.note = f"with {owner}"
                        display.finished(r)
                for key in list(blockers):
                    blockers[key].discard(rec.key)
                    if recs[key].outcome == "pending" and not blockers[key]:
                        # Something of ours still depends on it; a resource that is not
                        # ours may too, but then the delete itself says so.
                        blocked = [b for b in self.plan.downstream(key) & todo if recs[b].outcome == "left"]
                        if blocked:
                            r = recs[key]
                            r.outcome, r.note = "left", f"still used by {', '.join(sorted(blocked))}"
                            display.finished(r)
                            settle(r)
                        else:
                            launch(key)

            for key in self.plan.teardown_order():
                if key in todo and not blockers[key]:
                    launch(key)
            while futures:
                done, _ = concurrent.futures.wait(futures, timeout=_TICK,
                                                  return_when=concurrent.futures.FIRST_COMPLETED)
                for fut in done:
                    settle(recs[futures.pop(fut)])
        report = Report(operation, recs, self._clock() - t0, t0)
        logger.info("%s of %r done in %.1fs: %d deleted, %d already gone, %d left", operation,
                    self.plan.cluster_name, report.wall, len(report.keys("deleted")),
                    len(report.keys("absent")), len(report.keys("left", "not-ours")))
        return report

    def _delete(self, rec: NodeRecord, recs: Mapping[str, NodeRecord], cancel: threading.Event, t0: float,
                display: Display) -> None:
        from ..gcp._wait import progress_hook

        step = Step(self.plan.get(rec.key), self.plan, rec, recs, cancel)

        def on_poll(progress: Any) -> None:
            display.polled(rec, progress.state)
            if cancel.is_set():
                raise Cancelled

        try:
            with progress_hook(on_poll):
                rec.outcome = self.drivers[rec.key].delete(step)
        except Cancelled:
            rec.outcome, rec.note = "left", "abandoned"
        except OwnershipError as exc:
            # Not ours: never deleted, and no reason to fail the teardown of the rest.
            rec.outcome, rec.error = "not-ours", exc
            logger.warning("%s: left alone: %s", rec.key, exc)
        except BaseException as exc:  # reported in the TeardownError / RollbackError
            rec.outcome, rec.error = "left", exc
        finally:
            rec.finished = self._clock() - t0
            display.finished(rec)


@contextlib.contextmanager
def cancel_on_signals(*stages: tuple[threading.Event | None, str]) -> Iterator[list[int]]:
    """While the block runs in the main thread, the n-th SIGINT or SIGTERM sets the
    event of ``stages[n-1]`` and logs its message, instead of raising
    KeyboardInterrupt; the previous handlers are restored afterwards.

    Setting an event rather than raising at an arbitrary bytecode keeps the executor's
    bookkeeping whole, so a rollback knows exactly what exists. Stages let a clean-up
    survive one impatient Ctrl-C and still be abandoned by a later one. Signals beyond
    the last stage are logged. Outside the main thread, handlers cannot be installed
    and nothing changes.

    Examples:
        >>> import os, signal, threading
        >>> stop, abandon = threading.Event(), threading.Event()
        >>> with cancel_on_signals((stop, "stopping"), (None, "press again to abandon"),
        ...                        (abandon, "abandoning")) as received:
        ...     os.kill(os.getpid(), signal.SIGTERM)
        ...     stop.wait(5), abandon.is_set()
        (True, False)
        >>> received == [signal.SIGTERM]
        True

    Yields:
        The signals received, in order.
    """
    received: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return

    def handler(signum: int, frame: Any) -> None:
        received.append(signum)
        n = len(received)
        event, message = stages[n - 1] if n <= len(stages) else (None, "ignored: already abandoning")
        if event is not None:
            event.set()
        logger.warning("%s received: %s", signal.Signals(signum).name, message)

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield received
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
