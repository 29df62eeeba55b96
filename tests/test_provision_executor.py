"""The provisioning executor on its own: scheduling, rollback, cancellation and teardown,
with in-memory drivers whose timings are controlled by the test."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterable

import pytest
from helpers.polling import FINE_BACKOFF

from rl_lustre.errors import (
    OwnershipError,
    ProvisioningError,
    ProvisioningInterrupted,
    QuotaExceededError,
    RollbackError,
    TeardownError,
)
from rl_lustre.gcp._wait import wait_for
from rl_lustre.plan import Plan, PlanGraphError, PlannedResource
from rl_lustre.provision.executor import Executor
from rl_lustre.provision.signals import cancel_on_signals
from rl_lustre.provision.step import Done, Step


def make_plan(edges: dict[str, Iterable[str]], use: Iterable[str] = (), cache: Iterable[str] = ()) -> Plan:
    used, cached = set(use), set(cache)
    return Plan(
        cluster_name="t",
        backend="gke",
        resources=[
            PlannedResource(
                key=k,
                kind="test.Thing",
                name=f"thing-{k}",
                depends_on=tuple(deps),
                action="use" if k in used else "cache" if k in cached else "create",
            )
            for k, deps in edges.items()
        ],
    )


class World:
    """What exists remotely, shared by the fake drivers, with an event log."""

    def __init__(self) -> None:
        self.exists: dict[str, str] = {}  # key -> "ours" | "theirs"
        self.events: list[tuple[float, str, str]] = []
        self.lock = threading.Lock()

    def log(self, what: str, key: str) -> None:
        with self.lock:
            self.events.append((time.monotonic(), what, key))

    def when(self, what: str, key: str) -> float:
        return next(t for t, w, k in self.events if w == what and k == key)


class FakeDriver:
    """Creates by sleeping ``seconds`` (polling through the real ``wait_for``, so that
    progress hooks and cancellation apply), optionally failing."""

    def __init__(
        self,
        world: World,
        key: str,
        seconds: float = 0.0,
        *,
        fail: BaseException | None = None,
        fail_delete: BaseException | None = None,
        deleted_with: str | None = None,
        interruptible: bool = True,
        delete_seconds: float = 0.0,
    ) -> None:
        self.world, self.key, self.seconds = world, key, seconds
        self.fail, self.fail_delete = fail, fail_delete
        self.deleted_with, self.interruptible = deleted_with, interruptible
        self.delete_seconds = delete_seconds

    def ensure(self, step: Step) -> Done:
        self.world.log("start", self.key)
        if step.node.action == "use":
            return Done("used")
        owner = self.world.exists.get(self.key)
        if owner == "theirs":
            raise OwnershipError(f"{self.key} exists without our labels")
        if owner == "ours":
            return Done("adopted")
        step.requesting()
        self.world.exists[self.key] = "ours"
        deadline = time.monotonic() + self.seconds
        wait_for(
            f"{self.key} to be ready",
            time.monotonic,
            done=lambda now: now >= deadline,
            timeout=30,
            backoff=FINE_BACKOFF,
        )
        if self.fail is not None:
            raise self.fail
        self.world.log("ready", self.key)
        return Done("created", value=f"value-of-{self.key}")

    def delete(self, step: Step) -> str:
        self.world.log("delete", self.key)
        time.sleep(self.delete_seconds)
        if self.fail_delete is not None:
            raise self.fail_delete
        owner = self.world.exists.get(self.key)
        if owner == "theirs":
            raise OwnershipError(f"{self.key} is not ours")
        if owner is None:
            return "absent"
        del self.world.exists[self.key]
        self.world.log("deleted", self.key)
        return "deleted"


DIAMOND = {"a": [], "slow": ["a"], "fast": ["a"], "after-fast": ["fast"], "end": ["slow", "after-fast"]}


def drivers_for(plan: Plan, world: World, **overrides: FakeDriver) -> dict[str, FakeDriver]:
    return {r.key: overrides.get(r.key) or FakeDriver(world, r.key, 0.01) for r in plan}


def test_a_node_starts_as_soon_as_its_own_dependencies_are_done() -> None:
    plan = make_plan(DIAMOND)
    world = World()
    drivers = drivers_for(plan, world, slow=FakeDriver(world, "slow", 0.4))
    report = Executor(plan, drivers).up()

    assert report.keys("created") == plan.keys()
    # Wave by wave, after-fast (wave 3) would wait for slow (wave 2) to finish.
    assert world.when("start", "after-fast") < world.when("ready", "slow")
    assert world.when("start", "slow") < world.when("ready", "fast") + 0.05
    # A node never starts before its dependencies are ready.
    for r in plan:
        for dep in r.depends_on:
            assert world.when("ready", dep) <= world.when("start", r.key)
    # Records carry the timing: end waited for its slowest dependency.
    assert report.get("end").started >= report.get("slow").finished
    assert report.get("slow").seconds >= 0.4


def test_failure_rolls_back_what_this_run_created_in_reverse_order_and_keeps_what_it_adopted() -> None:
    plan = make_plan(
        {"net": [], "adopted": ["net"], "made": ["net"], "slow": ["net"], "bad": ["made"], "never": ["bad"]}
    )
    world = World()
    world.exists["adopted"] = "ours"
    quota = QuotaExceededError("no GPUs in us-east1-b")
    drivers = drivers_for(
        plan, world, bad=FakeDriver(world, "bad", 0.05, fail=quota), slow=FakeDriver(world, "slow", 5.0)
    )

    with pytest.raises(ProvisioningError) as info:
        Executor(plan, drivers).up()
    err = info.value
    assert isinstance(err, RollbackError)
    assert not isinstance(err, KeyboardInterrupt)
    assert err.step == "bad"
    assert err.cause is quota
    assert "at bad" in str(err)
    assert "no GPUs" in str(err)
    # Everything this run asked for is gone, including the failed node (its create was
    # sent) and the one whose wait was cancelled; the adopted node stays.
    assert world.exists == {"adopted": "ours"}
    assert {c.split()[0] for c in err.cleaned} == {"net", "made", "slow", "bad"}
    assert [k.split()[0] for k in err.kept] == ["adopted"]
    assert err.left == []
    # Reverse order: dependents were deleted before what they depend on.
    for dependent in ("made", "slow", "bad"):
        assert world.when("deleted", dependent) <= world.when("delete", "net")
    assert world.when("deleted", "bad") <= world.when("delete", "made")
    # The slow node stopped waiting instead of running its 5 seconds.
    assert err.report is not None
    assert err.rollback is not None
    assert err.report.get("slow").outcome == "cancelled"
    assert err.report.get("never").outcome == "not-started"
    assert err.rollback.get("slow").outcome == "deleted"
    assert "never" not in [e[2] for e in world.events]


def test_keep_on_failure_deletes_nothing_and_says_what_was_kept() -> None:
    plan = make_plan({"a": [], "b": ["a"], "c": ["a"]})
    world = World()
    drivers = drivers_for(plan, world, c=FakeDriver(world, "c", 0.02, fail=QuotaExceededError("stock-out")))
    with pytest.raises(ProvisioningError) as info:
        Executor(plan, drivers).up(keep_on_failure=True)
    assert set(world.exists) == {"a", "b", "c"}
    assert {k.split()[0] for k in info.value.kept} == {"a", "b", "c"}
    assert info.value.cleaned == []
    assert "keep_on_failure" in str(info.value)


def test_cancellation_stops_waits_and_rolls_back_as_an_interrupt() -> None:
    plan = make_plan({"a": [], "long": ["a"], "later": ["long"]})
    world = World()
    drivers = drivers_for(plan, world, long=FakeDriver(world, "long", 30.0))
    cancel = threading.Event()
    threading.Timer(0.3, cancel.set).start()
    started = time.monotonic()
    with pytest.raises(ProvisioningInterrupted) as info:
        Executor(plan, drivers).up(cancel=cancel, reason=lambda: "SIGINT received")
    assert time.monotonic() - started < 5
    err = info.value
    assert isinstance(err, KeyboardInterrupt)
    assert isinstance(err, RollbackError)
    assert err.step is None
    assert "SIGINT received" in str(err)
    assert world.exists == {}
    assert {c.split()[0] for c in err.cleaned} == {"a", "long"}


def test_an_uninterruptible_wait_runs_to_its_end_so_the_rollback_finds_its_resource() -> None:
    plan = make_plan({"a": [], "op": ["a"]})
    world = World()
    drivers = drivers_for(plan, world, op=FakeDriver(world, "op", 0.4, interruptible=False))
    cancel = threading.Event()
    threading.Timer(0.15, cancel.set).start()
    with pytest.raises(ProvisioningInterrupted):
        Executor(plan, drivers).up(cancel=cancel)
    assert world.when("ready", "op") < world.when("delete", "op")
    assert world.exists == {}


def test_a_refused_node_is_reported_and_nothing_of_ours_is_left() -> None:
    plan = make_plan({"a": [], "b": ["a"]})
    world = World()
    world.exists["b"] = "theirs"
    with pytest.raises(ProvisioningError) as info:
        Executor(plan, drivers_for(plan, world)).up()
    assert info.value.step == "b"
    assert isinstance(info.value.cause, OwnershipError)
    assert world.exists == {"b": "theirs"}


def test_down_deletes_independent_nodes_concurrently_and_dependencies_last() -> None:
    plan = make_plan({"net": [], "x": ["net"], "y": ["net"], "z": ["net"]})
    world = World()
    drivers = {r.key: FakeDriver(world, r.key, delete_seconds=0.3) for r in plan}
    ex = Executor(plan, drivers)
    ex.up()
    started = time.monotonic()
    report = ex.down()
    wall = time.monotonic() - started
    assert world.exists == {}
    assert sorted(report.keys("deleted")) == ["net", "x", "y", "z"]
    # x, y and z together, then net: about two deletions' time, not four.
    assert wall < 0.3 * 3
    assert max(world.when("deleted", k) for k in "xyz") <= world.when("delete", "net")
    # Twice is fine: everything is already gone.
    assert ex.down().keys("absent") == ["net", "x", "y", "z"]


def test_down_never_touches_use_nodes_nor_resources_without_our_labels() -> None:
    plan = make_plan({"net": [], "theirs": ["net"], "ours": ["net"]}, use=["net"])
    world = World()
    world.exists.update({"net": "theirs", "theirs": "theirs", "ours": "ours"})
    report = Executor(plan, drivers_for(plan, world)).down()
    assert report.get("net").outcome == "used"
    assert report.get("theirs").outcome == "not-ours"
    assert report.get("ours").outcome == "deleted"
    assert world.exists == {"net": "theirs", "theirs": "theirs"}
    assert "net" not in [k for _, w, k in world.events if w == "delete"]


def test_a_node_deleted_with_another_is_not_deleted_on_its_own() -> None:
    plan = make_plan({"cluster": [], "pool": ["cluster"]})
    world = World()
    drivers = drivers_for(plan, world, pool=FakeDriver(world, "pool", deleted_with="cluster"))
    ex = Executor(plan, drivers)
    ex.up()
    world.exists.pop("pool")  # the cluster's deletion takes its pools along
    report = ex.down()
    assert ("delete", "pool") not in [(w, k) for _, w, k in world.events]
    assert report.get("pool").outcome == "deleted"
    assert report.get("pool").note == "with cluster"
    # Without its owner in the teardown, it is deleted itself.
    world.exists["pool"] = "ours"
    assert ex.down(["pool"]).get("pool").outcome == "deleted"


def test_a_failed_deletion_leaves_what_depends_on_it_and_raises_after_the_rest() -> None:
    plan = make_plan({"net": [], "sub": ["net"], "other": []})
    world = World()
    broken = FakeDriver(world, "sub", fail_delete=QuotaExceededError("rate limited"))
    ex = Executor(plan, drivers_for(plan, world, sub=broken))
    ex.up()
    with pytest.raises(TeardownError) as info:
        ex.down()
    err = info.value
    assert {left.split()[0] for left in err.left} == {"sub", "net"}
    assert err.report.get("net").note == "still used by sub"
    assert isinstance(err.errors["sub"], QuotaExceededError)
    assert set(world.exists) == {"net", "sub"}


def test_a_cache_node_outlives_a_rollback_and_down_unless_asked() -> None:
    # A completed cache (the preload image) is reused by the next up(), as a downloaded
    # wheel is: a rollback and down() keep it; down(cache=True) deletes it.
    plan = make_plan({"net": [], "image": ["net"], "pool": ["image"], "bad": ["pool"]}, cache=["image"])
    world = World()
    drivers = drivers_for(plan, world, bad=FakeDriver(world, "bad", fail=QuotaExceededError("no GPUs")))
    with pytest.raises(ProvisioningError) as err:
        Executor(plan, drivers).up()
    assert "image" in world.exists
    assert "thing-image" in " ".join(err.value.kept)
    assert not err.value.report.get("image").requested
    assert sorted(world.exists) == ["image"]
    drivers = drivers_for(plan, world)
    Executor(plan, drivers).up()
    report = Executor(plan, drivers).down()
    assert report.get("image").outcome == "kept"
    assert "shared by deployments" in report.get("image").note
    assert sorted(world.exists) == ["image"]
    again = Executor(plan, drivers).down(cache=True)
    assert again.get("image").outcome == "deleted"
    assert world.exists == {}


def test_every_node_needs_a_driver() -> None:
    plan = make_plan({"a": [], "b": ["a"]})
    with pytest.raises(PlanGraphError, match="no driver for plan node"):
        Executor(plan, {"a": FakeDriver(World(), "a")})


def test_signals_set_the_events_of_successive_stages_only_while_the_block_runs() -> None:
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    stop, abandon = threading.Event(), threading.Event()
    with cancel_on_signals((stop, "stop"), (None, "again to abandon"), (abandon, "abandon")) as received:
        os.kill(os.getpid(), signal.SIGINT)
        assert stop.wait(5)
        os.kill(os.getpid(), signal.SIGTERM)
        deadline = time.monotonic() + 5
        while len(received) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not abandon.is_set()
        os.kill(os.getpid(), signal.SIGINT)
        assert abandon.wait(5)
    assert received == [signal.SIGINT, signal.SIGTERM, signal.SIGINT]
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before


def test_an_abandoned_teardown_stops_waiting_and_reports_what_is_left() -> None:
    plan = make_plan({"net": [], "stuck": ["net"]})
    world = World()
    drivers = drivers_for(plan, world)
    ex = Executor(plan, drivers)
    ex.up()

    class Stuck(FakeDriver):
        def delete(self, step: Step) -> str:
            wait_for(
                "stuck to go",
                lambda: None,
                done=lambda _: False,
                timeout=60,
                backoff=FINE_BACKOFF,
            )
            return "deleted"

    ex.drivers["stuck"] = Stuck(world, "stuck")
    abandon = threading.Event()
    threading.Timer(0.2, abandon.set).start()
    started = time.monotonic()
    with pytest.raises(TeardownError) as info:
        ex.down(abandon=abandon)
    assert time.monotonic() - started < 5
    report = info.value.report
    assert report.get("stuck").note == "abandoned"
    assert report.get("net").outcome == "left"
    assert set(world.exists) == {"net", "stuck"}


def test_signal_handlers_are_not_installed_outside_the_main_thread() -> None:
    seen: list[object] = []

    def run() -> None:
        with cancel_on_signals((threading.Event(), "stop")) as received:
            seen.append(signal.getsignal(signal.SIGINT))
            seen.append(received)

    before = signal.getsignal(signal.SIGINT)
    t = threading.Thread(target=run)
    t.start()
    t.join()
    assert seen == [before, []]
