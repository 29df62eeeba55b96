"""What the goodput tests share: hand-made evidence (a node, a step, a preempted run whose
seconds are worked out by hand in ``test_goodput_attribute``) and the ledger's JSON schema."""

from __future__ import annotations

import json
from pathlib import Path

from rl_lustre.goodput.timeline import Attempt, Evidence, Interval, NodeSpan, Recovery, RunTimeline, StepSpan

# The published shape of ``GoodputLedger.to_dict()`` (tests/data).
SCHEMA = json.loads((Path(__file__).resolve().parents[1] / "data" / "goodput_ledger.schema.json").read_text())


def node(
    key: str,
    billed_from: float | None = 0.0,
    ready: float | None = 0.0,
    worker: float | None = 0.0,
    billed_to: float | None = None,
    *,
    rate: float | None = 0.0,
    first_seen: float | None = None,
    ray: tuple[str, ...] = (),
    gpus: int = 8,
    kind: str = "spot",
) -> NodeSpan:
    seen = first_seen if first_seen is not None else (billed_from if billed_from is not None else 0.0)
    return NodeSpan(
        key=key,
        kind=kind,
        usd_per_hour=rate,
        gpus=gpus,
        billed_from=billed_from,
        ready_at=ready,
        worker_at=worker,
        billed_to=billed_to,
        first_seen=seen,
        ray_node_ids=ray or (key,),
    )


def step(
    k: int,
    start: float,
    end: float | None,
    *,
    ckpt: tuple[float, float] | None = None,
    val: tuple[float, float] | None = None,
) -> StepSpan:
    return StepSpan(
        step=k,
        start=start,
        end=end,
        total_seconds=None if end is None else end - start,
        checkpoint=None if ckpt is None else Interval(*ckpt),
        validation=None if val is None else Interval(*val),
    )


def preempted() -> Evidence:
    """Two nodes; B is lost at 64 during step 6; C replaces it (billed 70, Ready 75); resume from step_4."""
    attempt1 = Attempt(
        1,
        started_at=10,
        ended_at=66,
        exit_code=1,
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
    attempt2 = Attempt(
        2,
        started_at=80,
        ended_at=190,
        exit_code=0,
        setup_done_at=90,
        steps=(step(5, 95, 105), step(6, 105, 115, ckpt=(113, 115))),
    )
    recovery = Recovery(
        1,
        lost_at=64,
        resume_step=4,
        ended_attempt=1,
        capacity_wait_at=67,
        capacity_back_at=80,
        capacity_seconds=13,
        resumed_at=95,
        nodes_lost=("B",),
    )
    run = RunTimeline(
        run="r",
        name="r",
        submitted_at=10,
        ended_at=200,
        status="SUCCEEDED",
        nodes_needed=2,
        attempts=(attempt1, attempt2),
        recoveries=(recovery,),
    )
    nodes = (
        node("A", rate=37.0),
        node("B", billed_to=64, rate=37.0),
        node("C", 70, 75, 78, rate=101.15, kind="on-demand"),
    )
    return Evidence(nodes=nodes, runs=(run,), now=300)
