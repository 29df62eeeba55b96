"""Sweeps on the session's local Ray head: evolve-built jobs, one table of outcomes."""

from __future__ import annotations

import itertools
from pathlib import Path

import attrs
import pytest

from rl_lustre import Cluster, GRPOJob, run_sweep
from rl_lustre.errors import ConfigError, PreflightError
from rl_lustre.sweep_plot import collect
from rl_lustre.sweep_result import SweepResult

BASE = GRPOJob(
    name="sweep-base",
    recipe="grpo_math_1B",
    model="Qwen/Qwen2.5-1.5B",
    dataset="OpenMathInstruct-2",
    max_num_steps=3,
    num_prompts_per_step=4,
    # 32 samples a step: a multiple of the session head's 8 GPUs times the micro batch (4).
    num_generations_per_prompt=8,
    train_global_batch_size=32,
    save_period=2,
)


def test_sweep_runs_each_job_in_its_own_directories(local_cluster: Cluster, tmp_path: Path) -> None:
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
    _check_the_queue_facts(local_cluster, result, tmp_path)


def _check_the_queue_facts(cluster: Cluster, result: SweepResult, tmp_path: Path) -> None:
    """Each run's queued time, run time and GPU-hours are its queue records' and Ray's job
    times (the head's clock); the session head is one node, so the runs held it in turn."""
    jobs = cluster._backend().jobs  # type: ignore[attr-defined]
    for o in result:
        line, info = o.timeline, jobs.info(o.job_id)
        assert line is not None
        assert line.released_at is not None
        assert (o.nodes, o.gpus_per_node, line.capacity) == (1, cluster.gpus_per_node, 1)
        assert o.submitted_at == info.start_time
        start = line.started_at if line.started_at is not None else line.released_at
        assert o.queued_seconds == pytest.approx(start - info.start_time)
        assert o.run_seconds == pytest.approx(line.released_at - start)
        assert o.gpu_hours == pytest.approx(1 * cluster.gpus_per_node * o.run_seconds / 3600)
        if o.ok:
            assert o.run_seconds >= BASE.max_num_steps * cluster.rehearsal_step_seconds
    held = sorted(
        (o.timeline.started_at, o.timeline.released_at)
        for o in result
        if o.timeline is not None and o.timeline.started_at is not None
    )
    assert len(held) >= 2
    for (_, released), (admitted, _) in itertools.pairwise(held):
        assert admitted >= released
    assert result.makespan_seconds == pytest.approx(
        max(o.timeline.released_at for o in result if o.timeline and o.timeline.released_at)
        - min(o.submitted_at for o in result if o.submitted_at is not None)
    )
    assert result.lower_bound_seconds == pytest.approx(sum(o.run_seconds or 0.0 for o in result))
    assert result.rows()[0]["nodes"] == 1
    assert str(result).splitlines()[-1] == result.summary()
    # The plot: one bar per run that held the node, on slot 0, from admission to release.
    bars = sorted((b.start, b.end) for b in collect(result).bars)
    origin = min(o.submitted_at for o in result if o.submitted_at is not None)
    assert [t for bar in bars for t in bar] == pytest.approx([t - origin for span in held for t in span])
    assert {b.slot for b in collect(result).bars} == {0}
    assert result.plot(tmp_path / "sweep.png").stat().st_size > 0


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
    jobs = [
        attrs.evolve(BASE, name=f"v{k}", keep_top_k=k, overrides={"policy.optimizer.kwargs.lr": k * 1e-6})
        for k in (1, 2)
    ]
    jobs[0].preflight(cluster)  # renders and caches the job for this cluster
    assert varied_fields(jobs) == [
        {"keep_top_k": 1, "policy.optimizer.kwargs.lr": 1e-6},
        {"keep_top_k": 2, "policy.optimizer.kwargs.lr": 2e-6},
    ]
    assert varied_fields([jobs[0], attrs.evolve(jobs[0], name="same")]) == [{}, {}]


def test_a_sweep_rerun_says_once_that_there_is_nothing_to_do_and_how_to_start_over(local_cluster: Cluster) -> None:
    import warnings

    from rl_lustre.errors import NothingToDoWarning

    jobs = [
        attrs.evolve(
            BASE, name=f"rerun-{g}", max_num_steps=2, num_generations_per_prompt=g, train_global_batch_size=4 * g
        )
        for g in (8, 16)
    ]
    first = run_sweep(local_cluster, jobs, timeout=240, poll=0.3, fresh=True)
    assert first.ok, str(first)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        again = run_sweep(local_cluster, jobs, timeout=240, poll=0.3)
    assert again.ok, str(again)
    said = [w for w in caught if issubclass(w.category, NothingToDoWarning)]
    assert len(said) == 1  # one warning for the sweep, naming each job
    assert "'rerun-8'" in str(said[0].message)
    assert "'rerun-16'" in str(said[0].message)
    assert "run_sweep(cluster, jobs, fresh=True)" in str(said[0].message)
    assert "cluster.submit" not in str(said[0].message)
    # Attributed to the line that called run_sweep: this file, not `sys:1`.
    assert said[0].filename == __file__
    assert [o.nothing_to_do for o in again] == [True, True]
    assert [o.nothing_to_do for o in first] == [False, False]
    table = str(again).splitlines()
    # No step ran, so no metric column, and no footnote for one.
    assert not any("*" in line for line in table)
    assert table[-1] == again.summary()
    assert table[-2] == (
        "rerun-8, rerun-16: nothing left to do, the newest checkpoint already reaches "
        "max_num_steps; run_sweep(cluster, jobs, fresh=True) starts over"
    )


def test_the_table_explains_only_what_it_shows() -> None:
    from rl_lustre.sweep_result import Outcome, SweepResult

    ran = Outcome(
        name="a", job_id="rl-lustre-a-1", status="SUCCEEDED", steps=2, total=2, metrics={"loss": 0.5}, synthetic=True
    )
    idle = Outcome(
        name="b", job_id="rl-lustre-b-1", status="SUCCEEDED", steps=0, total=2, synthetic=True, nothing_to_do=True
    )
    stopped = Outcome(name="c", job_id="rl-lustre-c-1", status="STOPPED", steps=1, total=2, error="stopped at step 1/2")
    both = str(SweepResult((ran, idle, stopped))).splitlines()
    assert both[0].split() == ["name", "status", "steps", "loss*", "checkpoints", "seconds", "job_id"]
    assert both[4].startswith("* synthetic:")
    assert both[5].startswith("b: nothing left to do")
    assert both[6] == "c: stopped at step 1/2"
    alone = str(SweepResult((idle,))).splitlines()
    assert not any("synthetic" in line or "*" in line for line in alone)
    assert all(line == line.rstrip() for line in both + alone)


def test_a_sweeps_ledger_is_its_runs_and_the_clusters_own_time(local_cluster: Cluster) -> None:
    from rl_lustre import wait_all
    from rl_lustre.goodput import CATEGORIES

    jobs = [
        attrs.evolve(
            BASE, name=f"ledger-{g}", max_num_steps=2, num_generations_per_prompt=g, train_global_batch_size=4 * g
        )
        for g in (8, 16)
    ]
    result = run_sweep(local_cluster, jobs, timeout=240, poll=0.3, fresh=True)
    assert result.ok, str(result)
    ledger = result.goodput()
    assert ledger.scope == "sweep"
    assert ledger is result.ledger
    assert ledger.own is not None
    assert sorted(r.name for r in ledger.runs) == sorted(o.job_id for o in result)
    for c in CATEGORIES:
        assert ledger.seconds[c] == pytest.approx(sum(r.seconds[c] for r in ledger.runs) + ledger.own.seconds[c])
    for o in result:
        assert o.goodput is not None
        assert o.goodput.name == o.job_id
        assert o.goodput.total_seconds > 0
    row = result.rows()[0]
    first = result.outcomes[0].goodput
    assert row["goodput"] == f"{first.goodput_fraction:.0%}"
    assert row["usd"] == round(first.total_usd, 2)
    assert f"GPU-hours billed: {ledger.gpu_hours():.3g}" in str(result)

    # wait_all has no cluster: the runs' own ledgers, summed, and a note saying what is missing.
    again = wait_all([local_cluster.attach(o.job_id) for o in result], names=[o.name for o in result])
    total = again.goodput()
    assert total.total_seconds == pytest.approx(sum(o.goodput.total_seconds for o in again if o.goodput))
    assert any("wait_all has no cluster" in n for n in total.notes)
