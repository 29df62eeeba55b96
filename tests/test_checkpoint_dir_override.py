"""An override of ``checkpointing.checkpoint_dir`` (or ``logger.log_dir``) moves the run's
directory for everyone: the job's own answer, the submission, the supervisor that
resumes after lost nodes, ``fresh=True``, ``run.checkpoints()`` and resuming."""

from __future__ import annotations

import shlex
import warnings
from pathlib import Path

import pytest
from helpers.specs import GKE

from rl_lustre import Cluster, GRPOJob
from rl_lustre.backends.submission import prepare
from rl_lustre.errors import NothingToDoWarning
from rl_lustre.oncluster import jobargs

CLUSTER = Cluster(**GKE)
ELSEWHERE = "/lustre/elsewhere/x"


def _supervisor_args(entrypoint: str) -> tuple[list[str], object]:
    """The words before the supervisor and the supervisor's parsed options, from a job's entrypoint."""
    words = shlex.split(entrypoint)
    at = words.index("rl_lustre_oncluster.supervisor")
    return words[: at - 2], jobargs.parser().parse_args(words[at + 1 :])


@pytest.mark.parametrize("key", ["checkpointing.checkpoint_dir", "++checkpointing.checkpoint_dir"])
def test_the_overridden_checkpoint_dir_is_the_one_submitted_resumed_from_and_moved_aside(key: str) -> None:
    job = GRPOJob(name="x", overrides={key: ELSEWHERE})
    assert job.checkpoint_dir(CLUSTER) == ELSEWHERE
    assert job.resolve(CLUSTER).override_args.count(f"{key}={ELSEWHERE}") == 1

    submission = prepare(CLUSTER, job)
    assert submission.checkpoint_dir == ELSEWHERE
    assert submission.metadata["rl_lustre.checkpoint_dir"] == ELSEWHERE
    before, args = _supervisor_args(submission.entrypoint)
    assert args.checkpoint_dir == ELSEWHERE  # type: ignore[attr-defined]
    assert before == []

    fresh = prepare(CLUSTER, job, fresh=True)
    before, args = _supervisor_args(fresh.entrypoint)
    assert args.checkpoint_dir == ELSEWHERE  # type: ignore[attr-defined]
    moved = " ".join(before)
    assert f"mv {ELSEWHERE} {ELSEWHERE}.before-fresh-" in moved
    assert "/lustre/checkpoints/x" not in fresh.entrypoint


def test_an_interpolated_checkpoint_dir_is_the_resolved_path() -> None:
    job = GRPOJob(
        name="x",
        interpolate_overrides=True,
        overrides={
            "logger.log_dir": "/lustre/runs/x/logs",
            "checkpointing.checkpoint_dir": "${logger.log_dir}/../ckpt",
        },
    )
    assert job.log_dir(CLUSTER) == "/lustre/runs/x/logs"
    assert job.checkpoint_dir(CLUSTER) == "/lustre/runs/x/logs/../ckpt"
    assert prepare(CLUSTER, job).checkpoint_dir == "/lustre/runs/x/logs/../ckpt"


def test_without_an_override_the_directories_are_under_the_roots() -> None:
    job = GRPOJob(name="x", checkpoint_root="ck", log_root="lg")
    assert (job.checkpoint_dir(CLUSTER), job.log_dir(CLUSTER)) == ("/lustre/ck/x", "/lustre/lg/x")
    assert prepare(CLUSTER, job).checkpoint_dir == "/lustre/ck/x"


@pytest.mark.parametrize(
    "job",
    [GRPOJob(name="x", checkpointing=False), GRPOJob(name="x", overrides={"checkpointing.enabled": False})],
    ids=["field", "override"],
)
def test_checkpointing_turned_off_submits_no_checkpoint_dir_but_still_resumes(job: GRPOJob) -> None:
    submission = prepare(CLUSTER, job, fresh=True)
    assert submission.checkpoint_dir is None
    assert "before-fresh" not in submission.entrypoint
    # NeMo-RL resumes from that directory even when it does not save: the supervisor reads it.
    args = _supervisor_args(submission.entrypoint)[1]
    assert args.checkpoint_dir == "/lustre/checkpoints/x"  # type: ignore[attr-defined]


@pytest.mark.slow
def test_a_run_with_an_overridden_checkpoint_dir_lists_resumes_and_starts_over_there(local_cluster: Cluster) -> None:
    mount = Path(local_cluster.mount_path)
    elsewhere = mount / "elsewhere" / "moved"
    job = GRPOJob(
        name="moved",
        recipe="grpo_math_1B",
        model="Qwen/Qwen2.5-1.5B",
        dataset="OpenMathInstruct-2",
        max_num_steps=2,
        num_prompts_per_step=4,
        num_generations_per_prompt=8,
        train_global_batch_size=32,
        save_period=1,
        overrides={"checkpointing.checkpoint_dir": str(elsewhere), "logger.log_dir": str(mount / "elsewhere" / "logs")},
    )
    default = mount / "checkpoints" / "moved"
    first = local_cluster.submit(job)
    assert first.wait(timeout=240) == "SUCCEEDED"
    assert [(c.step, c.path) for c in first.checkpoints()] == [(1, elsewhere / "step_1"), (2, elsewhere / "step_2")]
    assert _supervisor_args(first.info().entrypoint)[1].checkpoint_dir == str(elsewhere)  # type: ignore[attr-defined]
    assert list((mount / "elsewhere" / "logs").glob("exp_*")), "logger.log_dir is where the override put it"
    assert not default.exists()

    # Resuming looks there: step_2 = max_num_steps, so there is nothing left to do.
    with pytest.warns(NothingToDoWarning, match=r"holds step_2 and max_num_steps is 2"):
        again = local_cluster.submit(job)
    with pytest.warns(NothingToDoWarning):
        assert again.wait(timeout=240) == "SUCCEEDED"
    assert again.steps() == []

    # fresh=True moves that directory aside, and the run trains again there.
    with warnings.catch_warnings():
        warnings.simplefilter("error", NothingToDoWarning)
        fresh = local_cluster.submit(job, fresh=True)
        assert fresh.wait(timeout=240) == "SUCCEEDED"
    assert [r.step for r in fresh.steps()] == [1, 2]
    aside = sorted(elsewhere.parent.glob("moved.before-fresh-*"))
    assert len(aside) == 1
    assert sorted(p.name for p in aside[0].iterdir()) == ["step_1", "step_2"]
    assert [c.path for c in fresh.checkpoints()] == [elsewhere / "step_1", elsewhere / "step_2"]
    assert not default.exists()


JOB_X = GRPOJob(name="x", recipe="grpo_math_1B", max_num_steps=4)


@pytest.mark.parametrize(
    ("cluster", "mount"),
    [(CLUSTER, "/lustre"), (Cluster.local("demo", volume_dir="/tmp/rl-demo-vol"), "/tmp/rl-demo-vol")],
)
def test_the_run_has_an_id_and_a_directory_on_the_volume_that_the_supervisor_is_told(
    cluster: Cluster, mount: str
) -> None:
    submission = prepare(cluster, JOB_X)
    run_id = submission.metadata["rl_lustre.run_id"]
    assert run_id == submission.base_id
    assert submission.metadata["rl_lustre.run_dir"] == f"{mount}/rl_lustre/runs/{run_id}"
    _, args = _supervisor_args(submission.entrypoint)
    assert args.run_dir == f"{mount}/rl_lustre/runs/{run_id}"  # type: ignore[attr-defined]
    # The same job submitted again (later, or after a head loss) is the same run.
    assert prepare(cluster, JOB_X, now=0).base_id == run_id
    # Starting over is a new run, in a directory of its own.
    fresh = prepare(cluster, JOB_X, fresh=True)
    assert fresh.base_id != run_id
    assert _supervisor_args(fresh.entrypoint.split(" && ", 1)[1])[1].run_dir.endswith(fresh.base_id)  # type: ignore[attr-defined]
