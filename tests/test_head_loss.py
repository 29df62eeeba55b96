"""A run survives its Ray head (issue 31), locally: the head's processes killed as a pod
deletion (or an OOM kill) takes them, a new head brought back as KubeRay does, the deployment's
keeper (a process outside the head) resubmitting the runs from their records on the volume.

The cluster has two real worker raylets; the rehearsal places one actor per node on them, as
NeMo-RL does. Every scenario checks the run against what an uninterrupted run leaves.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
from helpers.preemption_job import checkpoint_tree, two_worker_cluster

from rl_lustre import Cluster, GRPOJob, Run
from rl_lustre.errors import JobFailedError, NotReadyError
from rl_lustre.testing import lose_head

# Real Ray heads and worker nodes killed and started again: the slow set.
pytestmark = pytest.mark.slow

STEP = re.compile(r"={3,} Step (\d+)/(\d+) ={3,}")
STEP_SECONDS = 0.5
JOB = GRPOJob(
    name="hl",
    recipe="grpo_math_1B",
    model="Qwen/Qwen2.5-1.5B",
    max_num_steps=12,
    save_period=2,
    keep_top_k=2,
    num_prompts_per_step=4,
    num_generations_per_prompt=4,
    train_global_batch_size=16,
)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    volume = tmp_path_factory.mktemp("head-loss-volume")
    with two_worker_cluster("rll-hl", volume, step_seconds=STEP_SECONDS) as cluster:
        yield cluster


def _done(job: GRPOJob, cluster: Cluster) -> int:
    """The highest step the run's first attempt finished (0: none yet)."""
    metrics = Path(job.log_dir(cluster)) / "exp_001" / "rehearsal_metrics.jsonl"
    if not metrics.is_file():
        return 0
    return max((json.loads(line)["step"] for line in metrics.read_text().splitlines() if line.strip()), default=0)


def _wait_done(job: GRPOJob, cluster: Cluster, step: int, *, timeout: float = 180) -> None:
    """Until the run's first attempt has finished ``step``."""
    metrics = Path(job.log_dir(cluster)) / "exp_001" / "rehearsal_metrics.jsonl"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if metrics.is_file() and any(
            json.loads(line)["step"] >= step for line in metrics.read_text().splitlines() if line.strip()
        ):
            return
        time.sleep(0.02)
    raise AssertionError(f"{job.name} did not finish step {step} in {timeout}s")


def _named(name: str, **changes: Any) -> GRPOJob:
    return attrs.evolve(JOB, name=f"{name}-{uuid.uuid4().hex[:6]}", **changes)


def _queue_behind(cluster: Cluster, first: GRPOJob, second: GRPOJob) -> Run:
    """Submit ``second`` once ``first`` holds the nodes, and wait until it is QUEUED behind it.

    Submitted together, a supervisor slow to start on a loaded machine would join the queue
    after the second's (best-effort FIFO), which would then run first."""
    _wait_done(first, cluster, 1)
    behind = cluster.submit(second)
    deadline = time.monotonic() + 120
    while (status := behind.status()) != "QUEUED":
        assert status in ("PENDING", "RUNNING"), f"the second job is {status}"
        assert time.monotonic() < deadline, "the second job did not queue in 120 s"
        time.sleep(0.2)
    return behind


def test_a_run_and_a_queued_one_survive_the_loss_of_their_head(cluster: Cluster, preemption_report: list[str]) -> None:
    """The head killed mid-run (OOMKilled): the keeper resubmits both runs in their queue order;
    the first resumes from its newest checkpoint and ends as an uninterrupted run does, the
    queued one keeps its place; the handles follow them across the loss."""
    steady = _named("hl-steady", max_num_steps=24)
    assert cluster.submit(steady).wait(timeout=300) == "SUCCEEDED"
    expected = checkpoint_tree(steady.checkpoint_dir(cluster))

    main, queued = _named("hl-main", max_num_steps=24), _named("hl-queued", max_num_steps=4)
    run = cluster.submit(main)
    first_id = run.job_id
    lines: list[str] = []
    follower = threading.Thread(target=lambda: lines.extend(run.logs(follow=True)), daemon=True)
    follower.start()
    behind = _queue_behind(cluster, main, queued)
    # The head goes right after an odd step: the save of the step before is the newest.
    at = _done(main, cluster) + 1
    at += 1 - at % 2
    assert at <= 19, f"the first run reached step {at - 1} before the second queued"
    _wait_done(main, cluster, at)

    loss = lose_head(cluster, reason="OOMKilled", back_after=1.0)
    # Its head is gone: the run's records on the volume tell its story meanwhile.
    assert run.status() == "RUNNING"
    ready_at = loss.wait(timeout=180)
    assert ready_at is not None

    assert run.wait(timeout=300) == "SUCCEEDED"
    assert run.job_id != first_id
    assert run.run_id == first_id
    [restart] = run.restarts()
    assert restart.cause == "head-lost"
    assert restart.nodes[0].reason == "OOMKilled"
    assert restart.resumed_from_step == at - 1
    assert restart.first_step == at
    assert loss.at - 1 <= restart.lost_at <= loss.at + 5
    assert restart.first_step_at is not None
    # Bounded: training again within 2 minutes of the new head being ready (the rehearsal's
    # start-up, which stands for NeMo-RL's own, included here).
    back = restart.first_step_at - ready_at
    assert back < 120
    assert checkpoint_tree(main.checkpoint_dir(cluster)) == expected
    preemption_report.append(
        f"local, head lost (OOMKilled) at step {restart.last_step}: new head ready "
        f"{ready_at - loss.at:.1f}s after the loss, training again {back:.1f}s after that, "
        f"{restart.seconds_lost:.1f}s lost, resumed from step_{restart.resumed_from_step}"
    )

    # The queued run kept its place: it starts only once the first one gave its nodes back.
    assert behind.wait(timeout=300) == "SUCCEEDED"
    assert behind.run_id != behind.job_id
    timeline = behind.timeline()
    assert timeline is not None
    assert timeline.admissions
    assert run.info().end_time is not None
    assert timeline.admissions[0][0] >= run.info().end_time - 1
    assert [c.step for c in behind.checkpoints()] == [2, 4]

    # The follower went on across the loss, without the records it had already.
    follower.join(timeout=60)
    assert not follower.is_alive()
    steps = [int(m[1]) for m in STEP.finditer("\n".join(lines))]
    # Every step line up to the loss, but the last ones the lost head may not have sent.
    told = [line for line in lines if "Step" in line or "rl_lustre" in line or "REPLAY" in line]
    assert steps[: at - 2] == list(range(1, at - 1)), (at, steps, told[:80])
    assert steps[-(25 - at) :] == list(range(at, 25))

    # Attached by the run id, or by the lost submission's id, from any process.
    assert cluster.attach(first_id).job_id == run.job_id
    assert cluster.attach(first_id).restarts() == run.restarts()

    # The goodput ledger keeps the time before the loss, and counts the gap as lost.
    ledger = run.goodput()
    assert ledger.seconds["lost"] > 0
    assert ledger.seconds["training"] > 10 * STEP_SECONDS
    log = run.logs()
    assert "resubmitted after its Ray head was lost (OOMKilled)" in log


def test_a_head_lost_while_saving_resumes_from_the_save_before(cluster: Cluster) -> None:
    """The head goes while NeMo-RL writes tmp_step_N: the partial save is not resumed from."""
    job = _named("hl-save", max_num_steps=8)
    run = cluster.submit(job)
    root = Path(job.checkpoint_dir(cluster))
    deadline = time.monotonic() + 180
    while not (root / "tmp_step_4").is_dir():
        assert time.monotonic() < deadline, "no save of step 4 was seen"
        time.sleep(0.002)
    lose_head(cluster, reason="Killed", back_after=0.5)
    assert run.wait(timeout=300) == "SUCCEEDED"
    [restart] = run.restarts()
    assert restart.cause == "head-lost"
    assert restart.resumed_from_step in (2, 4)  # 4 only if its rename won the race with the kill
    assert [c.step for c in run.checkpoints()] == [6, 8]
    assert not [p.name for p in root.iterdir() if not p.name.startswith("step_")]


def test_a_keeper_restarted_half_way_through_resubmitting_starts_no_run_twice(cluster: Cluster) -> None:
    backend = cluster._backend()
    first, second = _named("hl-k1", max_num_steps=16), _named("hl-k2", max_num_steps=4)
    runs = [cluster.submit(first)]
    runs.append(_queue_behind(cluster, first, second))
    assert _done(first, cluster) < 14, "the first run neared its end before the second queued"
    heads = Path(cluster.mount_path) / "rl_lustre" / "keeper" / cluster.name / "heads.jsonl"
    seen = len(heads.read_text().splitlines())
    lose_head(cluster, back_after=0.5)
    # Kill the keeper the moment it resubmitted the first run; a new keeper takes over.
    deadline = time.monotonic() + 180
    while not any('"resubmitted"' in line for line in heads.read_text().splitlines()[seen:]):
        assert time.monotonic() < deadline, "the keeper resubmitted nothing"
        time.sleep(0.01)
    keeper = backend.keeper()
    assert keeper is not None
    os.kill(keeper.pid, 9)
    # SIGKILL is delivered asynchronously: a keeper started while the old one still lives would
    # find it running and start nothing (one keeper per head).
    deadline = time.monotonic() + 30
    while keeper.alive():
        assert time.monotonic() < deadline, "the killed keeper did not die"
        time.sleep(0.05)
    assert backend.start_keeper().pid != keeper.pid
    for run in runs:
        assert run.wait(timeout=150) == "SUCCEEDED"
    jobs = backend.jobs.list()
    for run in runs:
        mine = [j.submission_id for j in jobs if j.metadata.get("rl_lustre.run_id") == run.run_id]
        assert mine == [run.job_id]


def test_a_head_that_keeps_dying_stops_the_resubmissions_and_says_why(cluster: Cluster) -> None:
    job = _named("hl-dies", max_num_steps=400)
    run = cluster.submit(job)
    _wait_done(job, cluster, 1)
    for number in (1, 2, 3):
        lose_head(cluster, reason="OOMKilled", back_after=0.5).wait(timeout=180)
        if number < 3:  # resubmitted after the first two losses
            deadline = time.monotonic() + 180
            while len(run.restarts()) < number:
                assert time.monotonic() < deadline, f"the run was not resubmitted after loss {number}"
                time.sleep(0.5)
    with pytest.raises(JobFailedError) as failed:
        run.wait(timeout=120)
    assert "lost 3 times in 30 minutes" in str(failed.value)
    assert "OOMKilled" in str(failed.value)
    assert run.status() == "FAILED"
    assert "OOMKilled" in run.info().message
    # The keeper moved on: the next loss does not bring the run back.
    assert len(run.restarts()) == 2


def test_a_head_lost_for_good_leaves_nothing_behind_and_the_error_says_it_was_killed(
    tmp_path: Path,
) -> None:
    from rl_lustre.ray.processes import marked_pids

    cluster = Cluster.local(
        f"rll-hl-gone-{os.getpid()}",
        volume_dir=tmp_path / "volume",
        num_nodes=2,
        gpus_per_node=1,
        worker_nodes=2,
        rehearsal_step_seconds=STEP_SECONDS,
    )
    cluster.up()
    try:
        backend = cluster._backend()
        job = _named("hl-gone")
        run = cluster.submit(job)
        _wait_done(job, cluster, 2)
        lose_head(cluster, reason="Killed", back_after=None)
        assert marked_pids(backend.temp_dir)  # the worker nodes' processes outlive their head
    finally:
        cluster.down()
    assert marked_pids(backend.temp_dir) == []
    assert backend.keeper() is None
    with pytest.raises((JobFailedError, NotReadyError)) as failed:
        run.wait(timeout=60)
    message = str(failed.value)
    assert "Killed" in message
    assert "down()" not in message
    # Its story is still read from its records on the volume: status, log, queue, restarts, goodput.
    assert run.status() == "FAILED"
    assert "Loaded configuration from:" in run.logs()
    queue = run.queue()
    assert queue is not None
    assert queue.state == "running"
    assert run.restarts() == []
    ledger = run.goodput()
    assert ledger.seconds["training"] > 0
    assert any("records on the volume" in note for note in ledger.notes)
