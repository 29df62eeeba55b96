"""The local backend against the session's real Ray head: submission ids, retries,
secrets, and a NeMo-RL checkout's own entrypoint."""

from __future__ import annotations

import json
import os
import shlex
import stat
import sys
from pathlib import Path

import attrs
import pytest
from helpers.ray_fixtures import FAKE_HF_TOKEN, FAKE_OTHER_KEY

from rl_lustre import Cluster, GRPOJob
from rl_lustre.backends.submission import prepare
from rl_lustre.errors import ConfigError, NotReadyError


def _jobs(cluster: Cluster):  # type: ignore[no-untyped-def]
    return cluster._backend().jobs  # type: ignore[attr-defined]


def _raw_records(cluster: Cluster) -> list[dict]:  # type: ignore[type-arg]
    """Every job record as Ray's own client returns it (what the dashboard shows)."""
    from ray.job_submission import JobSubmissionClient

    head = cluster._backend().head  # type: ignore[attr-defined]
    client = JobSubmissionClient(head.dashboard_url, headers=head.headers())
    return [json.loads(details.model_dump_json()) for details in client.list_jobs()]


def test_submission_ids_are_derived_from_the_job(local_cluster: Cluster) -> None:
    job = GRPOJob(name="ids", recipe="grpo_math_1B", max_num_steps=4)
    first, again = prepare(local_cluster, job), prepare(local_cluster, job)
    assert first.base_id == again.base_id
    assert first.base_id.startswith("rl-lustre-ids-")
    changed = prepare(local_cluster, attrs.evolve(job, max_num_steps=5))
    assert changed.base_id != first.base_id
    assert first.checkpoint_dir == str(Path(local_cluster.mount_path) / "checkpoints" / "ids")


def test_a_cluster_that_is_not_up_refuses_to_submit(tmp_path: Path) -> None:
    cluster = Cluster.local("never-up", volume_dir=tmp_path / "v")
    with pytest.raises(NotReadyError, match=r"cluster\.up\(\)"):
        cluster.submit(GRPOJob(name="x", recipe="grpo_math_1B", max_num_steps=2))
    cluster.down()  # nothing runs: a no-op, not an error


def test_resubmitting_a_running_job_attaches_and_a_finished_one_starts_a_new_attempt(
    local_cluster: Cluster,
) -> None:
    job = GRPOJob(name="retry", recipe="grpo_math_1B", max_num_steps=500)
    first = local_cluster.submit(job)
    second = local_cluster.submit(job)
    assert second.job_id == first.job_id
    base = first.job_id
    assert [j.submission_id for j in _jobs(local_cluster).list() if j.submission_id.startswith(base)] == [base]

    assert first.stop() == "STOPPED"
    third = local_cluster.submit(job)
    try:
        assert third.job_id == f"{base}-r2"
        info = third.info()
        assert info.metadata["rl_lustre.attempt"] == "2"
        assert info.metadata["rl_lustre.job"] == "retry"
        assert sorted(j.submission_id for j in _jobs(local_cluster).list() if j.submission_id.startswith(base)) == [
            base,
            f"{base}-r2",
        ]
    finally:
        third.stop(wait=False)


def test_secrets_reach_jobs_through_the_head_and_never_the_job_records(
    local_cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_TOKEN", FAKE_HF_TOKEN)
    probe = f"{shlex.quote(sys.executable)} -c " + shlex.quote(
        "import os; print('HF', os.environ.get('HF_TOKEN')); print('OTHER', os.environ.get('OTHER_API_KEY'))"
    )
    jobs = _jobs(local_cluster)
    jobs.submit(probe, submission_id=f"probe-{os.getpid()}")
    run = local_cluster.submit(GRPOJob(name="secrets", recipe="grpo_math_1B", max_num_steps=500))
    try:
        probe_run = local_cluster.attach(f"probe-{os.getpid()}")
        assert probe_run.wait(timeout=60) == "SUCCEEDED"
        lines = probe_run.logs().splitlines()
        # Declared in Cluster.secrets: the job sees it. Not declared: the head never had it.
        assert f"HF {FAKE_HF_TOKEN}" in lines
        assert "OTHER None" in lines
        assert all(FAKE_OTHER_KEY not in line for line in lines)

        grpo_record = next(r for r in _raw_records(local_cluster) if r["submission_id"] == run.job_id)
        assert grpo_record["runtime_env"]["env_vars"]["RAY_OVERRIDE_JOB_RUNTIME_ENV"] == "1"
        for record in _raw_records(local_cluster):
            if record["submission_id"] == f"probe-{os.getpid()}":
                continue  # its log printed the token on purpose; its record holds none
            assert FAKE_HF_TOKEN not in json.dumps(record)
            assert "HF_TOKEN" not in json.dumps(record.get("runtime_env") or {})
    finally:
        run.stop(wait=False)


def test_a_secret_value_in_a_job_is_refused_before_anything_is_sent(
    local_cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_TOKEN", FAKE_HF_TOKEN)
    before = len(_jobs(local_cluster).list())
    job = GRPOJob(
        name="leaky",
        recipe="grpo_math_1B",
        max_num_steps=2,
        overrides={"logger.wandb.name": FAKE_HF_TOKEN},
    )
    with pytest.raises(ConfigError) as err:
        local_cluster.submit(job)
    assert "HF_TOKEN" in str(err.value)
    assert FAKE_HF_TOKEN not in str(err.value)
    assert len(_jobs(local_cluster).list()) == before


_FAKE_GRPO = """
import os, sys
import extra_module  # from the job's working_dir, uploaded by Ray
print("FAKE NEMO-RL", extra_module.VALUE)
print("CWD", os.getcwd())
print("ARGS", " ".join(sys.argv[1:]))
for name in ("RAY_OVERRIDE_JOB_RUNTIME_ENV", "HF_HOME", "RL_LUSTRE_TEST_MARK"):
    print("ENV", name, os.environ.get(name))
print("HF_TOKEN set:", os.environ.get("HF_TOKEN") is not None)
for step in (1, 2):
    print(f"========================= Step {step}/2 =========================")
    print()
    print("\\U0001f4ca Training Results:")
    print(f"  \\u2022 Loss: {step / 10:.4f}")
    print(f"  \\u2022 Avg Reward: {step / 4:.4f}")
print("Max number of steps has been reached, stopping training early")
"""


def test_a_nemo_rl_checkout_runs_its_own_entrypoint_with_the_jobs_env_and_working_dir(
    local_cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    checkout = tmp_path / "nemo-rl"
    (checkout / "examples").mkdir(parents=True)
    (checkout / "examples" / "run_grpo_math.py").write_text(_FAKE_GRPO)
    # `uv run python ...` as NeMo-RL runs it; the stand-in runs this Python.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    uv = bin_dir / "uv"
    uv.write_text(
        f'#!/bin/sh\n[ "$1" = run ] && shift\n[ "$1" = python ] && shift\nexec {shlex.quote(sys.executable)} "$@"\n'
    )
    uv.chmod(uv.stat().st_mode | stat.S_IXUSR)
    workdir = tmp_path / "workdir"
    workdir.mkdir()
    (workdir / "extra_module.py").write_text("VALUE = 'from-working-dir'\n")

    real = Cluster.local(
        local_cluster.name,
        volume_dir=local_cluster.mount_path,
        nemo_rl_path=checkout,
        secrets=local_cluster.secrets,
        keep=True,
    )
    real.up()  # adopts the session's head: same name and volume
    assert real._backend().head.pid == local_cluster._backend().head.pid  # type: ignore[attr-defined]

    monkeypatch.setenv("HF_TOKEN", FAKE_HF_TOKEN)
    job = GRPOJob(
        name="real-nemo",
        recipe="grpo_math_1B",
        # Preflight sizes real checkpoints (no rehearsal scale here): keep them small.
        model="Qwen/Qwen2.5-0.5B-Instruct",
        max_num_steps=2,
        env={"PATH": f"{bin_dir}:{os.environ['PATH']}", "RL_LUSTRE_TEST_MARK": "job-env"},
        working_dir=str(workdir),
    )
    run = real.submit(job)
    assert run.wait(timeout=240) == "SUCCEEDED"
    log = run.logs()
    lines = log.splitlines()
    assert "FAKE NEMO-RL from-working-dir" in lines
    assert "rl_lustre rehearsal" not in log
    assert f"CWD {checkout}" in lines
    args = next(line for line in lines if line.startswith("ARGS ")).split()[1:]
    assert args[:2] == ["--config", "examples/configs/grpo_math_1B.yaml"]
    assert "grpo.max_num_steps=2" in args
    assert f"checkpointing.checkpoint_dir={local_cluster.mount_path}/checkpoints/real-nemo" in args
    assert "ENV RAY_OVERRIDE_JOB_RUNTIME_ENV 1" in lines
    assert f"ENV HF_HOME {local_cluster.mount_path}/huggingface_cache" in lines
    assert "ENV RL_LUSTRE_TEST_MARK job-env" in lines
    assert "HF_TOKEN set: True" in lines

    # The handle reads the checkout's step lines as it reads the rehearsal's.
    assert run.progress.completed == 2
    assert run.metrics() == {
        1: {"loss": 0.1, "avg_reward": 0.25},
        2: {"loss": 0.2, "avg_reward": 0.5},
    }


def _state_api(cluster: Cluster, path: str) -> list[dict]:  # type: ignore[type-arg]
    """One list of Ray's state API (``/api/v0/...``), read raw as the supervisor reads it."""
    import urllib.request

    head = cluster._backend().head  # type: ignore[attr-defined]
    request = urllib.request.Request(f"{head.dashboard_url}{path}", headers=head.headers())
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())["data"]["result"]["result"]


def test_a_head_without_worker_nodes_declares_the_clusters_gpus_for_the_rehearsal(local_cluster: Cluster) -> None:
    (head,) = _state_api(local_cluster, "/api/v0/nodes?detail=true&limit=100")
    assert head["is_head_node"]
    total = head["resources_total"]
    # Every GPU the jobs are told of, and NeMo-RL's 2 CPUs per GPU (colocated vLLM) plus 2.
    assert total["GPU"] == local_cluster.num_nodes * local_cluster.gpus_per_node
    assert total["CPU"] == 2 * total["GPU"] + 2
