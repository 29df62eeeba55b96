"""The rehearsal holds GPUs as NeMo-RL v0.4.0's RayVirtualCluster does, and fails as it fails.

The shapes are checked against the arithmetic of NeMo-RL v0.4.0's ``grpo.py`` ``setup`` and
``vllm_generation.py`` (NVIDIA-NeMo/RL, tag v0.4.0, commit c751f81; Apache-2.0), on the
recipes rl_lustre ships. The failures are run for real on the session's Ray head, by the
rehearsal's own command submitted without the queue (as a user running ``ray job submit``
by hand would), with NeMo-RL's retry knob and our shorter ready wait.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import attrs
import pytest
from helpers.ray_fixtures import ray_processes

from rl_lustre import Cluster, GRPOJob
from rl_lustre.nemo_rl import resolve_config
from rl_lustre.rehearsal.virtual_cluster import Shape, max_retries, ready_timeout, shapes

SMALL = GRPOJob(
    name="pg",
    recipe="grpo_math_1B",
    model="Qwen/Qwen2.5-1.5B",
    max_num_steps=2,
    num_prompts_per_step=4,
    num_generations_per_prompt=8,
    train_global_batch_size=32,
    checkpointing=False,
)


def _cfg(recipe: str, **overrides: Any) -> dict[str, Any]:
    return resolve_config(recipe, [f"{k}={v}" for k, v in overrides.items()])


@pytest.mark.parametrize(
    ("recipe", "overrides", "expected"),
    [
        # The reference jobs: colocated vLLM, one PACK group of 8 {CPU 2, GPU 1} bundles per node.
        ("grpo_math_1B", {"cluster.num_nodes": 1, "cluster.gpus_per_node": 8}, [Shape("grpo_policy_cluster", (8,), 2)]),
        (
            "grpo_math_70B_megatron",
            {"cluster.num_nodes": 8, "cluster.gpus_per_node": 8},
            [Shape("grpo_policy_cluster", (8,) * 8, 2)],
        ),
        # vLLM's tensor parallelism across nodes: one unified group, SPREAD when colocated.
        (
            "grpo_math_1B",
            {"cluster.num_nodes": 2, "cluster.gpus_per_node": 8, "policy.generation.vllm_cfg.tensor_parallel_size": 16},
            [Shape("grpo_policy_cluster", (8, 8), 2, unified=True, strategy="SPREAD")],
        ),
        # Not colocated, one node: the inference GPUs come out of the train cluster's.
        (
            "grpo_math_1B",
            {
                "cluster.num_nodes": 1,
                "cluster.gpus_per_node": 8,
                "policy.generation.colocated.enabled": False,
                "policy.generation.colocated.resources.gpus_per_node": 2,
            },
            [Shape("grpo_train_cluster", (6,), 1), Shape("grpo_inference_cluster", (2,), 1)],
        ),
        # Not colocated, three nodes: one whole node for inference.
        (
            "grpo_math_1B",
            {
                "cluster.num_nodes": 3,
                "cluster.gpus_per_node": 8,
                "policy.generation.colocated.enabled": False,
                "policy.generation.colocated.resources.gpus_per_node": 8,
                "policy.generation.colocated.resources.num_nodes": 1,
            },
            [Shape("grpo_train_cluster", (8, 8), 1), Shape("grpo_inference_cluster", (8,), 1)],
        ),
    ],
)
def test_the_shapes_are_grpo_setups(recipe: str, overrides: dict[str, Any], expected: list[Shape]) -> None:
    assert shapes(_cfg(recipe, **overrides)) == expected


def test_the_knobs_default_to_nemo_rls_and_are_checked_as_it_checks_them() -> None:
    assert (max_retries({}), ready_timeout({})) == (6, 180.0)
    assert (
        max_retries({"NRL_VIRTUAL_CLUSTER_MAX_RETRIES": "2"}),
        ready_timeout({"RL_LUSTRE_REHEARSAL_PG_READY_TIMEOUT": "3"}),
    ) == (2, 3.0)
    with pytest.raises(AssertionError, match="NRL_VIRTUAL_CLUSTER_MAX_RETRIES=0 must be an integer greater than 0"):
        max_retries({"NRL_VIRTUAL_CLUSTER_MAX_RETRIES": "0"})


def _raw(cluster: Cluster, command_cluster: Cluster, job: GRPOJob, env: dict[str, str] | None = None) -> str:
    """Submit the rehearsal's command itself (no supervisor, so no queue) to the session head."""
    jobs = cluster._backend().jobs  # type: ignore[attr-defined]
    job_id = f"raw-{job.name}-{uuid.uuid4().hex[:6]}"
    runtime_env = job.resolve(command_cluster).runtime_env
    runtime_env["env_vars"] = {**runtime_env.get("env_vars", {}), **(env or {})}
    jobs.submit(job.entrypoint(command_cluster), submission_id=job_id, runtime_env=runtime_env)
    return job_id


def _wait(cluster: Cluster, job_id: str, timeout: float = 120.0) -> str:
    jobs = cluster._backend().jobs  # type: ignore[attr-defined]
    deadline = time.monotonic() + timeout
    while not (info := jobs.info(job_id)).terminal:
        assert time.monotonic() < deadline, f"{job_id} still {info.status}"
        time.sleep(0.3)
    return info.status


def test_without_the_queue_a_second_job_fails_as_nemo_rl_does_and_a_too_large_one_after_its_retries(
    local_cluster: Cluster,
) -> None:
    jobs = local_cluster._backend().jobs  # type: ignore[attr-defined]
    temp_dir = local_cluster._backend().temp_dir  # type: ignore[attr-defined]

    def head_processes() -> list[tuple[int, str]]:
        # (The deployment's keeper names the head's directory too, but lives beside the head, not in it.)
        return [p for p in ray_processes(temp_dir) if "rl_lustre_oncluster.keeper" not in p[1]]

    before = head_processes()
    holder = _raw(local_cluster, local_cluster, attrs.evolve(SMALL, name="pg-holder", max_num_steps=400))
    try:
        # It holds the head's 8 GPUs as NeMo-RL would: one PACK group of 8 {CPU 2, GPU 1} bundles.
        groups = _until_groups(local_cluster)
        assert [(g["name"], len(g["bundles"])) for g in groups] == [("grpo_policy_cluster-node0", 8)]
        assert {tuple(sorted(b["unit_resources"].items())) for b in groups[0]["bundles"]} == {
            (("CPU", 2.0), ("GPU", 1.0))
        }
        # One job driver connected: it added few processes to the head (its supervisor, its
        # command and a worker or two: 7 alone), not a worker per declared CPU (16 for these
        # bundles). Counted from before it: the session head keeps idle workers of earlier tests.
        added = [p for p in head_processes() if p not in before]
        assert len(added) <= 12, added

        # The GPUs exist but are taken: the check passes, the ready wait times out, no retry.
        taken = _raw(
            local_cluster,
            local_cluster,
            attrs.evolve(SMALL, name="pg-taken"),
            {"RL_LUSTRE_REHEARSAL_PG_READY_TIMEOUT": "2"},
        )
        # More GPUs than the cluster has: NeMo-RL's check fails, and is retried with back-off.
        bigger = Cluster.local(
            local_cluster.name,
            volume_dir=local_cluster.mount_path,
            num_nodes=2,
            gpus_per_node=8,
            rehearsal_step_seconds=local_cluster.rehearsal_step_seconds,
        )
        short = _raw(
            local_cluster, bigger, attrs.evolve(SMALL, name="pg-short"), {"NRL_VIRTUAL_CLUSTER_MAX_RETRIES": "2"}
        )
        assert _wait(local_cluster, taken) == "FAILED"
        log = jobs.logs(taken)
        assert (
            "rl_lustre rehearsal: waiting up to 2s for placement groups (RL_LUSTRE_REHEARSAL_PG_READY_TIMEOUT); "
            "NeMo-RL v0.4.0 waits 180s" in log
        )
        assert (
            "TimeoutError: Timed out waiting for placement groups to be ready. The cluster may not have enough "
            "resources to satisfy the requested configuration, or the resources may be busy with other tasks."
        ) in log
        assert "Retrying placement group creation" not in log
        assert _wait(local_cluster, short) == "FAILED"
        log = jobs.logs(short)
        assert log.count("Not enough GPUs available. Requested 16 GPUs, but only 8 are available in the cluster.") == 2
        assert "Retrying placement group creation... 1/2. Next retry in 1 seconds." in log
        assert "Retrying placement group creation... 2/2. Next retry in 2 seconds." in log
        assert "Maximum number of retries reached (2). Cluster resources may be insufficient" in log
        # The holder says what it holds (the state API does not show a group's strategy).
        assert (
            "the job's GPUs are held in Ray placement groups as NeMo-RL holds them (grpo_policy_cluster: "
            "1 PACK group(s), 8 GPU(s))"
        ) in jobs.logs(holder)
        # The holder never noticed.
        assert jobs.info(holder).status == "RUNNING"
    finally:
        jobs.stop(holder)
    assert _wait(local_cluster, holder) == "STOPPED"


def _until_groups(cluster: Cluster) -> list[dict[str, Any]]:
    import json
    import urllib.request

    head = cluster._backend().head  # type: ignore[attr-defined]
    deadline = time.monotonic() + 60
    while True:
        request = urllib.request.Request(
            f"{head.dashboard_url}/api/v0/placement_groups?detail=true&limit=100", headers=head.headers()
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            groups = json.loads(response.read())["data"]["result"]["result"]
        created = [g for g in groups if g["state"] == "CREATED"]
        if created:
            return created
        assert time.monotonic() < deadline, f"no placement group was created: {groups}"
        time.sleep(0.3)
