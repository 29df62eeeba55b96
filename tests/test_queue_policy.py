"""The queue's policy: best-effort FIFO over whole nodes, a backfill window, priority,
recovering jobs first, and Ray's live view (rl_lustre.oncluster.queue.policy.decide)."""

from __future__ import annotations

from typing import Any

import pytest

from rl_lustre.oncluster.queue.claims import Claim
from rl_lustre.oncluster.queue.policy import Capacity, decide

# The on-cluster package's tests: nox -s tests-oncluster runs them on the image's Python and Ray too.
pytestmark = pytest.mark.oncluster

FULL = Capacity(up=8, free=8)


def claim(job: str, nodes: int, *, at: float = 0.0, state: str = "queued", **kw: Any) -> Claim:
    slots = kw.pop("slots", list(range(nodes)) if state != "queued" else [])
    return Claim(
        job=job, nodes=nodes, gpus_per_node=8, cluster_nodes=8, submitted_at=at, state=state, slots=slots, **kw
    )


def admitted(me: Claim, claims: list[Claim], capacity: Capacity | None = FULL, now: float = 100.0) -> bool:
    return decide(me, claims, capacity, now).admit


def test_an_empty_cluster_admits_the_first_job_on_the_lowest_slots() -> None:
    me = claim("a", 4)
    d = decide(me, [me], FULL, 1.0)
    assert (d.admit, d.slots, d.place, d.queued, d.waiting_for) == (True, (0, 1, 2, 3), 1, 1, None)


def test_jobs_start_in_order_of_submission_when_none_fits_beside_another() -> None:
    holder = claim("h", 8, state="holding")
    first, second = claim("first", 8, at=1.0), claim("second", 8, at=2.0)
    everyone = [holder, first, second]
    for me in (first, second):
        assert not admitted(me, everyone)
    d = decide(second, everyone, FULL, 100.0)
    assert (d.place, d.queued) == (2, 2)
    assert [a[0] for a in d.ahead] == ["h", "first"]
    assert d.waiting_for == "8 nodes: 0 of the cluster's 8 are free (8 held by 1 job)"
    # The holder ends: the first queued job goes, not the second.
    assert admitted(first, [first, second])
    assert not admitted(second, [first, second])


def test_a_later_small_job_passes_a_big_one_that_does_not_fit_and_marks_it_passed() -> None:
    holder = claim("h", 4, state="holding")
    big, small = claim("big", 8, at=1.0), claim("small", 2, at=2.0)
    d = decide(small, [holder, big, small], FULL, 50.0)
    assert d.admit
    assert d.passed == ("big",)
    assert d.slots == (4, 5)
    assert not admitted(big, [holder, big, small])


def test_nothing_passes_a_job_whose_backfill_window_is_spent_or_zero() -> None:
    holder = claim("h", 4, state="holding")
    small = claim("small", 2, at=2.0)
    spent = claim("big", 8, at=1.0, bypassed_since=10.0, backfill_window=30.0)
    d = decide(small, [holder, spent, small], FULL, now=41.0)
    assert not d.admit
    assert d.blocked_by == "big"
    assert d.waiting_for == "its turn: big (8 nodes) has waited 31s, past its backfill window (30s)"
    # Within the window it is passed.
    assert admitted(small, [holder, spent, small], now=39.0)
    strict = claim("big", 8, at=1.0, backfill_window=0)
    d = decide(small, [holder, strict, small], FULL, 1.0)
    assert not d.admit
    assert "backfill_window=0" in (d.waiting_for or "")


def test_priority_goes_before_submission_time() -> None:
    early, urgent = claim("early", 8, at=1.0), claim("urgent", 8, at=5.0, priority=10)
    assert admitted(urgent, [early, urgent])
    assert not admitted(early, [early, urgent])
    assert decide(early, [early, urgent], FULL, 9.0).place == 2


def test_an_earlier_job_that_fits_keeps_its_room_before_its_own_supervisor_looks() -> None:
    holder = claim("h", 4, state="holding")
    first, second = claim("first", 4, at=1.0), claim("second", 4, at=2.0)
    d = decide(second, [holder, first, second], FULL, 9.0)
    assert not d.admit
    assert d.waiting_for == "4 nodes: 4 of the cluster's 8 are free and jobs ahead of it take 4"


def test_a_recovering_job_is_held_ahead_of_queued_ones_and_restarts_when_its_nodes_are_usable() -> None:
    recovering = claim("r", 4, state="recovering", slots=[0, 1, 2, 3])
    other = claim("o", 4, state="holding", slots=[4, 5, 6, 7])
    queued = claim("q", 1, at=0.0)
    # One of its nodes is lost: 7 up, the other job's 4 reserved.
    lost = Capacity(up=7, free=3)
    assert not admitted(recovering, [recovering, other, queued], lost)
    d = decide(queued, [recovering, other, queued], lost, 9.0)
    assert not d.admit
    assert ("r", "recovering", 4) in d.ahead
    # The replacement joined: it restarts on the slots it had, and the queued job still waits.
    back = Capacity(up=8, free=4)
    d = decide(recovering, [recovering, other, queued], back, 9.0)
    assert d.admit
    assert d.slots == (0, 1, 2, 3)
    assert not admitted(queued, [recovering, other, queued], back)


@pytest.mark.parametrize(
    ("capacity", "text"),
    [
        (Capacity(up=3, free=3), "4 nodes: only 3 GPU nodes are up in Ray (8 expected)"),
        (Capacity(up=8, free=3), "4 nodes: 5 GPU nodes are in use outside the queue"),
    ],
)
def test_rays_view_keeps_jobs_queued_when_nodes_are_lost_or_used_outside_the_queue(
    capacity: Capacity, text: str
) -> None:
    me = claim("a", 4)
    assert admitted(me, [me], None)  # the ledger alone would let it start
    d = decide(me, [me], capacity, 1.0)
    assert not d.admit
    assert (d.waiting_for or "").startswith(text)
    assert admitted(claim("b", 3), [claim("b", 3)], capacity)


def test_a_started_job_that_has_not_reserved_yet_is_not_counted_twice() -> None:
    holder = claim("h", 4, state="holding")
    me = claim("a", 4)
    # Before its groups exist (free 8) and after (free 4): the same 4 usable nodes.
    assert decide(me, [holder, me], Capacity(8, 8), 1.0).usable == 4
    assert decide(me, [holder, me], Capacity(8, 4), 1.0).usable == 4


def test_a_claim_of_a_newer_format_counts_as_holding_its_nodes() -> None:
    newer = Claim.from_json('{"v": 2, "job": "n", "nodes": 6, "gpus_per_node": 8, "cluster_nodes": 8, "x": 1}')
    assert (newer.state, newer.nodes) == ("holding", 6)
    me = claim("a", 4)
    assert not admitted(me, [newer, me])
    assert admitted(claim("b", 2), [newer, claim("b", 2)])
