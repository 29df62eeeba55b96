"""A run with nothing left to do says so loudly; ``submit(job, fresh=True)`` starts over.

On the session's local Ray head (rehearsal mode), whose runs also say they are rehearsals.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from rl_lustre import Cluster, GRPOJob
from rl_lustre.errors import NothingToDoWarning
from rl_lustre.oncluster.records import REHEARSAL_NOTE

JOB = GRPOJob(
    name="noop",
    recipe="grpo_math_1B",
    model="Qwen/Qwen2.5-1.5B",
    dataset="OpenMathInstruct-2",
    max_num_steps=2,
    num_prompts_per_step=4,
    num_generations_per_prompt=8,
    train_global_batch_size=32,
    save_period=1,
)


@pytest.mark.slow
def test_nothing_left_to_do_warns_at_submit_and_wait_and_fresh_trains_again(local_cluster: Cluster) -> None:
    checkpoint_dir = Path(JOB.checkpoint_dir(local_cluster))
    first = local_cluster.submit(JOB)
    with warnings.catch_warnings():
        warnings.simplefilter("error", NothingToDoWarning)  # a run that trains is not a no-op
        assert first.wait(timeout=240) == "SUCCEEDED"
    assert [r.step for r in first.steps()] == [1, 2]
    assert first.notes() == [REHEARSAL_NOTE]
    assert repr(first) == f"Run(job_id={first.job_id!r}, rehearsal)"

    # Again: the newest checkpoint is step_2 = max_num_steps. Said at submit (the local
    # volume is readable from here) and again when the run ends without a step.
    with pytest.warns(NothingToDoWarning, match=r"holds step_2 and max_num_steps is 2.*fresh=True"):
        again = local_cluster.submit(JOB)
    with pytest.warns(NothingToDoWarning, match=r"SUCCEEDED without training a step.*fresh=True"):
        assert again.wait(timeout=240) == "SUCCEEDED"
    assert again.steps() == []
    assert repr(again) == f"Run(job_id={again.job_id!r}, rehearsal, nothing left to do)"
    assert again.notes()[1].startswith("nothing left to do: ")

    # fresh=True: the old checkpoints are moved aside (not deleted) and the run trains.
    with warnings.catch_warnings():
        warnings.simplefilter("error", NothingToDoWarning)
        fresh = local_cluster.submit(JOB, fresh=True)
        assert fresh.wait(timeout=240) == "SUCCEEDED"
    assert [r.step for r in fresh.steps()] == [1, 2]
    assert fresh.job_id != again.job_id
    aside = sorted(checkpoint_dir.parent.glob("noop.before-fresh-*"))
    assert len(aside) == 1
    assert sorted(p.name for p in aside[0].iterdir()) == ["step_1", "step_2"]
    assert sorted(p.name for p in checkpoint_dir.iterdir()) == ["step_1", "step_2"]
