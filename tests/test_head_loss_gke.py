"""A run survives its Ray head on the GKE fakes (issue 31, point 6): the production GKE backend
deploys the keeper as its own Deployment (least RBAC), the head pod goes as GKE and KubeRay
make it go (an OOM kill restarting the container in place), a new real Ray head serves the pod,
and the keeper, a real process of the on-cluster package, resubmits the runs in their queue
order. ``down()`` stops the keeper first, marks what is left in flight, and leaves nothing."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from helpers.spot_gke import SpotHead, nemo_rl_dir, spot_gke, spot_spec

from rl_lustre import Cluster, GRPOJob, Run, naming
from rl_lustre.oncluster import rundir
from rl_lustre.oncluster.runview import RunView
from rl_lustre.testing import FakeGKE, lose_head

pytestmark = pytest.mark.slow

GKE = {"name": "hlg", "project": "my-project", "region": "us-east1", "zone": "us-east1-b", "num_nodes": 1}
JOB = {
    "recipe": "grpo_math_1B",
    "model": "Qwen/Qwen2.5-1.5B",
    "num_prompts_per_step": 4,
    "num_generations_per_prompt": 8,
    "train_global_batch_size": 32,
    "save_period": 2,
    "keep_top_k": 2,
}


def _saved(run: Run, checkpoint: Path, *, timeout: float) -> None:
    """Until the run saved ``checkpoint``: a guard against a hung run, not a speed target. It
    fails at once when the run ended, and at ``timeout`` with the run's status and log tail
    (what a loaded machine's slow start-up and a stuck run look like tell apart there)."""
    deadline = time.monotonic() + timeout
    checked = time.monotonic()
    while not checkpoint.is_dir():
        now = time.monotonic()
        if now >= deadline or now - checked > 5.0:
            checked, status = now, run.status()
            if now >= deadline or status in ("SUCCEEDED", "FAILED", "STOPPED"):
                tail = "\n".join(run.logs().splitlines()[-30:])
                raise AssertionError(
                    f"no {checkpoint.name} after {now - deadline + timeout:.0f}s: run {status}:\n{tail}"
                )
        time.sleep(0.05)


def test_on_the_gke_fakes_the_keeper_brings_back_the_runs_a_lost_head_took() -> None:
    with FakeGKE(step_seconds=0.4) as gke:
        assert gke.gcp is not None
        gke.gcp.seed_bucket("hlg-results")
        cluster = gke.cluster(Cluster(**GKE, results="gs://hlg-results/rl"))
        main = gke.job(GRPOJob(name="main", max_num_steps=100, **JOB))
        queued = gke.job(GRPOJob(name="queued", max_num_steps=2, **JOB))
        kube = gke.kube
        assert kube is not None
        with cluster:
            keeper = kube.get("Deployment", naming.keeper_name(cluster))
            assert keeper is not None
            assert keeper["status"]["availableReplicas"] == 1
            assert keeper["spec"]["strategy"] == {"type": "Recreate"}
            role = kube.get("Role", naming.keeper_name(cluster))
            assert role is not None
            assert role["rules"] == [
                {"apiGroups": [""], "resources": ["pods", "events"], "verbs": ["get", "list", "watch"]}
            ]
            account = kube.get("ServiceAccount", naming.keeper_name(cluster))
            assert account is not None
            assert account["automountServiceAccountToken"] is False

            run = cluster.submit(main)
            first = run.job_id
            # The second job once the first holds its nodes: submitted together, a supervisor slow to
            # start on a busy machine joins the queue after the second's (best-effort FIFO by arrival).
            deadline = time.monotonic() + 120
            while (state := run.queue()) is None or state.state != "running":
                assert time.monotonic() < deadline, f"the first run did not get its nodes: {run.status()}"
                assert run.status() in ("PENDING", "QUEUED", "RUNNING"), f"the first run ended: {run.status()}"
                time.sleep(0.2)
            behind = cluster.submit(queued)
            # The queued job's supervisor starts (PENDING, then RUNNING until it joins the queue) and
            # queues behind the first run; on a busy machine that takes seconds: the run is long enough.
            deadline = time.monotonic() + 120
            while (status := behind.status()) != "QUEUED":
                assert time.monotonic() < deadline, f"the second job did not queue: {status}, the first {run.status()}"
                assert run.status() in ("PENDING", "RUNNING"), f"the first run ended first: {run.status()}"
                time.sleep(0.2)
            saves = Path(main.checkpoint_dir(cluster))
            if not any(saves.glob("step_*")):
                _saved(run, saves / "step_2", timeout=180)
            saved = max(int(p.name.removeprefix("step_")) for p in saves.glob("step_*"))
            assert run.status() == "RUNNING"
            [head] = [p for p in kube.objects("Pod") if p["metadata"]["labels"].get("ray.io/node-type") == "head"]

            loss = lose_head(cluster, reason="OOMKilled", back_after=1.0)
            loss.wait(timeout=180)
            assert run.wait(timeout=300) == "SUCCEEDED"
            assert run.job_id != first
            [restart] = run.restarts()
            assert restart.cause == "head-lost"
            # The keeper read it from the head pod's status, through its own service account.
            assert restart.nodes[0].reason == "OOMKilled"
            assert restart.nodes[0].name == head["metadata"]["name"]
            # From the newest save when the head went (the one seen, or one finished while it went).
            assert restart.resumed_from_step in (saved, saved + 2)
            assert [c.step for c in run.checkpoints()] == [98, 100]
            pod = kube.get("Pod", head["metadata"]["name"])
            assert pod is not None
            assert pod["status"]["containerStatuses"][0]["restartCount"] == 1

            assert behind.wait(timeout=300) == "SUCCEEDED"
            timeline = behind.timeline()
            assert timeline is not None
            assert timeline.admissions[0][0] >= (run.info().end_time or 0) - 1

            # A third run is in flight when down() comes: it is stopped by teardown, not resubmitted later.
            last = cluster.submit(gke.job(GRPOJob(name="last", max_num_steps=400, **JOB)))
            while last.status() != "RUNNING":
                time.sleep(0.2)
        # Issue 32: every run's directory went to the bucket before the volume went, the third
        # run's marked stopped by teardown.
        exported = {n.split("/")[1] for n in gke.gcp.bucket_objects("hlg-results") if n.endswith("/journal.jsonl")}
        assert exported == {run.run_id, behind.run_id, last.run_id}
        stopped = gke.gcp.bucket_content("hlg-results", f"rl/{last.run_id}/{rundir.STOPPED}")
        stopped = json.loads(stopped) if isinstance(stopped, (bytes, str)) else stopped
        assert stopped["by"] == "teardown"
        assert gke.leftovers() == {"gcp": [], "kube": []}


def test_on_the_gke_fakes_with_worker_raylets_a_head_lost_for_good_leaves_no_process(
    spot_head: SpotHead, tmp_path: Path
) -> None:
    """Point 7 on the fakes: the head pod deleted and never back (the cluster torn down after
    it): the worker pods' raylets and their agents go with the cluster, and the run's error
    says its head was lost, not that down() stopped it."""
    from rl_lustre.errors import JobFailedError, NotReadyError
    from rl_lustre.ray.processes import marked_pids

    spec = spot_spec("rl-hlg", tmp_path, num_nodes=1)
    job = GRPOJob(
        name="gone",
        max_num_steps=40,
        nemo_rl_dir=str(nemo_rl_dir(tmp_path, 0.5)),
        **{**JOB, "num_generations_per_prompt": 8, "train_global_batch_size": 32},
    )
    try:
        with spot_gke(spot_head, spec) as (cluster, _kube):
            run = cluster.submit(job)
            _saved(run, Path(job.checkpoint_dir(cluster)) / "step_2", timeout=180)
            assert spot_head.raylets
            lose_head(cluster, reason="Evicted", back_after=None)
            # The keeper looks, finds no head, and records why it does not answer (the pod's eviction).
            heads = Path(cluster.mount_path) / "rl_lustre" / "keeper" / cluster.name / "heads.jsonl"
            deadline = time.monotonic() + 60
            while not any('"unanswered"' in line for line in heads.read_text().splitlines()):
                assert time.monotonic() < deadline, "the keeper did not record that the head does not answer"
                time.sleep(0.2)
            # Down here, not at the block's end: the run is asked about while the fakes still answer
            # (a torn-down cluster's Google APIs) and $RAY_AUTH_TOKEN is still set, as in the user's process.
            cluster.down()
            view = RunView(Path(cluster.mount_path) / "rl_lustre" / "runs" / run.run_id)
            assert view.stopped is not None
            assert view.stopped["by"] == "teardown"
            with pytest.raises((JobFailedError, NotReadyError)) as failed:
                run.wait(timeout=60)
            assert "down()" not in str(failed.value)
            assert "Evicted" in str(failed.value)
        # The worker pods' raylets go with the fakes' pods (KubeFake stops them on leaving).
        assert marked_pids(spot_head.head.temp_dir) == []
    finally:
        if not spot_head.head.alive():
            spot_head.start_head()  # the module's head, back for whatever runs next
