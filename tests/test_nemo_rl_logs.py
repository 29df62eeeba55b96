"""rl_lustre.nemo_rl.logs on NeMo-RL's real output format and on the rehearsal driver's output."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

from rl_lustre.nemo_rl.logs import CheckpointSave, LogParser, StepRecord, parse_log
from rl_lustre.rehearsal import main

# Written by hand in the format of NeMo-RL v0.4.0's grpo_train (nemo_rl/algorithms/grpo.py)
# and its print_performance_metrics, with Ray worker lines interleaved as `ray job logs`
# shows them. Numbers are made up.
NEMO_RL_EXCERPT = """\
📊 Using log directory: /lustre/logs/run1/exp_002
📊 Using checkpoint directory: /lustre/ckpt/run1

========================= Epoch 1/1 =========================

========================= Step 9/20 =========================
▶ Preparing batch...
▶ Generating responses for batch of size 256...
(VllmGenerationWorker pid=4312, ip=10.8.0.5) INFO 11-20 10:01:02 [loggers.py:123] Avg prompt throughput: 1.2 tokens/s
▶ Processing rewards...,
▶ Computing advantages...
▶ Preparing for logprob inference...
▶ Computing logprobs...
▶ Preparing for training...
▶ Training policy...

📊 Training Results:
  • Loss: 0.0123
  • Generation KL Error: 0.0010
  • Avg Reward: 0.3125
  • Mean Generation Length: 201.2197

⏱️  Timing:
  • Total step time: 30.50s
  • policy_training: 10.97s (36.0%)
  • generation: 4.95s (16.2%)
  • prepare_for_generation/total: 2.20s (7.2%)

🔍 Performance Metrics:
  • Mean Total Tokens per Sample: 204.01
  • Throughputs (per GPU):
    - E2E (Samples/sec/gpu): 3.59
    - E2E (Tokens/sec/gpu): 1073.59
  • Throughputs (per Group):
    - E2E (Samples/sec): 28.68

========================= Step 10/20 =========================
▶ Preparing batch...
▶ Training policy...
▶ Starting validation at step 10...

📊 Validation Results:
    • Accuracy: 0.4531
    • Average response length: 171.3 tokens
    • Samples processed: 256

  ⏱️  Validation Timing:
    • Total validation time: 12.04s
Saving checkpoint for step 10...
(MegatronPolicyWorker pid=5120, ip=10.8.0.6) saving checkpoint at iteration       0 to \
/lustre/ckpt/run1/tmp_step_10/policy/weights
Removing checkpoint /lustre/ckpt/run1/step_6 due to being outside top-2

📊 Training Results:
  • Loss: -0.0040
  • Generation KL Error: 0.0011
  • Avg Reward: 0.3500
  • Mean Generation Length: 210.0000

⏱️  Timing:
  • Total step time: 42.10s
  • policy_training: 11.02s (26.2%)
  • checkpointing: 6.49s (15.4%)
  • generation: 5.01s (11.9%)

🔍 Performance Metrics:
  • Mean Total Tokens per Sample: 212.50
Max number of steps has been reached, stopping training early
"""


def test_real_format_excerpt() -> None:
    parsed = parse_log(NEMO_RL_EXCERPT)

    assert [(s.step, s.total) for s in parsed.steps] == [(9, 20), (10, 20)]
    first, second = parsed.steps
    assert first.metrics == {
        "loss": 0.0123,
        "generation_kl_error": 0.001,
        "avg_reward": 0.3125,
        "mean_generation_length": 201.2197,
    }
    assert first.timings == {
        "total_step_time": 30.5,
        "policy_training": 10.97,
        "generation": 4.95,
        "prepare_for_generation/total": 2.2,
    }
    assert first.seconds == 30.5
    assert first.performance == {
        "Mean Total Tokens per Sample": 204.01,
        "E2E (Samples/sec/gpu)": 3.59,
        "E2E (Tokens/sec/gpu)": 1073.59,
        "E2E (Samples/sec)": 28.68,
    }
    assert first.validation == {}
    assert second.validation == {"accuracy": 0.4531, "average_response_length": 171.3, "samples_processed": 256.0}
    assert second.metrics["loss"] == -0.004
    assert "total_validation_time" not in second.timings
    # NeMo-RL times validation apart from the step's timers: "Total validation time".
    assert (first.validation_seconds, second.validation_seconds) == (None, 12.04)
    assert [(st.epoch, st.global_step) for st in parsed.steps] == [(1, 9), (1, 10)]
    # Without timestamps, the save lasts what NeMo-RL's own checkpointing timer says.
    assert parsed.saves == [CheckpointSave(step=10, timed_seconds=6.49)]
    assert parsed.saves[0].seconds == 6.49
    assert parsed.finished


def test_incremental_feed_times_saves_from_the_next_driver_line() -> None:
    p = LogParser()
    completed: list[StepRecord | CheckpointSave] = []
    clock = 1000.0
    for line in NEMO_RL_EXCERPT.splitlines(keepends=True):
        if line.startswith("Saving checkpoint"):
            clock = 2000.0
        elif line.startswith("Removing checkpoint"):
            # The worker line in between does not end the save: the driver's next line does.
            clock = 2007.25
        completed += p.feed(line, at=clock)
        if line.startswith("========================= Step 10/20"):
            assert p.current_step == 10
            assert p.total_steps == 20
            assert p.completed_steps == 9
            assert [r.step for r in completed if isinstance(r, StepRecord)] == [9]

    steps = [r for r in completed if isinstance(r, StepRecord)]
    saves = [r for r in completed if isinstance(r, CheckpointSave)]
    assert [s.step for s in steps] == [9, 10]
    assert saves == [CheckpointSave(step=10, started_at=2000.0, ended_at=2007.25, timed_seconds=6.49)]
    assert saves[0].wall_seconds == 7.25
    assert saves[0].seconds == 6.49
    assert steps[0].started_at == 1000.0
    assert p.finished


def test_a_save_cut_off_by_the_end_of_the_stream() -> None:
    p = LogParser(clock=None)
    p.feed("========================= Step 4/20 =========================")
    p.feed("Saving checkpoint for step 4...", at=50.0)

    pending = p.close()

    assert pending == [CheckpointSave(step=4, started_at=50.0)]
    assert pending[0].seconds is None
    assert p.steps == []
    assert not p.finished


def test_lines_outside_blocks_are_not_metrics() -> None:
    text = (
        "========================= Step 1/1 =========================\n"
        "  • Loss: 9.0\n"  # an item before any block header belongs to nothing
        "📊 Training Results:\n"
        "  • Avg Reward: 0.25\n"
        "Some other driver line\n"
        "  • Loss: 7.0\n"
    )
    (step,) = parse_log(text).steps
    assert step.metrics == {"avg_reward": 0.25}


@pytest.fixture(scope="module")
def rehearsal_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    d = tmp_path_factory.mktemp("rehearsal-log")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = main(
            [
                "--config",
                "grpo_math_1B",
                "--step-seconds",
                "0",
                "--checkpoint-scale",
                "1e-6",
                "grpo.max_num_steps=4",
                "grpo.val_period=2",
                "checkpointing.save_period=3",
                "checkpointing.metric_name=null",
                f"checkpointing.checkpoint_dir={d}/ckpt",
                f"logger.log_dir={d}/logs",
            ]
        )
    assert status == 0
    return out.getvalue(), d


def test_rehearsal_output_parses_like_nemo_rl(rehearsal_run: tuple[str, Path]) -> None:
    text, d = rehearsal_run
    parsed = parse_log(text)

    # The driver also logs what it printed, as JSON: an independent record to check against.
    logged = [
        json.loads(line) for line in (d / "logs" / "exp_001" / "rehearsal_metrics.jsonl").read_text().splitlines()
    ]
    assert [s.step for s in parsed.steps] == [r["step"] for r in logged] == [1, 2, 3, 4]
    assert {s.total for s in parsed.steps} == {4}
    for step, record in zip(parsed.steps, logged, strict=True):
        assert step.metrics["avg_reward"] == round(record["train"]["reward"], 4)
        assert step.metrics["loss"] == round(record["train"]["loss"], 4)
        assert step.timings["total_step_time"] == round(record["timing"]["total_step_time"], 2)
        assert set(step.timings) == set(record["timing"])
        assert "E2E (Tokens/sec/gpu)" in step.performance
    assert [bool(s.validation) for s in parsed.steps] == [False, True, False, True]
    # save_period 3 and the final step: NeMo-RL saves steps 3 and 4.
    assert [s.step for s in parsed.saves] == [3, 4]
    assert all(s.timed_seconds is not None and s.timed_seconds >= 0 for s in parsed.saves)
    assert parsed.finished
    assert sorted(p.name for p in (d / "ckpt").iterdir()) == ["step_3", "step_4"]


def test_parser_notices_the_rehearsal(rehearsal_run: tuple[str, Path]) -> None:
    text, _ = rehearsal_run
    p = LogParser()
    for line in text.splitlines():
        p.feed(line)
    assert p.rehearsal
    lp = LogParser()
    for line in NEMO_RL_EXCERPT.splitlines():
        lp.feed(line)
    assert not lp.rehearsal


# NeMo-RL v0.4.0's grpo_train with grpo.val_at_start: the initial validation comes before the
# first epoch header; the second epoch counts its steps from 1 again.
TWO_EPOCHS = """\
🔍 Running initial validation...
▶ Starting validation at step 0...

📊 Validation Results:
    • Accuracy: 0.1000
    • Average response length: 150.0 tokens
    • Samples processed: 64

  ⏱️  Validation Timing:
    • Total validation time: 3.50s

========================= Epoch 1/2 =========================

========================= Step 2/2 =========================
rl_lustre supervisor: a line of the supervisor's, between NeMo-RL's
RL_LUSTRE_EVENT {"v": 1, "at": 5.0, "event": "results", "step": 2}

📊 Training Results:
RL_LUSTRE_EVENT {"v": 1, "at": 5.0, "event": "noise"}
  • Loss: 0.5000

⏱️  Timing:
  • Total step time: 2.00s

========================= Epoch 2/2 =========================

========================= Step 1/2 =========================

📊 Training Results:
  • Loss: 0.2500

⏱️  Timing:
  • Total step time: 1.00s
"""


def test_initial_validation_epochs_and_the_supervisors_lines() -> None:
    parsed = parse_log(TWO_EPOCHS)

    assert parsed.initial_validation == {
        "accuracy": 0.1,
        "average_response_length": 150.0,
        "samples_processed": 64.0,
        "total_validation_time": 3.5,
    }
    assert [(s.step, s.epoch, s.global_step) for s in parsed.steps] == [(2, 1, 2), (1, 2, 3)]
    # The supervisor's lines (for people and for programs) end no block.
    assert [s.metrics for s in parsed.steps] == [{"loss": 0.5}, {"loss": 0.25}]
    assert parsed.steps[0].validation == {}
