"""The executor: walks a plan's dependency graph with threads, up and down.

``up``: every node starts the moment its own dependencies are done (not wave by wave),
so the Lustre branch runs alongside the GKE cluster and its pools. The first failure,
or a cancellation (a signal during ``up()``), stops the launching of new nodes and
cancels the waits of the nodes in flight; once they have settled, everything this run
created, or asked to create, is deleted again in reverse dependency order.
Adopted resources are kept: a previous ``up()`` created them, and this run's failure
is no reason to take them away; so are the plan's ``"cache"`` nodes even when this run
made them (a completed preload image is reused by the next ``up()``, as a downloaded
wheel is; their drivers clean up their own half-made work). Resources the plan only uses
are never touched.

``down``: reverse dependency order, concurrently where independent: a node is deleted
once everything that depends on it is gone. A node whose driver says it goes with
another node (a node pool with its GKE cluster) is not deleted separately when that
node is deleted too.

Drivers (see :mod:`rl_lustre.provision.drivers`) do the remote work of one node each,
through the protocol in :mod:`rl_lustre.provision.step`; the executor owns ordering,
concurrency, cancellation, records (:mod:`rl_lustre.provision.records`) and rollback.
"""

from __future__ import annotations

import concurrent.futures
import contextvars
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import (
    CapacityExhaustedError,
    NoCapacityError,
    OwnershipError,
    ProvisioningError,
    ProvisioningInterrupted,
    TeardownError,
    _one_line,
)
from ..plan import PlanGraphError
from ..plankeys import LUSTRE_KEY
from .progress import Display, display_for
from .records import UP_DONE, NodeRecord, Report
from .step import Cancelled, Driver, Step

if TYPE_CHECKING:
    from ..plan import Plan

__all__ = ["Executor", "storage_keys"]

logger = logging.getLogger("rl_lustre.provision")

# How often the main thread looks at the cancel event while nodes run.
_TICK = 0.05


def storage_keys(plan: Plan) -> frozenset[str]:
    """The storage branch a deployment keeps when no GPUs came: the Lustre instance and
    everything it waits for (network, PSA range and peering, firewall rule).

    Examples:
        >>> from rl_lustre import Cluster
        >>> sorted(storage_keys(Cluster(name="demo", project="my-project", region="us-east1",
        ...                             zone="us-east1-b").plan()))
        ['firewall-lustre', 'lustre', 'network', 'psa-peering', 'psa-range']
    """
    if LUSTRE_KEY not in plan:
        return frozenset()
    return frozenset({LUSTRE_KEY, *plan.upstream(LUSTRE_KEY)})


class _Either(threading.Event):
    """Set when either event is (what a step of the non-storage branches checks)."""

    def __init__(self, a: threading.Event, b: threading.Event) -> None:
        super().__init__()
        self._a, self._b = a, b

    def is_set(self) -> bool:
        return self._a.is_set() or self._b.is_set()


class Executor:
    """Runs a plan's nodes through their drivers: concurrently, in dependency order.

    Examples:
        >>> from rl_lustre import Cluster
        >>> from rl_lustre.provision.executor import Executor
        >>> from rl_lustre.provision.step import Done
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
        on_no_capacity: str = "storage",
    ) -> Report:
        """Create or adopt every node; on failure or cancellation, roll back.

        When no capacity came for the GPU pool (its driver raised
        :class:`~rl_lustre.errors.CapacityExhaustedError`), ``on_no_capacity="storage"``
        lets the storage branch (the Lustre instance and what it waits for) finish and keeps
        it, rolling back the rest; ``"nothing"`` rolls back everything. Either way
        :class:`~rl_lustre.errors.NoCapacityError` says what was kept.

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
        # Stops everything but the storage branch once no capacity came (on_no_capacity="storage").
        no_capacity = threading.Event()
        storage = storage_keys(self.plan) if on_no_capacity == "storage" else frozenset()
        rest_cancel = _Either(cancel, no_capacity)
        display = self._display or display_for("up", self.plan)
        with display, concurrent.futures.ThreadPoolExecutor(self._workers, "rl-lustre-up") as pool:
            futures: dict[concurrent.futures.Future[None], str] = {}

            def launch(key: str) -> None:
                rec = recs[key]
                rec.outcome, rec.started = "running", self._clock() - t0
                display.started(rec)
                run = contextvars.copy_context().run
                stop = cancel if key in storage else rest_cancel
                futures[pool.submit(run, self._ensure, rec, recs, stop, t0, display)] = key

            for key in [r.key for r in self.plan]:
                if not waiting[key]:
                    launch(key)
            while futures:
                try:
                    done, _ = concurrent.futures.wait(
                        futures, timeout=_TICK, return_when=concurrent.futures.FIRST_COMPLETED
                    )
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
                        if isinstance(rec.error, CapacityExhaustedError) and storage:
                            no_capacity.set()
                        else:
                            cancel.set()
                    elif rec.outcome == "failed" and no_capacity.is_set() and rec.key in storage:
                        cancel.set()  # the storage branch failed too: nothing is kept half-made
                    elif rec.outcome in UP_DONE and (failure is None or no_capacity.is_set()):
                        for dep in self.plan.dependents(rec.key):
                            waiting[dep].discard(rec.key)
                            if not waiting[dep] and (failure is None or (dep in storage and not cancel.is_set())):
                                launch(dep)
        if cancel.is_set() and failure is None:
            # Cancelled as the last node finished: still the caller's wish to stop.
            failure = (None, KeyboardInterrupt(reason() if reason else "up() was cancelled"))
        for rec in recs.values():
            if rec.outcome == "pending":
                rec.outcome = "not-started"
        report = Report("up", recs, self._clock() - t0, t0)
        if failure is None:
            logger.info(
                "up() of %r done in %.1fs: %d created, %d adopted, %d used",
                self.plan.cluster_name,
                report.wall,
                len(report.keys("created")),
                len(report.keys("adopted")),
                len(report.keys("used")),
            )
            return report
        capacity = isinstance(failure[1], CapacityExhaustedError)
        self._fail(
            report,
            *failure,
            keep_on_failure=keep_on_failure,
            abandon=abandon,
            keep=storage if capacity and not cancel.is_set() else frozenset(),
            on_no_capacity=on_no_capacity if capacity else None,
        )
        raise AssertionError("unreachable: _fail raises")  # pragma: no cover

    def _ensure(
        self, rec: NodeRecord, recs: Mapping[str, NodeRecord], cancel: threading.Event, t0: float, display: Display
    ) -> None:
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
            if done.outcome == "created" and step.node.action != "cache":
                rec.requested = True
        except Cancelled:
            rec.outcome = "cancelled"
        except BaseException as exc:  # every failure is reported through the rollback error
            rec.outcome, rec.error = "failed", exc
        finally:
            rec.finished = self._clock() - t0
            display.finished(rec)

    def _fail(
        self,
        report: Report,
        step: str | None,
        cause: BaseException,
        *,
        keep_on_failure: bool,
        abandon: threading.Event | None,
        keep: frozenset[str] = frozenset(),
        on_no_capacity: str | None = None,
    ) -> None:
        recs = report.records
        kept_storage = [recs[k].label for k, r in recs.items() if r.requested and k in keep]
        requested = [k for k, r in recs.items() if r.requested and k not in keep]
        adopted = [recs[k].label for k in report.keys("adopted")]
        # A cache this run completed stays, as after down(): the next up() reuses it.
        adopted += [
            f"{recs[k].label}: {recs[k].note or 'made by this run'}; kept for the next up() (a cache "
            "deployments share; `rl-lustre gc` collects unused ones)"
            for k in report.keys("created")
            if recs[k].action == "cache"
        ]
        if step is not None:
            logger.warning("up() of %r failed at %s: %s", self.plan.cluster_name, step, _one_line(cause))
        else:
            logger.warning("up() of %r was interrupted", self.plan.cluster_name)
        error_cls = ProvisioningError if step is not None else ProvisioningInterrupted
        if on_no_capacity is not None and not keep_on_failure:
            assert isinstance(cause, CapacityExhaustedError)
            if requested:
                logger.warning(
                    "no GPU capacity: rolling back %s; keeping %s",
                    ", ".join(requested),
                    ", ".join(kept_storage) or "nothing",
                )
            rollback = self._teardown("rollback", requested, cancel=abandon)
            raise NoCapacityError(
                cause,
                on_no_capacity=on_no_capacity,
                step=step,
                cleaned=[rollback.records[k].label for k in rollback.keys("deleted", "absent")],
                kept=[*kept_storage, *adopted],
                left=[rollback.records[k].label for k in rollback.keys("left", "not-ours")],
                report=report,
                rollback=rollback,
            ) from cause
        if keep_on_failure:
            kept = [recs[k].label for k, r in recs.items() if r.requested]
            raise error_cls(
                cause,
                step=step,
                kept=[*kept, *adopted],
                report=report,
                hint="keep_on_failure=True: nothing was deleted; cluster.down() removes it",
            ) from cause
        if requested:
            logger.warning("rolling back what this up() created: %s", ", ".join(requested))
        rollback = self._teardown("rollback", requested, cancel=abandon)
        cleaned = [rollback.records[k].label for k in rollback.keys("deleted", "absent")]
        left = [rollback.records[k].label for k in rollback.keys("left", "not-ours")]
        raise error_cls(
            cause, step=step, cleaned=cleaned, kept=adopted, left=left, report=report, rollback=rollback
        ) from cause

    def down(
        self, keys: Sequence[str] | None = None, *, abandon: threading.Event | None = None, cache: bool = False
    ) -> Report:
        """Delete the plan's ``"create"`` nodes (or only ``keys``) that exist and are ours;
        its ``"cache"`` nodes too with ``cache=True`` (otherwise they are kept).

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
        wanted = ("create", "cache") if cache else ("create",)
        targets = [k for k in (keys if keys is not None else self.plan.keys()) if self.plan.get(k).action in wanted]
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
                if rec.action == "cache":
                    rec.note = "kept: shared by deployments (a cache); delete it when asked"
        # A node deleted with another (a pool with its cluster) waits for nothing and
        # finishes when that one does.
        riders = {k: self.drivers[k].deleted_with for k in wanted if self.drivers[k].deleted_with in wanted}
        todo = wanted - set(riders)
        # Waiting for a rider means waiting for its host: the GPU pool's extra subnets go
        # only once the pool has gone with its cluster.
        blockers = {
            k: {riders.get(d, d) for d in self.plan.downstream(k) if d in todo or d in riders} - {k} for k in todo
        }
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
                futures[pool.submit(run, self._delete, rec, recs, abandon, t0, display, operation)] = key

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
                done, _ = concurrent.futures.wait(
                    futures, timeout=_TICK, return_when=concurrent.futures.FIRST_COMPLETED
                )
                for fut in done:
                    settle(recs[futures.pop(fut)])
        report = Report(operation, recs, self._clock() - t0, t0)
        logger.info(
            "%s of %r done in %.1fs: %d deleted, %d already gone, %d left",
            operation,
            self.plan.cluster_name,
            report.wall,
            len(report.keys("deleted")),
            len(report.keys("absent")),
            len(report.keys("left", "not-ours")),
        )
        return report

    def _delete(
        self,
        rec: NodeRecord,
        recs: Mapping[str, NodeRecord],
        cancel: threading.Event,
        t0: float,
        display: Display,
        operation: str = "down",
    ) -> None:
        from ..gcp._wait import progress_hook

        step = Step(self.plan.get(rec.key), self.plan, rec, recs, cancel, operation)

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
