"""Sweeps on the session's local Ray head: evolve-built jobs, one table of outcomes."""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest

from rl_lustre import Cluster, GRPOJob, run_sweep
from rl_lustre.errors import ConfigError, PreflightError

BASE = GRPOJob(
    name="sweep-base",
    recipe="grpo_math_1B",
    model="Qwen/Qwen2.5-1.5B",
    dataset="OpenMathInstruct-2",
    max_num_steps=3,
    num_prompts_per_step=4,
    num_generations_per_prompt=2,
    train_global_batch_size=8,
    save_period=2,
)


def test_sweep_runs_each_job_in_its_own_directories(local_cluster: Cluster) -> None:
    jobs = [attrs.evolve(BASE, name=f"sweep-k{k}", keep_top_k=k) for k in (1, 2)]
    # One run that fails: its checkpoint directory cannot be created.
    broken = attrs.evolve(BASE, name="sweep-broken")
    Path(broken.checkpoint_dir(local_cluster)).parent.mkdir(parents=True, exist_ok=True)
    Path(broken.checkpoint_dir(local_cluster)).write_text("not a directory")

    result = run_sweep(local_cluster, [*jobs, broken], timeout=240, poll=0.3)

    by_name = {o.name: o for o in result}
    assert list(by_name) == ["sweep-k1", "sweep-k2", "sweep-broken"]
    assert not result.ok
    # Saves at step 2 and at the last step (3); keep_top_k decides how many stay.
    assert by_name["sweep-k1"].status == "SUCCEEDED"
    assert by_name["sweep-k1"].checkpoints == (3,)
    assert by_name["sweep-k2"].checkpoints == (2, 3)
    assert (by_name["sweep-k2"].steps, by_name["sweep-k2"].total) == (3, 3)
    assert "loss" in by_name["sweep-k2"].metrics
    assert by_name["sweep-broken"].status == "FAILED"
    broken_error = by_name["sweep-broken"].error
    assert broken_error is not None
    assert by_name["sweep-broken"].job_id in broken_error
    for job in jobs:
        steps = sorted(p.name for p in Path(job.checkpoint_dir(local_cluster)).iterdir())
        assert steps == [f"step_{s}" for s in by_name[job.name].checkpoints]
    # The swept field is a column; rehearsal metrics are marked synthetic.
    assert [o.varied for o in result] == [{"keep_top_k": 1}, {"keep_top_k": 2}, {"keep_top_k": 2}]
    assert by_name["sweep-k2"].synthetic
    table = str(result)
    header = table.splitlines()[0].split()
    assert header[:4] == ["name", "keep_top_k", "status", "steps"]
    assert "loss*" in header
    assert "* synthetic: rehearsal runs train no model" in table
    assert result.rows()[0]["keep_top_k"] == 1
    assert result.rows()[0]["synthetic"] is True
    assert "sweep-broken: job" in table
    assert result.rows()[1]["checkpoints"] == "2,3"


def test_sweep_refuses_shared_names_before_submitting(local_cluster: Cluster) -> None:
    with pytest.raises(ConfigError, match="unique"):
        run_sweep(local_cluster, [attrs.evolve(BASE, name="twin"), attrs.evolve(BASE, name="twin")])
    bad = attrs.evolve(BASE, name="bad-batch", train_global_batch_size=7)
    with pytest.raises(PreflightError, match="train_global_batch_size"):
        run_sweep(local_cluster, [attrs.evolve(BASE, name="fine"), bad])
    # Nothing of either sweep reached the cluster.
    assert not Path(attrs.evolve(BASE, name="fine").log_dir(local_cluster)).exists()


def test_the_varied_fields_are_what_the_jobs_set_not_what_they_cached(tmp_path: Path) -> None:
    from rl_lustre.sweep import varied_fields

    cluster = Cluster.local("varied", volume_dir=tmp_path)
    jobs = [attrs.evolve(BASE, name=f"v{k}", keep_top_k=k, overrides={"policy.optimizer.kwargs.lr": k * 1e-6})
            for k in (1, 2)]
    jobs[0].preflight(cluster)  # renders and caches the job for this cluster
    assert varied_fields(jobs) == [{"keep_top_k": 1, "policy.optimizer.kwargs.lr": 1e-6},
                                   {"keep_top_k": 2, "policy.optimizer.kwargs.lr": 2e-6}]
    assert varied_fields([jobs[0], attrs.evolve(jobs[0], name="same")]) == [{}, {}]
