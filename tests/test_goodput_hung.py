"""The goodput ledger's ``hung`` category (issue 33, point 4): a hung run's silence, from its last
progress until it was stopped, is ``hung``; its work since the checkpoint it resumed from stays
``lost``, and so does the time from its stop to the rerun's first step. Worked out by hand on two
nodes, as the preemption example of ``test_goodput_attribute``."""

from __future__ import annotations

import pytest
from helpers.goodput import node, step

from rl_lustre.goodput.attribute import CATEGORIES, attribute
from rl_lustre.goodput.ledger import build
from rl_lustre.goodput.timeline import Attempt, Evidence, Interval, Recovery, RunTimeline


def hung() -> Evidence:
    """Two nodes, both alive throughout; step 6 starts at 62 and makes no progress after 63; the
    watchdog stops the attempt at 75; the rerun resumes from step_4 and prints step 5 at 85."""
    first = Attempt(
        1,
        started_at=10,
        ended_at=76,
        exit_code=137,
        setup_done_at=15,
        steps=(
            step(1, 20, 30),
            step(2, 30, 40, ckpt=(38, 40)),
            step(3, 40, 50),
            step(4, 50, 60, ckpt=(58, 60)),
            step(5, 60, 62),
            step(6, 62, None),
        ),
    )
    rerun = Attempt(
        2,
        started_at=78,
        ended_at=120,
        exit_code=0,
        setup_done_at=82,
        steps=(step(5, 85, 95), step(6, 95, 105, ckpt=(103, 105))),
    )
    run = RunTimeline(
        "r",
        "r",
        submitted_at=10,
        ended_at=120,
        status="SUCCEEDED",
        nodes_needed=2,
        attempts=(first, rerun),
        recoveries=(
            Recovery(
                1,
                lost_at=75,
                resume_step=4,
                ended_attempt=1,
                capacity_wait_at=77,
                capacity_back_at=78,
                capacity_seconds=1,
                resumed_at=85,
                cause="hung",
                hung_from=63,
            ),
        ),
    )
    return Evidence(nodes=(node("A"), node("B")), runs=(run,), now=200)


def test_a_hung_runs_silence_is_hung_and_its_redone_work_and_recovery_are_lost() -> None:
    ledger = build(hung(), scope="run", run="r")
    # The silence: both nodes, from the last progress (63) to the stop (75).
    assert ledger.seconds["hung"] == pytest.approx(2 * (75 - 63))
    # Lost: the work after step 4's checkpoint up to the last progress (60 -> 63), and the stop to
    # the rerun's first step (75 -> 85), on both nodes.
    assert ledger.seconds["lost"] == pytest.approx(2 * (63 - 60) + 2 * (85 - 75))
    assert sum(ledger.seconds[c] for c in CATEGORIES) == pytest.approx(ledger.total_seconds)
    [detail] = ledger.restarts
    assert (detail.cause, detail.hung_wall, detail.redone_wall) == ("hung", 12.0, 3.0)
    assert "hung: restart 1 at" in str(ledger)
    assert "silent 12.0 s" in str(ledger)


def test_without_a_last_progress_it_is_all_lost_as_before() -> None:
    ev = hung()
    run = ev.runs[0]
    plain = Evidence(
        nodes=ev.nodes,
        runs=(
            RunTimeline(
                run.run,
                run.name,
                submitted_at=run.submitted_at,
                ended_at=run.ended_at,
                status=run.status,
                nodes_needed=2,
                attempts=run.attempts,
                recoveries=(Recovery(1, lost_at=75, resume_step=4, ended_attempt=1, resumed_at=85),),
            ),
        ),
        now=200,
    )
    segments = attribute(plain, Interval(0, 200))
    assert not [s for s in segments if s.category == "hung"]
    assert sum(s.seconds for s in segments if s.category == "lost") == pytest.approx(2 * (75 - 60) + 2 * (85 - 75))
