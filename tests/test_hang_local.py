"""A real hang (issue 33, point 5): a worker frozen mid-run with SIGSTOP, every node alive.

Locally (``hang_cluster``: two real worker raylets) the rehearsal places one worker per node and
they meet in an all-reduce every step, as NeMo-RL's ranks meet in collectives, so the frozen
worker stalls them all and the driver with them. The supervisor's watchdog must find the stall
within the job's ``hang_timeout`` (+30 s), keep a bundle on the volume with a stack for every
process of the run (the frozen one's too) and a summary naming the frozen node, and rerun the
run, which then ends SUCCEEDED with the checkpoints of an uninterrupted run; a second freeze at
the same step ends it FAILED, naming the bundle. On the GKE fakes (``spot_gke``: the KubeFake's
worker pods backed by real raylets) the same freeze is found through the production GKE backend.
"""

from __future__ import annotations

import json
import textwrap
import time
import uuid
from pathlib import Path
from typing import Any

import attrs
import pytest
from click.testing import CliRunner
from helpers.hang_cluster import STEP_SECONDS
from helpers.preemption_job import JOB_ARGS, wait_done
from helpers.ray_fixtures import FAKE_HF_TOKEN
from helpers.spot_gke import SpotHead, nemo_rl_dir, spot_gke, spot_spec

from rl_lustre import Cluster, GRPOJob
from rl_lustre.cli._app import cli
from rl_lustre.errors import JobFailedError
from rl_lustre.oncluster import diagnostics as d
from rl_lustre.testing import Freeze, freeze

# Real worker raylets, frozen and recovered: the slow set (nox -s tests-slow).
pytestmark = pytest.mark.slow

HANG_TIMEOUT = 6.0
JOB = GRPOJob(**{**JOB_ARGS, "name": "hang"}, hang_timeout=HANG_TIMEOUT, startup_timeout=60)


def _bundle(path: str) -> tuple[dict[str, Any], str]:
    root = Path(path)
    return json.loads((root / d.BUNDLE_JSON).read_text()), (root / d.SUMMARY).read_text()


def _freeze_new_workers(cluster: Cluster, before: Freeze, timeout: float = 120) -> Freeze:
    """Freeze the rerun's workers as soon as they exist (before its first step's all-reduce)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            stuck = freeze(cluster, nodes=1)
        except ValueError:  # the rerun has not placed its workers yet
            time.sleep(0.05)
            continue
        if not set(stuck.pids) & set(before.pids):
            return stuck
        stuck.thaw()  # the first attempt's, not yet ended
        time.sleep(0.05)
    raise AssertionError(f"the rerun placed no new workers in {timeout}s")


def test_a_frozen_worker_is_found_its_evidence_kept_and_the_run_resumed_to_its_end(
    hang_cluster: Cluster, tmp_path: Path
) -> None:
    job = attrs.evolve(JOB, name=f"hang-one-{uuid.uuid4().hex[:6]}")
    run = hang_cluster.submit(job)
    wait_done(job, hang_cluster, 5)
    stuck = freeze(hang_cluster, nodes=1)
    try:
        assert run.wait(timeout=300) == "SUCCEEDED"
    finally:
        stuck.thaw()

    [restart] = run.restarts()
    assert restart.cause == "hung"
    assert restart.bundle is not None
    assert restart.step is not None
    assert restart.resumed_from_step in (restart.step - 1, restart.step - 2)
    record, summary = _bundle(restart.bundle)
    # Found within the job's timeout and 30 s of the freeze.
    assert record["detected_at"] - stuck.at <= HANG_TIMEOUT + 30
    assert record["silence"] >= HANG_TIMEOUT
    # A stack for every process of the run, the frozen worker's too, on the volume.
    places = record["processes"]
    assert {p["role"] for p in places} >= {"driver", "_NodeWorker"}
    assert all(p["at"] is not None for p in places), [p for p in places if p["at"] is None]
    frozen_node = stuck.nodes[0]
    for pid in stuck.pids:
        [stack] = (Path(restart.bundle) / d.STACKS / frozen_node).glob(f"{pid}-*.txt")
        assert f"Process {pid}" in stack.read_text()
    # The summary names the frozen node: its worker could not run at all.
    stopped = [line for line in summary.splitlines() if "STOPPED (SIGSTOP)" in line]
    assert stopped
    assert all(f"on node {frozen_node}" in line for line in stopped)
    assert f"stalled at step {restart.step}" in summary
    # The other rank's stand-in flight recorder dumped when its pipe was written to.
    assert record["nccl_dumps"]
    assert "all_reduce" in (Path(restart.bundle) / d.NCCL / record["nccl_dumps"][0]).read_text()
    # Ray's side: its status, the run's placement groups, the logs of its workers.
    assert "Resources" in (Path(restart.bundle) / d.RAY / "status.txt").read_text()
    assert json.loads((Path(restart.bundle) / d.RAY / "placement_groups.json").read_text())
    assert list((Path(restart.bundle) / d.LOGS / frozen_node).glob("_NodeWorker-*.err"))
    # No secret in the bundle: the head holds HF_TOKEN, as a GKE head gets it from the Secret.
    for f in Path(restart.bundle).rglob("*"):
        if f.is_file():
            assert FAKE_HF_TOKEN not in f.read_text(errors="replace"), f

    # Then the run went on as if nothing had happened: keep_top_k=2 of saves 2, 4, 6, 8, 10.
    checkpoints = run.checkpoints()
    assert [c.step for c in checkpoints] == [8, 10]
    assert [c.training_info["consumed_samples"] for c in checkpoints] == [8 * 4, 10 * 4]
    assert not [p.name for p in Path(job.checkpoint_dir(hang_cluster)).iterdir() if not p.name.startswith("step_")]
    # What it cost: the silence is 'hung' in the ledger.
    assert run.goodput().seconds["hung"] > 0

    # run.diagnostics() and rl-lustre diagnose read the bundle back.
    [found] = run.diagnostics()
    assert (found.path, found.step) == (restart.bundle, restart.step)
    assert any(frozen_node in line for line in found.summary)
    script = tmp_path / "deploy.py"
    spec = {"volume_dir": hang_cluster.mount_path, "num_nodes": 2, "gpus_per_node": 1, "worker_nodes": 2}
    script.write_text(
        textwrap.dedent(f"""
            from rl_lustre import Cluster
            cluster = Cluster.local({hang_cluster.name!r}, rehearsal_step_seconds={STEP_SECONDS!r},
                                    secrets=("HF_TOKEN",), **{spec!r})
        """)
    )
    shown = CliRunner().invoke(cli, ["diagnose", f"{script}:cluster", run.job_id], catch_exceptions=False)
    assert shown.exit_code == 0, shown.output
    assert f"stalled at step {restart.step}" in shown.output
    assert f"on node {frozen_node}" in shown.output
    assert f"stacks/{frozen_node}/" in shown.output


def test_a_second_freeze_at_the_same_step_ends_the_run_failed_naming_the_bundle(hang_cluster: Cluster) -> None:
    # A rerun's first step has the start-up allowance: a short one, for the second stall.
    job = attrs.evolve(JOB, name=f"hang-two-{uuid.uuid4().hex[:6]}", startup_timeout=HANG_TIMEOUT + 2)
    run = hang_cluster.submit(job)
    wait_done(job, hang_cluster, 2)
    first = freeze(hang_cluster, nodes=1)
    try:
        deadline = time.monotonic() + 120
        while not run.restarts():
            assert time.monotonic() < deadline, run.logs()[-3000:]
            time.sleep(0.2)
        [restart] = run.restarts()
        assert restart.step is not None
        assert restart.resumed_from_step is not None
        # The rerun resumes from the newest checkpoint; freeze it again at the step the first stalled at.
        if restart.step > restart.resumed_from_step + 1:
            wait_done(job, hang_cluster, restart.step - 1, attempt=2)
            second = freeze(hang_cluster, nodes=1)
        else:
            second = _freeze_new_workers(hang_cluster, first)
        try:
            with pytest.raises(JobFailedError) as failed:
                run.wait(timeout=300)
        finally:
            second.thaw()
    finally:
        first.thaw()
    assert failed.value.status == "FAILED"
    bundles = [b.path for b in run.diagnostics()]
    assert len(bundles) == 2
    assert bundles[0] == restart.bundle
    assert f"stalled again at step {restart.step}" in str(failed.value)
    assert bundles[1] in str(failed.value)
    assert len(run.restarts()) == 1


def test_on_the_gke_fakes_a_frozen_worker_is_found_and_the_run_resumed(spot_head: SpotHead, tmp_path: Path) -> None:
    spec = spot_spec("rl-hang", tmp_path, num_nodes=1)
    job = GRPOJob(
        **{
            **JOB_ARGS,
            "name": "spot-hang",
            "num_generations_per_prompt": 8,
            "train_global_batch_size": 32,
            "nemo_rl_dir": str(nemo_rl_dir(tmp_path, 0.5)),
        },
        hang_timeout=HANG_TIMEOUT,
        startup_timeout=60,
    )
    with spot_gke(spot_head, spec) as (cluster, _kube):
        run = cluster.submit(job)
        wait_done(job, cluster, 5)
        stuck = freeze(cluster, nodes=1)
        try:
            assert run.wait(timeout=300) == "SUCCEEDED"
        finally:
            stuck.thaw()
        [restart] = run.restarts()
        assert restart.cause == "hung"
        assert restart.bundle is not None
        record, summary = _bundle(restart.bundle)
        assert f"on node {stuck.nodes[0]}" in summary
        assert "STOPPED (SIGSTOP)" in summary
        # Not in a pod here: the Kubernetes events are named as not collected, and why.
        assert "not in a Kubernetes pod" in record["errors"]["kubernetes-events"]
        assert [c.step for c in run.checkpoints()] == [8, 10]
