"""A job's log read back as a run timeline: the journal's stamps with NeMo-RL's timers."""

from __future__ import annotations

import json

import pytest
from helpers.supervisor_run import supervised_log

from rl_lustre.goodput.ledger import build
from rl_lustre.goodput.runlog import run_timeline
from rl_lustre.goodput.timeline import Evidence, NodeSpan
from rl_lustre.nemo_rl.logs import parse_log
from rl_lustre.oncluster import nemo_formats as formats
from rl_lustre.oncluster.records import read_journal


def ev(record: dict, at: float) -> str:
    return "RL_LUSTRE_EVENT " + json.dumps({"v": 1, "at": at, **record})


def test_a_supervised_rehearsal_gives_a_span_per_step_with_its_save_and_validation(tmp_path) -> None:
    log = supervised_log(str(tmp_path))
    records = read_journal(log)
    start, end = records[0]["at"], records[-1]["at"]
    t = run_timeline("r", log, status="SUCCEEDED", submitted_at=start - 0.5, ended_at=end + 0.1)

    assert t.journal
    assert t.rehearsal
    [a] = t.attempts
    assert [s.step for s in a.steps] == [1, 2, 3, 4]
    parsed = parse_log(log)
    for span, printed in zip(a.steps, parsed.steps, strict=True):
        assert span.total_seconds == printed.seconds
        assert span.end is not None
        assert span.end > span.start
        if span.step in (2, 4):
            assert span.checkpoint is not None
            # NeMo-RL's timer (printed to 0.01 s), clamped to the step's span.
            assert span.checkpoint.end - span.checkpoint.start == pytest.approx(
                printed.timings["checkpointing"], abs=0.011
            )
        else:
            assert span.checkpoint is None
        if span.step == 3:
            assert span.validation is not None
            assert span.validation.end - span.validation.start == pytest.approx(printed.validation_seconds, abs=0.011)
        else:
            assert span.validation is None
    # Spans follow each other: each ends where the next begins; the last lasts NeMo-RL's own time.
    assert all(x.end == y.start for x, y in zip(a.steps, a.steps[1:], strict=False))
    assert a.steps[-1].end == pytest.approx(a.steps[-1].start + parsed.steps[-1].seconds)
    assert a.exit_code == 0
    assert a.setup_done_at is not None

    node = NodeSpan("head/1", "local", 0.0, 1, start - 1, start - 1, start - 1, None, start - 1)
    ledger = build(Evidence(nodes=(node,), runs=(t,), now=end + 1), scope="run", run="r")
    assert ledger.attributed_fraction == 1.0
    steps_seconds = sum(s.total_seconds for s in a.steps)
    ckpt = sum(p.timings.get("checkpointing", 0) for p in parsed.steps)
    val = sum(p.validation_seconds or 0 for p in parsed.steps)
    assert ledger.seconds["checkpoint"] == pytest.approx(ckpt, abs=0.03)
    assert ledger.seconds["validation"] == pytest.approx(val, abs=0.02)
    # Training is the steps' spans but their saves and validation: at least NeMo-RL's own step
    # times, plus the untimed logging between steps (on a loaded machine, more than 10 % of 0.05 s steps).
    spans = sum(x.end - x.start for x in a.steps)
    assert ledger.seconds["training"] == pytest.approx(spans - ckpt - val, abs=0.03)
    assert ledger.seconds["training"] >= steps_seconds - ckpt - val - 0.03


def two_attempts() -> str:
    lines = [
        ev({"event": "start", "nodes": 2, "gpus_per_node": 8}, 1),
        ev({"event": "attempt", "attempt": 1}, 2),
        formats.step_header(1, 4),
        ev({"event": "step", "step": 1, "k": 1, "of": 4, "epoch": 1, "attempt": 1}, 10),
        formats.save_line(1),
        ev({"event": "save", "step": 1, "attempt": 1}, 18),
        "",
        "📊 Training Results:",
        "  • Loss: 0.1",
        "",
        "⏱️  Timing:",
        "  • Total step time: 10.00s",
        "  • checkpointing: 2.00s (20.0%)",
        formats.step_header(2, 4),
        ev({"event": "step", "step": 2, "k": 2, "of": 4, "epoch": 1, "attempt": 1}, 20),
        ev({"event": "exit", "attempt": 1, "code": 1}, 26),
        'RL_LUSTRE_RESTART {"restart": 1, "lost_at": 25.0, "nodes": [{"node_id": "ab", "name": "w2"}], '
        '"resume_step": 1, "last_step": 2, "exit_code": 1}',
        ev({"event": "capacity_wait", "need": 2}, 27),
        ev({"event": "capacity_back", "waited": 3}, 30),
        ev({"event": "attempt", "attempt": 2}, 31),
        formats.step_header(2, 4),
        ev({"event": "step", "step": 2, "k": 2, "of": 4, "epoch": 1, "attempt": 2}, 40),
        'RL_LUSTRE_RESUMED {"restart": 1, "first_step": 2, "first_step_at": 40.0, "seconds_lost": 15.0, '
        '"capacity_seconds": 3.0}',
    ]
    return "\n".join(lines) + "\n"


def test_two_attempts_and_a_recovery() -> None:
    t = run_timeline("r", two_attempts(), status="RUNNING", submitted_at=0, ended_at=None)
    assert t.nodes_needed == 2
    assert t.ended_at is None
    a1, a2 = t.attempts
    assert [(s.step, s.start, s.end) for s in a1.steps] == [(1, 10, 20), (2, 20, None)]
    assert a1.steps[0].checkpoint is not None
    assert (a1.steps[0].checkpoint.start, a1.steps[0].checkpoint.end) == (18, 20)
    assert (a1.ended_at, a1.exit_code) == (26, 1)
    [r] = t.recoveries
    assert (r.lost_at, r.resume_step, r.ended_attempt, r.capacity_wait_at, r.capacity_back_at, r.resumed_at) == (
        25,
        1,
        1,
        27,
        30,
        40,
    )
    assert r.nodes_lost == ("w2",)
    # The running attempt's step is open.
    assert [(s.step, s.start, s.end) for s in a2.steps] == [(2, 40, None)]


def test_a_save_line_stamped_late_keeps_its_timers_seconds_inside_its_step() -> None:
    # The supervisor read the save's line together with the next step's header (a loaded
    # machine): both are stamped 20, where step 1 ends.
    lines = [
        ev({"event": "start", "nodes": 1, "gpus_per_node": 8}, 1),
        ev({"event": "attempt", "attempt": 1}, 2),
        formats.step_header(1, 2),
        ev({"event": "step", "step": 1, "k": 1, "of": 2, "epoch": 1, "attempt": 1}, 10),
        formats.save_line(1),
        ev({"event": "save", "step": 1, "attempt": 1}, 20),
        "",
        "📊 Training Results:",
        "  • Loss: 0.1",
        "",
        "⏱️  Timing:",
        "  • Total step time: 10.00s",
        "  • checkpointing: 2.00s (20.0%)",
        formats.step_header(2, 2),
        ev({"event": "step", "step": 2, "k": 2, "of": 2, "epoch": 1, "attempt": 1}, 20),
        "",
        "📊 Training Results:",
        "  • Loss: 0.1",
        "",
        "⏱️  Timing:",
        "  • Total step time: 10.00s",
        ev({"event": "exit", "attempt": 1, "code": 0}, 30.5),
    ]
    t = run_timeline("r", "\n".join(lines) + "\n", status="SUCCEEDED", submitted_at=0, ended_at=31)
    [a] = t.attempts
    first = a.steps[0]
    assert (first.start, first.end) == (10, 20)
    # NeMo-RL's checkpointing timer runs inside its step: the save is its last 2 s, not cut to nothing.
    assert first.checkpoint is not None
    assert (first.checkpoint.start, first.checkpoint.end) == (18, 20)
    node = NodeSpan("head/1", "local", 0.0, 1, 0, 0, 0, None, 0)
    ledger = build(Evidence(nodes=(node,), runs=(t,), now=40), scope="run", run="r")
    assert ledger.seconds["checkpoint"] == pytest.approx(2.0)
    assert ledger.seconds["training"] == pytest.approx(8.0 + 10.0)


def test_a_log_without_the_journal() -> None:
    t = run_timeline(
        "old",
        "Loaded configuration from: x\n" + formats.step_header(1, 2) + "\n",
        status="SUCCEEDED",
        submitted_at=0,
        ended_at=9,
    )
    assert not t.journal
    assert t.attempts == ()
    assert t.ended_at == 9
    assert any("no goodput records" in n for n in t.notes)


def test_queue_records_give_the_wait_and_the_nodes_held() -> None:
    log = (
        "\n".join(
            [
                ev({"event": "start", "nodes": 1}, 1),
                ev({"event": "queued", "need": 2, "place": 1, "behind": ["a"]}, 2),
                ev({"event": "waiting", "need": 2, "place": 1}, 5),
                ev({"event": "granted", "need": 2, "slots": [0, 1], "attempt": 1, "after": "queued"}, 9),
                ev({"event": "attempt", "attempt": 1}, 9.5),
                ev(
                    {
                        "event": "held",
                        "attempt": 1,
                        "nodes": [{"node_id": "n1", "gpus": 8}, {"node_id": "n2", "gpus": 8.0}],
                    },
                    12,
                ),
            ]
        )
        + "\n"
    )
    t = run_timeline("b", log, status="RUNNING", submitted_at=0, ended_at=None)
    assert t.nodes_needed == 2
    assert [(q.start, q.end) for q in t.queued] == [(2, 9)]
    assert [(h.attempt, h.at, h.nodes) for h in t.holds] == [(1, 12, (("n1", 8.0), ("n2", 8.0)))]
    assert t.granted_at == 9


def test_the_initial_validation_is_validation(tmp_path) -> None:
    log = supervised_log(str(tmp_path), "grpo.val_at_start=true")
    t = run_timeline("r", log, status="SUCCEEDED", submitted_at=read_journal(log)[0]["at"], ended_at=None)
    [a] = t.attempts
    assert a.initial_validation is not None
    assert a.initial_validation.end is not None
    seconds = parse_log(log).initial_validation["total_validation_time"]
    assert a.initial_validation.end - a.initial_validation.start == pytest.approx(seconds, abs=0.011)
    assert a.setup_done_at is not None
    assert a.setup_done_at <= a.initial_validation.start < a.initial_validation.end <= a.steps[0].start
