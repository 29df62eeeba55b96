"""A token is planted wherever a user could put one, then looked for everywhere a value
can end up: plans, manifests, reprs, logs, errors, the runtime env, the command line
and Ray's job records and metadata. It must be nowhere but where secrets belong (the
process environment, the Kubernetes Secret)."""

from __future__ import annotations

import json
import logging
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers.ray_fixtures import FAKE_HF_TOKEN
from helpers.specs import GKE

from rl_lustre import Cluster, GRPOJob, LustreVolume
from rl_lustre.errors import RLLustreError

# The documented shapes of a Hugging Face token and a W&B API key; not live credentials.
HF = "hf_" + "Zq8wX2cV4bN6mM1kL3jH5gF7dS9aP0oI7u"
WANDB = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b"


def _attempts(token: str) -> list[Callable[[], Any]]:
    """Every place a careless user might paste a token."""
    return [
        lambda: GRPOJob(name="j", overrides={"logger.wandb.name": token}),
        lambda: GRPOJob(name="j", overrides={"+policy.hf_token": token}),
        lambda: GRPOJob(name="j", overrides={"+policy.megatron_cfg.env_vars": {"HF_TOKEN": token}}),
        lambda: GRPOJob(name="j", overrides={"+logger.wandb.tags": ["a", token]}),
        lambda: GRPOJob(name="j", env={"HF_TOKEN": token}),
        lambda: GRPOJob(name="j", env={"INNOCENT": token}),
        lambda: GRPOJob(name="j", model=token),
        lambda: GRPOJob(name="j", metric_name=f"val:{token}"),
        lambda: GRPOJob(name=token),
        lambda: Cluster(**GKE, secrets=[token]),
        lambda: Cluster(**GKE, labels={"k": token}),
        lambda: Cluster(**{**GKE, "name": token}),
        lambda: Cluster.local(volume_dir=f"/tmp/{token}", secrets=(token,)),
        lambda: LustreVolume(name="v", description=token),
    ]


def _everything_printed(cluster: Cluster, job: GRPOJob) -> list[str]:
    resolved = job.resolve(cluster)
    plan = cluster.plan()
    return [
        repr(cluster),
        repr(job),
        repr(resolved),
        str(resolved.config),
        str(plan),
        json.dumps(plan.to_dict()),
        json.dumps(cluster.manifests() if cluster.backend == "gke" else []),
        json.dumps(job.overrides(cluster)),
        json.dumps(job.override_args(cluster)),
        job.entrypoint(cluster),
        json.dumps(job.runtime_env(cluster)),
        repr(job.preflight(cluster)),
    ]


@pytest.mark.parametrize("token", [HF, WANDB], ids=["huggingface", "wandb"])
def test_a_planted_token_reaches_no_plan_manifest_repr_log_or_error(
    token: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    caplog.set_level(logging.DEBUG, logger="rl_lustre")
    # Where the token belongs: this process's environment, named in Cluster.secrets.
    monkeypatch.setenv("HF_TOKEN", token)
    monkeypatch.setenv("WANDB_API_KEY", token)
    monkeypatch.setenv("INNOCENT_LOOKING", token)

    seen: list[str] = []
    for attempt in _attempts(token):
        with pytest.raises(RLLustreError) as info:
            attempt()
        err = info.value
        seen += [str(err), repr(err), repr(err.args), repr(getattr(err, "value", None))]

    gke = Cluster(**GKE, secrets=("HF_TOKEN", "WANDB_API_KEY"))
    local = Cluster.local("plant", volume_dir=tmp_path / "volume", secrets=("HF_TOKEN",))
    for cluster in (gke, local):
        job = GRPOJob(
            name="planted",
            recipe="grpo_math_1B",
            wandb=cluster is gke,
            overrides={"+logger.wandb.tags": ["${oc.env:INNOCENT_LOOKING,none}"]},
        )
        seen += _everything_printed(cluster, job)

    # The Secret's manifest carries names only; its values are redacted.
    secret = next(m for m in gke.manifests() if m["kind"] == "Secret")
    assert set(secret.get("stringData") or secret.get("data") or {}) == {"HF_TOKEN", "WANDB_API_KEY"}
    # What up() applies holds the values, for the API only: printed or logged, they are redacted.
    from rl_lustre.kube.manifests import build_manifests

    applied = build_manifests(gke, secret_values={"HF_TOKEN": token, "WANDB_API_KEY": token}, redact=False)
    assert token in json.dumps(applied)
    seen += [repr(applied), str(applied)]

    # The console script's plan of a deployment script.
    from click.testing import CliRunner

    from rl_lustre.cli._app import cli

    script = tmp_path / "deploy.py"
    script.write_text(
        textwrap.dedent(f"""
        import rl_lustre
        cluster = rl_lustre.Cluster(name="demo", project="my-project", region="us-east1",
                                    zone="us-east1-b", secrets=("HF_TOKEN", "WANDB_API_KEY"))
        leaky = {token!r}
    """)
    )
    results = [
        CliRunner().invoke(cli, args)
        for args in (
            ["plan", f"{script}:cluster"],
            ["plan", "--json", f"{script}:cluster"],
            ["plan", f"{script}:leaky"],
        )
    ]
    assert results[0].exit_code == 0, results[0].output
    assert "demo" in results[0].output
    assert results[2].exit_code != 0
    seen += [text for r in results for text in (r.output, repr(r.exception))]

    seen.append(caplog.text)
    leaks = [text for text in seen if token in text]
    assert not leaks, leaks[0][:500]


def test_a_declared_secret_reaches_the_job_and_none_of_its_records(
    local_cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    """The session head holds FAKE_HF_TOKEN in its environment (ray_fixtures): a job runs
    with it, and it is in no record, log, metadata, runtime env or handle of the job."""
    from ray.job_submission import JobSubmissionClient

    caplog.set_level(logging.DEBUG, logger="rl_lustre")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_TOKEN", FAKE_HF_TOKEN)
        # Not shaped like a token, but the value of a declared secret: refused by value.
        with pytest.raises(RLLustreError) as info:
            local_cluster.submit(
                GRPOJob(name="leaky-value", recipe="grpo_math_1B", overrides={"+logger.wandb.tags": [FAKE_HF_TOKEN]})
            )
        assert FAKE_HF_TOKEN not in str(info.value)
        run = local_cluster.submit(GRPOJob(name="planted", recipe="grpo_math_1B", max_num_steps=2, save_period=1))
        assert run.wait(timeout=120) == "SUCCEEDED"

    head = local_cluster._backend().head  # type: ignore[attr-defined]
    client = JobSubmissionClient(head.dashboard_url, headers=head.headers())
    record = client.get_job_info(run.job_id)
    seen = [
        record.model_dump_json(),
        json.dumps(record.runtime_env or {}),
        json.dumps(record.metadata or {}),
        record.entrypoint,
        run.logs(),
        repr(run),
        repr(run.info()),
        repr(run.checkpoints()),
        repr(run.metrics()),
        str(run.progress),
        caplog.text,
    ]
    leaks = [text for text in seen if FAKE_HF_TOKEN in text]
    assert not leaks, leaks[0][:500]
    # It travels by the head's environment, never the runtime env (that the job sees it
    # is test_local_backend's secrets test).
    assert "HF_TOKEN" not in json.dumps(record.runtime_env or {})
