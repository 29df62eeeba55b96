"""After a preemption whose Spot capacity never comes back, a run resumes on the next kind of
the capacity policy, flex-start, which the deployment's ComputeClass brings (issues 21 and
34, point 2), end to end on the GKE fakes: the production GKE backend, KubeFake's cluster
autoscaler following the class, every worker pod (the flex-start pool's too) backed by a
real raylet, and the recovery supervisor on a real Ray head.

With nothing after Spot in the policy (``capacity=("spot",)``) the same loss ends the run
FAILED once the job's ``capacity_timeout`` has passed.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers.preemption_job import JOB_ARGS, STEP, STEP_SECONDS, attempts_in, wait_done
from helpers.spot_gke import SpotHead, nemo_rl_dir, spot_gke, spot_spec

from rl_lustre import GRPOJob
from rl_lustre.catalog import GKE_NODEPOOL_LABEL, GKE_SPOT_LABEL
from rl_lustre.errors import JobFailedError
from rl_lustre.kube.readiness import seconds
from rl_lustre.nemo_rl.deadline import DEADLINE_KEY, SAVE_MARGIN_SECONDS, parse_save_by
from rl_lustre.oncluster.lifetimes import ARRIVAL_ALLOWANCE
from rl_lustre.oncluster.records import read_journal
from rl_lustre.spec.capacity import FLEX_START_MAX_RUN_SECONDS
from rl_lustre.testing import FakeGCP, preempt

# Real Ray worker nodes started, killed and replaced: the slow set (nox -s tests-slow).
pytestmark = pytest.mark.slow

FLEX_GRANT = 4.0
BASE = {**JOB_ARGS, "num_generations_per_prompt": 16, "train_global_batch_size": 64}


def _job(name: str, tmp_path: Path, capacity_timeout: float) -> GRPOJob:
    return GRPOJob(
        **{
            **BASE,
            "name": name,
            "capacity_timeout": capacity_timeout,
            "nemo_rl_dir": str(nemo_rl_dir(tmp_path, STEP_SECONDS)),
        }
    )


FLEX_POOL = "gpu-flex-b"  # the class's flex-start rule in the cluster's zone


def test_on_the_gke_fakes_a_run_whose_spot_nodes_never_come_back_resumes_on_flex_start_by_the_class(
    spot_head: SpotHead, tmp_path: Path, preemption_report: list[str]
) -> None:
    spec = {**spot_spec("rl-standby", tmp_path, num_nodes=2), "capacity": ("spot", "flex-start")}
    # Far more than the standby pool's scale-up takes here, far less than the test's patience.
    job = _job("standby", tmp_path, capacity_timeout=150)

    fakes: list[FakeGCP] = []

    def flex_start_in_seconds(gcp: FakeGCP) -> None:
        # A flex-start request is granted a few seconds after the autoscaler asks (not at once).
        gcp.stock.flex_start(after=FLEX_GRANT)
        fakes.append(gcp)

    with spot_gke(spot_head, spec, flex_start_in_seconds) as (cluster, kube):
        assert [r.key for r in cluster.plan() if r.key.startswith("gpu-")] == ["gpu-pool"]
        assert [r["nodepools"] for r in kube.objects("ComputeClass")[0]["spec"]["priorities"]][:2] == [
            ["gpu-pool"],
            [FLEX_POOL],
        ]
        pools = {n["metadata"]["name"]: n["metadata"]["labels"] for n in kube.objects("Node")}
        spot_nodes = {name for name, labels in pools.items() if labels.get(GKE_NODEPOOL_LABEL) == "gpu-pool"}
        assert len(spot_nodes) == 2
        assert not [n for n, labels in pools.items() if labels.get(GKE_NODEPOOL_LABEL) == FLEX_POOL]

        run = cluster.submit(job)
        wait_done(job, cluster, 5)
        # Both Spot nodes go, and Spot capacity never comes back.
        gone = preempt(cluster, nodes=2, back_after=None)
        assert run.wait(timeout=300) == "SUCCEEDED"

        nodes = {n["metadata"]["name"]: n["metadata"]["labels"] for n in kube.objects("Node")}
        standby = {name for name, labels in nodes.items() if labels.get(GKE_NODEPOOL_LABEL) == FLEX_POOL}
        assert len(standby) == 2
        assert not any(GKE_SPOT_LABEL in nodes[n] for n in standby)
        assert not spot_nodes & set(nodes), "the Spot nodes were preempted for good"

        [restart] = run.restarts()
        # The recovery names the Spot nodes lost (Ray's node names are the Kubernetes nodes').
        assert {n.name for n in restart.nodes} == spot_nodes
        assert restart.resumed_from_step == 4
        assert restart.first_step == 5
        assert restart.seconds_lost is not None
        assert restart.capacity_seconds is not None
        assert restart.capacity_seconds < job.capacity_timeout
        # The same checkpoints and steps as an uninterrupted run, the rerun from step_4.
        assert [c.step for c in run.checkpoints()] == [8, 10]
        log = run.logs()
        assert attempts_in(log) == 2
        assert [int(m[1]) for m in STEP.finditer(log)][-6:] == [5, 6, 7, 8, 9, 10]
        assert f"resuming from {job.checkpoint_dir(cluster)}/step_4" in log
        # The resumed attempt's placement groups held the standby pool's nodes.
        journal = read_journal(run.logs(records=True))
        held = {r["attempt"]: {n["name"] for n in r["nodes"]} for r in journal if r["event"] == "held"}
        assert held[1] == spot_nodes
        assert held[2] == standby
        # The recovery's wait ended once the standby nodes had come (granted by flex-start, not Spot).
        [back] = [r for r in journal if r["event"] == "capacity_back"]
        assert "timeout" not in back
        came = [
            seconds(n["metadata"]["creationTimestamp"])
            for n in kube.objects("Node")
            if n["metadata"]["name"] in standby
        ]
        assert all(t is not None and t <= back["at"] for t in came), (came, back)
        assert {e.pool for e in fakes[0].stock.events if e.kind == "flex-start" and e.what == "granted"} == {FLEX_POOL}
        # The rerun on the standby nodes was told to save before they go (point 4): their
        # max_run_duration after they came, never later (the supervisor counts from earlier).
        deadlines = {r["attempt"]: r for r in journal if r["event"] == "deadline"}
        assert set(deadlines) == {2}, deadlines  # attempt 1 ran on Spot nodes: no end
        assert set(deadlines[2]["nodes"]) == standby
        assert min(came) + FLEX_START_MAX_RUN_SECONDS - ARRIVAL_ALLOWANCE - 120 <= deadlines[2]["end"]
        assert deadlines[2]["end"] <= min(came) + FLEX_START_MAX_RUN_SECONDS
        first, second = re.findall(r"^Overrides: (.*)$", log, re.M)
        assert DEADLINE_KEY not in first
        [value] = re.findall(re.escape(DEADLINE_KEY) + r"=([\d:]+)", second)
        [attempt_2] = [r["at"] for r in journal if r["event"] == "attempt" and r["attempt"] == 2]
        assert parse_save_by(value) == pytest.approx(deadlines[2]["end"] - SAVE_MARGIN_SECONDS - attempt_2, abs=5)
        # The goodput ledger bills the recovery to the standby (flex-start) nodes, as lost time.
        ledger = run.goodput()
        [recovery] = ledger.restarts
        assert recovery.resume_step == 4
        assert ledger.seconds["lost"] > 0
        kinds = {n.node.split("#")[0]: n.kind for n in ledger.nodes}
        assert {kinds[n] for n in spot_nodes} == {"spot"}
        assert {kinds[n] for n in standby} == {"flex-start"}
        preemption_report.append(
            f"fake GKE, 2 Spot nodes lost for good, resumed on flex-start by the ComputeClass: lost "
            f"{restart.seconds_lost:.1f}s (waited {restart.capacity_seconds:.1f}s for capacity)"
        )
        assert gone.wait(timeout=1) == []


def test_on_the_gke_fakes_with_nothing_after_spot_the_same_loss_fails_after_capacity_timeout(
    spot_head: SpotHead, tmp_path: Path
) -> None:
    spec = {**spot_spec("rl-nostandby", tmp_path, num_nodes=2), "capacity": ("spot",)}
    job = _job("nostandby", tmp_path, capacity_timeout=5)
    with spot_gke(spot_head, spec) as (cluster, kube):
        assert [r.key for r in cluster.plan() if r.key.startswith("gpu-")] == ["gpu-pool"]
        run = cluster.submit(job)
        wait_done(job, cluster, 3)
        preempt(cluster, nodes=2, back_after=None)
        with pytest.raises(JobFailedError) as failed:
            run.wait(timeout=180)
        assert failed.value.status == "FAILED"
        assert "did not come back within capacity_timeout=5s: giving up" in "\n".join(failed.value.last_lines)
        [restart] = run.restarts()
        assert restart.first_step is None
        assert attempts_in(run.logs()) == 1
        # No GPU node came in its place: nothing beside the Spot pool could provide one.
        assert not [
            n for n in kube.objects("Node") if n["metadata"]["labels"].get(GKE_NODEPOOL_LABEL, "").startswith("gpu-")
        ]
