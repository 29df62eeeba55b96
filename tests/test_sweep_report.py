"""What a sweep reports: each run's queued time, run time and GPU-hours, the sweep's
makespan against its lower bound, and the timeline plot — from hand-built outcomes whose
numbers are worked by hand here (the real records are checked in test_sweep.py)."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from rl_lustre.errors import ConfigError
from rl_lustre.queueing.state import Timeline
from rl_lustre.sweep_plot import collect
from rl_lustre.sweep_result import Outcome, SweepResult


def _outcome(
    name: str,
    nodes: int,
    submitted: float,
    admitted: float | None,
    released: float,
    slots: tuple[int, ...] = (),
    recoveries: tuple[tuple[float, float | None], ...] = (),
    readmitted: tuple[float, tuple[int, ...]] | None = None,
    held: tuple[str, ...] = (),
) -> Outcome:
    admissions = () if admitted is None else ((admitted, slots),)
    if readmitted is not None:
        admissions += (readmitted,)
    line = Timeline(
        nodes=nodes,
        gpus_per_node=8,
        joined_at=submitted + 1,
        admissions=admissions,
        recoveries=recoveries,
        held_nodes=held,
        released_at=released,
        reason="succeeded",
        capacity=4,
    )
    run = 0.0 if admitted is None else released - admitted
    return Outcome(
        name=name,
        job_id=f"rl-lustre-{name}",
        status="SUCCEEDED",
        steps=1,
        total=1,
        nodes=nodes,
        gpus_per_node=8,
        submitted_at=submitted,
        queued_seconds=(admitted or released) - submitted,
        run_seconds=run,
        gpu_hours=nodes * 8 * run / 3600,
        timeline=line,
        ended_at=released,
    )


# On 4 nodes: a (4 nodes, 100 s) runs first; b (2 nodes, 60 s) and c (2 nodes, 120 s) then
# side by side; c lost its nodes for 20 s at 170 and got slots 2-3 back.
A = _outcome("a", 4, 1000.0, 1005.0, 1105.0, (0, 1, 2, 3))
B = _outcome("b", 2, 1000.5, 1106.0, 1166.0, (0, 1))
C = _outcome("c", 2, 1001.0, 1106.0, 1226.0, (2, 3), recoveries=((1170.0, 1190.0),), readmitted=(1190.0, (2, 3)))
SWEEP = SweepResult((A, B, C))


def test_each_run_and_the_sweep_add_up() -> None:
    assert (B.queued_seconds, B.run_seconds) == (105.5, 60.0)
    assert B.gpu_hours == pytest.approx(2 * 8 * 60 / 3600)
    assert SWEEP.gpu_hours == pytest.approx((4 * 100 + 2 * 60 + 2 * 120) * 8 / 3600)
    # From the first submission (1000) to the last release (1226).
    assert SWEEP.makespan_seconds == 226.0
    # The larger of the longest run (120 s) and the node-seconds (400 + 120 + 240) over 4 nodes.
    assert SWEEP.lower_bound_seconds == 190.0
    assert SWEEP.makespan_ratio == pytest.approx(226 / 190)


def test_the_table_shows_the_queue_columns_and_a_summary() -> None:
    rows = SWEEP.rows()
    assert [(r["nodes"], r["queued_s"], r["run_s"], r["gpu_h"]) for r in rows] == [
        (4, 5.0, 100.0, 0.889),
        (2, 105.5, 60.0, 0.267),
        (2, 105.0, 120.0, 0.533),
    ]
    lines = str(SWEEP).splitlines()
    assert lines[0].split()[:6] == ["name", "status", "steps", "checkpoints", "nodes", "queued_s"]
    assert lines[-1] == "makespan 226s, lower bound 190s (ratio 1.19), 3 runs, 1.69 GPU-hours held"
    # Runs that were never in a queue: no such columns, no summary.
    plain = SweepResult((Outcome(name="x", job_id="x", status="SUCCEEDED", steps=1, total=1),))
    assert "nodes" not in plain.rows()[0]
    assert (plain.makespan_seconds, plain.makespan_ratio, plain.summary()) == (None, None, "")


def test_a_run_that_never_got_its_nodes_held_nothing() -> None:
    never = _outcome("n", 4, 1000.0, None, 1050.0)
    assert (never.queued_seconds, never.run_seconds, never.gpu_hours) == (50.0, 0.0, 0.0)
    data = collect(SweepResult((A, never)))
    assert {b.name for b in data.bars} == {"a"}
    assert [(w.name, w.start, w.end) for w in data.waits] == [("a", 0.0, 5.0), ("n", 0.0, 50.0)]


def test_the_plot_has_a_bar_per_run_per_slot_and_none_overlap(tmp_path: Path) -> None:
    data = collect(SWEEP)
    assert data.capacity == 4
    assert data.title == SWEEP.summary()
    bars = sorted((b.slot, b.start, b.end, b.name, b.recovering) for b in data.bars)
    assert bars == [
        (0, 5.0, 105.0, "a", False),
        (0, 106.0, 166.0, "b", False),
        (1, 5.0, 105.0, "a", False),
        (1, 106.0, 166.0, "b", False),
        (2, 5.0, 105.0, "a", False),
        (2, 106.0, 170.0, "c", False),
        (2, 170.0, 190.0, "c", True),
        (2, 190.0, 226.0, "c", False),
        (3, 5.0, 105.0, "a", False),
        (3, 106.0, 170.0, "c", False),
        (3, 170.0, 190.0, "c", True),
        (3, 190.0, 226.0, "c", False),
    ]
    for (slot, _, end, _, _), (next_slot, start, _, _, _) in itertools.pairwise(bars):
        assert slot != next_slot or end <= start
    out = SWEEP.plot(tmp_path / "sweep.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ConfigError, match=r"SweepResult\.plot\.path=.*must end in \.png"):
        SWEEP.plot(tmp_path / "sweep.svg")
    with pytest.raises(ConfigError, match="does not exist"):
        SWEEP.plot(tmp_path / "missing" / "sweep.png")


def test_the_rows_are_rays_nodes_when_every_run_names_its_own() -> None:
    workers = ("w0", "w1", "w2", "w3")
    a = _outcome("a", 4, 1000.0, 1005.0, 1105.0, (0, 1, 2, 3), held=("w3", "w2", "w1", "w0"))
    b = _outcome("b", 2, 1000.5, 1106.0, 1166.0, (0, 1), held=("w2", "w0"))
    d = _outcome("d", 2, 1001.0, 1106.0, 1200.0, (2, 3), held=("w1", "w3"))
    data = collect(SweepResult((a, b, d)))
    assert data.rows == workers
    assert sorted((data.rows[x.slot], x.name, x.start, x.end) for x in data.bars) == [
        ("w0", "a", 5.0, 105.0),
        ("w0", "b", 106.0, 166.0),
        ("w1", "a", 5.0, 105.0),
        ("w1", "d", 106.0, 200.0),
        ("w2", "a", 5.0, 105.0),
        ("w2", "b", 106.0, 166.0),
        ("w3", "a", 5.0, 105.0),
        ("w3", "d", 106.0, 200.0),
    ]
    # A head declaring every GPU is one Ray node for all: the queue's node numbers instead.
    head = [
        _outcome(o.name, o.nodes or 0, 1000.0, 1005.0, 1105.0, o.timeline.slots if o.timeline else (), held=("head",))
        for o in (a, b)
    ]
    assert collect(SweepResult(tuple(head))).rows == ("node 0", "node 1", "node 2", "node 3")
