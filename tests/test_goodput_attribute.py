"""The goodput ledger's rules on hand-made evidence, with the seconds worked out by hand,
and its invariants (every billed second exactly once) on random evidence."""

from __future__ import annotations

import itertools
import math

import attrs
import pytest
from helpers.goodput import node, preempted, step
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rl_lustre.goodput.attribute import CATEGORIES, attribute
from rl_lustre.goodput.ledger import build
from rl_lustre.goodput.timeline import (
    Attempt,
    Evidence,
    HeldRecord,
    Interval,
    Recovery,
    RunTimeline,
)


def seconds(ledger) -> dict[str, float]:
    return {c: s for c, s in ledger.seconds.items() if s}


def test_one_node_one_run_four_steps_every_category_by_hand() -> None:
    run = RunTimeline(
        run="r",
        name="r",
        submitted_at=20,
        ended_at=150,
        status="SUCCEEDED",
        attempts=(
            Attempt(
                1,
                started_at=22,
                ended_at=145,
                setup_done_at=40,
                initial_validation=Interval(40, 45),
                steps=(
                    step(1, 50, 60),
                    step(2, 60, 75, ckpt=(70, 75)),
                    step(3, 75, 90, val=(80, 85)),
                    step(4, 90, 110, ckpt=(105, 110)),
                ),
            ),
        ),
    )
    ev = Evidence(nodes=(node("n1", 0, 10, 12),), runs=(run,), now=200)

    ledger = build(ev, scope="run", run="r")
    assert seconds(ledger) == {"startup": 25, "validation": 10, "checkpoint": 10, "training": 45, "idle": 40}
    assert ledger.total_seconds == 130 == 150 - 20
    assert ledger.attributed_fraction == 1.0
    assert ledger.complete
    assert ledger.status == "SUCCEEDED"
    assert ledger.details["by_tag"]["startup"] == {"ray-job": 2, "nemo-rl-setup": 18, "pre-step": 5}
    assert ledger.details["by_tag"]["idle"] == {"after-run": 40}

    cluster = build(ev)
    assert seconds(cluster.own) == {"capacity": 10, "startup": 2, "idle": 8 + 50}
    assert cluster.run("r").seconds == ledger.seconds
    assert cluster.total_seconds == 200


def test_a_preemption_loses_the_redone_work_and_every_node_second_of_the_recovery() -> None:
    ledger = build(preempted(), scope="run", run="r")

    # Redone: both nodes from the end of step 4 to the loss; recovery: the survivor from the
    # loss to the rerun's first step, the replacement from its first billed second.
    assert ledger.seconds["lost"] == 2 * (64 - 60) + (95 - 64) + (95 - 70) == 64
    # Training: attempt 1's steps 1-4 on two nodes, the rerun of 5-6 on two; never the first 5-6.
    assert ledger.seconds["training"] == 2 * (10 + 8 + 10 + 8) + 2 * (10 + 8)
    assert ledger.seconds["checkpoint"] == 2 * 4 + 2 * 2
    assert ledger.seconds["startup"] == 2 * 10
    assert ledger.seconds["idle"] == 2 * (200 - 115)
    assert ledger.total_seconds == (200 - 10) + (64 - 10) + (200 - 70)
    [d] = ledger.restarts
    assert (d.resume_step, d.steps_redone, d.redone_wall, d.recovery_wall, d.capacity_wall) == (4, 2, 4, 31, 13)
    assert (d.redone_node_seconds, d.recovery_node_seconds, d.nodes_lost) == (8, 31 + 25, ("B",))
    assert ledger.details["by_tag"]["lost"] == {"redone": 8, "detect": 3, "capacity": 13 + 10, "restart": 15 + 15}
    # Each node at its own kind's price.
    by_node = {n.node: n for n in ledger.nodes}
    assert by_node["C"].kind == "on-demand"
    assert by_node["C"].seconds["lost"] == 25
    assert ledger.usd["lost"] == pytest.approx((8 + 31) * 37.0 / 3600 + 25 * 101.15 / 3600)
    for c in CATEGORIES:
        assert ledger.usd[c] == pytest.approx(sum(n.seconds.get(c, 0) * n.usd_per_hour / 3600 for n in ledger.nodes))
    assert "lost: restart 1 at" in str(ledger)
    assert "redid 2 steps (4.0 s)" in str(ledger)


def test_a_loss_during_the_first_set_up_keeps_it_startup_and_the_recovery_lost() -> None:
    run = RunTimeline(
        run="r",
        name="r",
        submitted_at=0,
        ended_at=100,
        status="SUCCEEDED",
        attempts=(
            Attempt(1, started_at=2, ended_at=32, setup_done_at=None),
            Attempt(2, started_at=40, ended_at=99, setup_done_at=45, steps=(step(1, 50, 90),)),
        ),
        recoveries=(Recovery(1, lost_at=30, resume_step=None, ended_attempt=1, resumed_at=50),),
    )
    ledger = build(Evidence(nodes=(node("A"),), runs=(run,), now=100), scope="run", run="r")
    assert seconds(ledger) == {"startup": 30, "lost": 20, "training": 40, "idle": 10}
    assert ledger.details["by_tag"]["lost"] == {"recovery": 20}
    assert ledger.restarts[0].steps_redone == 0
    assert ledger.restarts[0].redone_wall == 0


def test_two_losses_and_a_resume_step_from_an_earlier_attempt() -> None:
    a1 = Attempt(1, 0, 31, steps=(step(1, 5, 15, ckpt=(13, 15)), step(2, 15, 25), step(3, 25, None)))
    # Attempt 2 resumes from step 1 and saves nothing before the second loss: all of its work is lost.
    a2 = Attempt(2, 35, 61, steps=(step(2, 40, 50), step(3, 50, None)))
    a3 = Attempt(3, 65, 100, steps=(step(2, 70, 80), step(3, 80, 90)))
    run = RunTimeline(
        run="r",
        name="r",
        submitted_at=0,
        ended_at=100,
        status="SUCCEEDED",
        attempts=(a1, a2, a3),
        recoveries=(Recovery(1, 30, 1, 1, resumed_at=40), Recovery(2, 60, 1, 2, resumed_at=70)),
    )
    ledger = build(Evidence(nodes=(node("A"),), runs=(run,), now=100), scope="run", run="r")
    # Redone 1: end of step 1 (15) to 30; recovery 1: 30-40; redone 2: attempt 2's first step (40) to 60;
    # recovery 2: 60-70.
    assert ledger.seconds["lost"] == 15 + 10 + 20 + 10
    assert ledger.seconds["training"] == 8 + 20
    assert ledger.seconds["checkpoint"] == 2
    assert [(d.steps_redone, d.redone_wall) for d in ledger.restarts] == [(2, 15), (2, 20)]


def queue(cluster_nodes: int) -> Evidence:
    a = RunTimeline(
        run="A",
        name="A",
        submitted_at=0,
        ended_at=50,
        status="SUCCEEDED",
        nodes_needed=1,
        attempts=(Attempt(1, 1, 50, steps=(step(1, 5, 45),)),),
        holds=(HeldRecord(1, 2, (("r1", 8.0),)),),
    )
    held = (("r1", 8.0), ("r2", 8.0))[:cluster_nodes]
    b = RunTimeline(
        run="B",
        name="B",
        submitted_at=10,
        ended_at=95,
        status="SUCCEEDED",
        nodes_needed=2,
        queued=(Interval(10, 50),),
        attempts=(Attempt(1, 51, 90, steps=(step(1, 60, 85),)),),
        holds=(HeldRecord(1, 52, held),),
    )
    nodes = (node("n1", ray=("r1",)), node("n2", ray=("r2",)))[:cluster_nodes]
    return Evidence(nodes=nodes, runs=(a, b), now=100)


def test_a_queued_job_pays_idle_for_the_free_node_it_waits_for_and_nothing_for_the_busy_one() -> None:
    cluster = build(queue(2))
    b = cluster.run("B")
    assert b.details["by_tag"]["idle"]["queued"] == (50 - 10) * 1
    assert b.details["queued_wall"] == 40
    a_n1 = {s.owner for s in cluster.segments if s.node == "n1" and 10 <= s.start < 50}
    assert a_n1 == {"A"}
    assert {s.owner for s in cluster.segments if s.node == "n2" and s.end <= 10} == {None}
    assert cluster.attributed_fraction == 1.0

    # One node for a job of two: the queued wait is for capacity, not idle.
    short = build(queue(1)).run("B")
    assert "queued" not in short.details["by_tag"].get("idle", {})


def test_after_the_run_the_node_is_the_next_runs_or_the_clusters() -> None:
    a = RunTimeline(
        run="A",
        name="A",
        submitted_at=0,
        ended_at=40,
        status="SUCCEEDED",
        attempts=(Attempt(1, 1, 39, steps=(step(1, 5, 30),)),),
    )
    b = RunTimeline(
        run="B",
        name="B",
        submitted_at=60,
        ended_at=90,
        status="SUCCEEDED",
        attempts=(Attempt(1, 61, 89, steps=(step(1, 65, 80),)),),
    )
    cluster = build(Evidence(nodes=(node("n"),), runs=(a, b), now=100))
    assert cluster.run("A").details["by_tag"]["idle"] == {"after-run": 10}
    assert cluster.own.seconds["idle"] == (60 - 40) + (100 - 90)


def test_missing_records_are_unattributed_with_why() -> None:
    old = RunTimeline(run="old", name="old", submitted_at=10, ended_at=30, status="SUCCEEDED", journal=False)
    small = RunTimeline(
        run="small",
        name="small",
        submitted_at=40,
        ended_at=50,
        status="SUCCEEDED",
        nodes_needed=1,
        attempts=(Attempt(1, 40, 50, steps=(step(1, 41, 49),)),),
    )
    ev = Evidence(
        nodes=(node("a", 0, 0, None), node("b", 0, None, 0, first_seen=5)),
        runs=(old, small),
        foreign=(("raw-job", Interval(55, 60)),),
        now=70,
    )
    cluster = build(ev)
    why = {u.why: u.seconds for u in cluster.why}
    assert why["when the Ray worker on a started is not recorded"] == 70 - 20 - 0  # all but old's 20 s
    assert why["the Ready time of b is not recorded"] == 5  # billed from 0, first seen at 5
    assert (
        why[
            "run old has no goodput records in its log (submitted by an rl_lustre without the journal, "
            "or not an rl_lustre job)"
        ]
        == 2 * 20
    )
    assert why["run small held 1 of these nodes; which ones is not recorded"] == 10  # on b (a is already why'd)
    assert why["job raw-job (not submitted by rl_lustre) was running; its use of the nodes is not recorded"] == 5
    assert cluster.attributed_fraction == pytest.approx(1 - sum(why.values()) / cluster.total_seconds)
    assert cluster.run("small").total_seconds == 0

    two = RunTimeline(
        run="two",
        name="two",
        submitted_at=0,
        ended_at=10,
        status="SUCCEEDED",
        attempts=(Attempt(1, 0, 10, steps=(step(1, 1, 9),)),),
    )
    both = build(Evidence(nodes=(node("a"),), runs=(two, attrs.evolve(two, run="too")), now=10))
    assert [u.why for u in both.why] == ["two runs held a at once; their GPU shares are not recorded"]
    assert both.seconds["unattributed"] == 10


def test_a_running_run_is_counted_so_far() -> None:
    run = RunTimeline(
        run="r",
        name="r",
        submitted_at=0,
        ended_at=None,
        status="RUNNING",
        attempts=(Attempt(1, 1, None, steps=(step(1, 10, 20), step(2, 20, None))),),
    )
    ledger = build(Evidence(nodes=(node("n"),), runs=(run,), now=35), scope="run", run="r")
    assert not ledger.complete
    assert seconds(ledger) == {"startup": 10, "training": 25}
    assert any("counted as training so far" in n for n in ledger.notes)
    assert "so far" in str(ledger).splitlines()[0]


def test_windows_clip_and_add_up() -> None:
    ev = preempted()
    whole = build(ev, window=Interval(0, 300))
    first, second = build(ev, window=Interval(0, 77)), build(ev, window=Interval(77, 300))
    both = first + second
    for c in CATEGORIES:
        assert both.seconds[c] == pytest.approx(whole.seconds[c])
    assert build(ev, window=Interval(100, 110)).total_seconds == 2 * 10
    with pytest.raises(Exception, match="overlap"):
        _ = build(ev, scope="run", run="r") + build(ev, scope="run", run="r")


def test_priced_and_unpriced_nodes() -> None:
    ev = preempted()
    ev = attrs.evolve(
        ev, nodes=(*ev.nodes[:2], attrs.evolve(ev.nodes[2], usd_per_hour=None, price_note="its node pool is gone"))
    )
    ledger = build(ev, scope="run", run="r")
    assert ledger.unpriced_seconds == 130
    assert any("C has no price: its node pool is gone" in n for n in ledger.notes)
    at = ledger.priced(10.0)
    assert at.total_usd == pytest.approx(at.total_seconds * 10 / 3600)
    assert at.unpriced_seconds == 0
    with pytest.raises(Exception, match="usd_per_node_hour"):
        ledger.priced(-1)


# -- invariants on random evidence ------------------------------------------------------------


@st.composite
def evidence(draw: st.DrawFn) -> Evidence:
    nodes = []
    for i in range(draw(st.integers(1, 4))):
        start = draw(st.integers(0, 40))
        ready = start + draw(st.integers(0, 10))
        worker = draw(st.one_of(st.none(), st.integers(ready, ready + 6)))
        end = draw(st.one_of(st.none(), st.integers(ready + 1, 260)))
        nodes.append(
            node(
                f"n{i}",
                start,
                draw(st.one_of(st.none(), st.just(ready))),
                worker,
                end,
                first_seen=start + draw(st.integers(0, 3)),
                rate=draw(st.sampled_from([None, 0.0, 37.0])),
            )
        )
    runs = []
    t = draw(st.integers(0, 30))
    for j in range(draw(st.integers(0, 3))):
        submitted = t
        queued = ()
        if draw(st.booleans()):
            queued = (Interval(t, t + draw(st.integers(1, 10))),)
            t = queued[0].end or t
        attempts, recoveries = [], []
        n_attempts = draw(st.integers(1, 3))
        done_steps = 0
        for a in range(1, n_attempts + 1):
            started = t + draw(st.integers(0, 3))
            t = started + draw(st.integers(0, 5))
            steps = []
            for _ in range(draw(st.integers(0, 4))):
                length = draw(st.integers(1, 8))
                ck = (t + length - 1, t + length) if draw(st.booleans()) else None
                va = (t, t + 1) if draw(st.booleans()) else None
                done_steps += 1
                steps.append(step(done_steps, t, t + length, ckpt=ck, val=va))
                t += length
            last = a == n_attempts
            if steps and not last and draw(st.booleans()):
                steps[-1] = attrs.evolve(steps[-1], end=None)
            ended = t + draw(st.integers(0, 3))
            attempts.append(Attempt(a, started, ended, steps=tuple(steps), setup_done_at=started))
            if not last:
                lost_at = max(started, ended - draw(st.integers(0, 2)))
                kept = [s.step for s in steps if s.end is not None]
                resume = draw(st.one_of(st.none(), st.sampled_from(kept))) if kept else None
                recoveries.append((a, lost_at, resume, ended))
            t = ended + draw(st.integers(0, 4))
        for k, (a, lost_at, resume, ended) in enumerate(recoveries):
            nxt = attempts[a]
            first = nxt.steps[0].start if nxt.steps else None
            recoveries[k] = Recovery(
                k + 1, lost_at, resume, a, capacity_wait_at=ended, capacity_back_at=nxt.started_at, resumed_at=first
            )
        end = None if draw(st.booleans()) and j == 2 else t + draw(st.integers(0, 3))
        holds = ()
        if draw(st.booleans()):
            holds = tuple(
                HeldRecord(
                    a.number,
                    a.started_at + 1,
                    tuple(
                        (n.key, None)
                        for n in draw(st.lists(st.sampled_from(nodes), min_size=1, max_size=2, unique=True))
                    ),
                )
                for a in attempts
            )
        runs.append(
            RunTimeline(
                run=f"r{j}",
                name=f"r{j}",
                submitted_at=submitted,
                ended_at=end,
                status="RUNNING" if end is None else "SUCCEEDED",
                queued=queued,
                nodes_needed=draw(st.one_of(st.none(), st.integers(1, 4))),
                attempts=tuple(attempts),
                recoveries=tuple(recoveries),
                holds=holds,
                journal=draw(st.booleans()) or True,
            )
        )
        t += draw(st.integers(0, 20))
    now = max([t + 5, 100, *(n.billed_to or 0 for n in nodes)])
    return Evidence(
        nodes=tuple(nodes), runs=tuple(runs), now=now, pending=(Interval(5, 15),) if draw(st.booleans()) else ()
    )


def billed_in(ev: Evidence, lo: float, hi: float) -> dict[str, float]:
    out = {}
    for n in ev.nodes:
        a, b = n.billed(ev.now)
        out[n.key] = max(0.0, min(b, hi) - max(a, lo))
    return out


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(evidence(), st.integers(0, 200), st.integers(0, 300))
def test_every_billed_second_is_counted_exactly_once(ev: Evidence, cut: int, shift: int) -> None:
    window = Interval(0, ev.now)
    segments = attribute(ev, window)
    expect = billed_in(ev, 0, ev.now)
    # (a) per node: disjoint, and together exactly the billed time in the window
    for key, length in expect.items():
        mine = sorted((s for s in segments if s.node == key), key=lambda s: s.start)
        assert all(a.end <= b.start for a, b in itertools.pairwise(mine))
        assert math.fsum(s.seconds for s in mine) == pytest.approx(length, abs=1e-9)
    # (e) why exactly on unattributed; (g) nothing negative
    assert all((s.category == "unattributed") == (s.why is not None) for s in segments)
    assert all(s.seconds > 0 for s in segments)
    cluster = build(ev, window=window)
    # (b) the total is the billed time
    assert cluster.total_seconds == pytest.approx(sum(expect.values()), abs=1e-6)
    # (c) the cluster is its runs plus its own time
    for c in CATEGORIES:
        assert cluster.seconds[c] == pytest.approx(
            sum(r.seconds[c] for r in cluster.runs) + cluster.own.seconds[c], abs=1e-6
        )
    # (d) additive over a split of the window
    split = min(cut, ev.now)
    left, right = build(ev, window=Interval(0, split)), build(ev, window=Interval(split, ev.now))
    for c in CATEGORIES:
        assert left.seconds[c] + right.seconds[c] == pytest.approx(cluster.seconds[c], abs=1e-6)
    # (h) no recovery, nothing lost; (i) no run owns a second before its submission
    if not any(r.recoveries for r in ev.runs):
        assert cluster.seconds["lost"] == 0
    submitted = {r.run: r.submitted_at for r in ev.runs}
    assert all(s.start >= submitted[s.owner] for s in segments if s.owner is not None)
    # (f) the same seconds when every time moves by the same amount
    moved = shifted(ev, shift)
    again = build(moved, window=Interval(shift, ev.now + shift))
    for c in CATEGORIES:
        assert again.seconds[c] == pytest.approx(cluster.seconds[c], abs=1e-6)


def shifted(ev: Evidence, d: float) -> Evidence:
    def m(x: float | None) -> float | None:
        return None if x is None else x + d

    def iv(i: Interval | None) -> Interval | None:
        return None if i is None else Interval(i.start + d, m(i.end))

    nodes = tuple(
        attrs.evolve(
            n,
            billed_from=m(n.billed_from),
            ready_at=m(n.ready_at),
            worker_at=m(n.worker_at),
            billed_to=m(n.billed_to),
            first_seen=n.first_seen + d,
        )
        for n in ev.nodes
    )
    runs = tuple(
        attrs.evolve(
            r,
            submitted_at=r.submitted_at + d,
            ended_at=m(r.ended_at),
            queued=tuple(iv(q) for q in r.queued),
            attempts=tuple(
                attrs.evolve(
                    a,
                    started_at=a.started_at + d,
                    ended_at=m(a.ended_at),
                    setup_done_at=m(a.setup_done_at),
                    initial_validation=iv(a.initial_validation),
                    steps=tuple(
                        attrs.evolve(
                            s, start=s.start + d, end=m(s.end), checkpoint=iv(s.checkpoint), validation=iv(s.validation)
                        )
                        for s in a.steps
                    ),
                )
                for a in r.attempts
            ),
            recoveries=tuple(
                attrs.evolve(
                    x,
                    lost_at=x.lost_at + d,
                    capacity_wait_at=m(x.capacity_wait_at),
                    capacity_back_at=m(x.capacity_back_at),
                    resumed_at=m(x.resumed_at),
                )
                for x in r.recoveries
            ),
            holds=tuple(attrs.evolve(h, at=h.at + d) for h in r.holds),
        )
        for r in ev.runs
    )
    return Evidence(nodes=nodes, runs=runs, now=ev.now + d, pending=tuple(iv(p) for p in ev.pending))
