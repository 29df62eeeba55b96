"""GRPOJob.preflight: offline checks of a job against its recipe, cluster and volume."""

from __future__ import annotations

import importlib.util
import pickle
import shutil
from pathlib import Path
from typing import Any

import pytest
from helpers.specs import REFERENCE

from rl_lustre import Cluster, GRPOJob, LustreVolume
from rl_lustre.errors import ConfigError, PreflightError

SECRET_VALUE = "hf_SuperSecretValue123"


def cluster(**kw: Any) -> Cluster:
    return Cluster(**REFERENCE, **kw)


def job(**kw: Any) -> GRPOJob:
    kw.setdefault("name", "nemo-rl-grpo-test1")
    return GRPOJob(**kw)


def problems(j: GRPOJob, c: Cluster | None = None) -> list[ConfigError]:
    with pytest.raises(PreflightError) as info:
        j.preflight(c or cluster())
    assert isinstance(info.value, ValueError)
    return info.value.problems


def only_problem(j: GRPOJob, c: Cluster | None = None) -> ConfigError:
    found = problems(j, c)
    assert len(found) == 1, found
    return found[0]


def test_nemo_rl_is_not_installed_here() -> None:
    assert importlib.util.find_spec("nemo_rl") is None


@pytest.mark.parametrize(
    ("recipe", "model"),
    [
        ("grpo_math_1B", "Qwen/Qwen2.5-1.5B"),
        ("grpo_math_1B_megatron", "Qwen/Qwen2.5-1.5B"),
        ("grpo_math_8B_megatron", "meta-llama/Llama-3.1-8B-Instruct"),
        ("grpo_math_70B_megatron", "Qwen/Qwen2.5-72B-Instruct"),
    ],
)
def test_the_v040_recipes_pass_on_the_reference_cluster(recipe: str, model: str) -> None:
    assert job(recipe=recipe, model=model).preflight(cluster()) == []


def test_unknown_key_names_the_nearest_keys_and_the_plus_advice() -> None:
    p = only_problem(job(overrides={"grpo.num_prompts_per_stepp": 16}))
    assert p.field == "grpo.num_prompts_per_stepp"
    assert p.value == 16
    assert "grpo.num_prompts_per_step" in p.rule
    assert "+grpo.num_prompts_per_stepp=" in p.rule
    # "Did you mean" comes first; adding a new key is the fallback advice.
    assert p.rule.index("did you mean 'grpo.num_prompts_per_step'") < p.rule.index("+grpo.num_prompts_per_stepp=")
    assert job(overrides={"+grpo.my_new_knob": 16}).preflight(cluster()) == []


def test_an_override_under_a_section_the_recipe_disables_is_named_with_the_key_that_acts() -> None:
    small = {"recipe": "grpo_math_1B", "model": "Qwen/Qwen2.5-1.5B"}
    p = only_problem(job(**small, overrides={"policy.megatron_cfg.optimizer.lr": 3e-7}))
    assert p.field == "policy.megatron_cfg.optimizer.lr"
    assert p.value == 3e-7
    assert "grpo_math_1B' disables (policy.megatron_cfg.enabled=false)" in p.rule
    assert "did you mean 'policy.optimizer.kwargs.lr'?" in p.rule
    # The key that acts on this recipe passes; so does the Megatron key where Megatron trains,
    # or where the job switches the section on itself.
    assert job(**small, overrides={"policy.optimizer.kwargs.lr": 3e-7}).preflight(cluster()) == []
    assert job(overrides={"policy.megatron_cfg.optimizer.lr": 3e-7}).preflight(cluster()) == []
    assert (
        job(
            **small, overrides={"policy.megatron_cfg.optimizer.lr": 3e-7, "policy.megatron_cfg.enabled": True}
        ).preflight(cluster())
        is not None
    )
    p = only_problem(job(**small, overrides={"policy.dynamic_batching.train_mb_tokens": 4096}))
    assert "policy.dynamic_batching.enabled=false" in p.rule


def test_plus_on_an_existing_key_is_a_problem() -> None:
    p = only_problem(job(overrides={"+grpo.val_period": 5}))
    assert p.field == "grpo.val_period"
    assert "already exists" in p.rule


def test_batch_arithmetic_prompts_times_generations() -> None:
    p = only_problem(job(train_global_batch_size=96))
    assert (p.field, p.value) == ("policy.train_global_batch_size", 96)
    assert "32" in p.rule
    assert "8" in p.rule
    assert "256" in p.rule


def test_batch_must_split_over_data_parallel_and_micro_batch() -> None:
    # grpo_math_1B: DTensor TP=1, micro batch 4; 64 GPUs → DP 64 → multiples of 256.
    p = only_problem(job(recipe="grpo_math_1B", model="Qwen/Qwen2.5-1.5B", train_global_batch_size=128))
    assert (p.field, p.value) == ("policy.train_global_batch_size", 128)
    assert "64" in p.rule
    assert "256" in p.rule
    assert (
        job(
            recipe="grpo_math_1B",
            model="Qwen/Qwen2.5-1.5B",
            train_global_batch_size=128,
            overrides={"policy.train_micro_batch_size": 2},
        ).preflight(cluster())
        == []
    )


def test_megatron_parallelism_must_divide_the_gpus() -> None:
    p = only_problem(job(), cluster(num_nodes=1))  # TP4 x PP4 = 16 > 8 GPUs
    assert (p.field, p.value) == ("policy.megatron_cfg.tensor_model_parallel_size", 4)
    assert "16" in p.rule
    assert "8" in p.rule
    p = only_problem(job(overrides={"policy.megatron_cfg.context_parallel_size": 3}))
    assert p.field == "policy.megatron_cfg.tensor_model_parallel_size"
    assert "48" in p.rule
    assert "64" in p.rule


def test_dtensor_parallelism_must_divide_the_gpus() -> None:
    p = only_problem(
        job(recipe="grpo_math_1B", model="Qwen/Qwen2.5-1.5B", overrides={"policy.dtensor_cfg.tensor_parallel_size": 3})
    )
    assert (p.field, p.value) == ("policy.dtensor_cfg.tensor_parallel_size", 3)


def test_vllm_tensor_parallel_fits_a_node() -> None:
    # 8 nodes x 4 GPUs: training (TP4 x PP4 = 16) fits, vLLM TP 8 does not fit a node.
    p = only_problem(job(), cluster(machine_type="a3-highgpu-4g"))
    assert (p.field, p.value) == ("policy.generation.vllm_cfg.tensor_parallel_size", 8)
    assert "4 GPUs per node" in p.rule


def test_job_cannot_ask_for_more_gpus_than_the_cluster_has() -> None:
    found = problems(job(overrides={"cluster.num_nodes": 16}))
    assert any(p.field == "cluster.num_nodes" and p.value == 16 for p in found)


def test_a_job_larger_than_the_cluster_is_one_problem_naming_both_numbers() -> None:
    p = only_problem(job(num_nodes=16))
    assert (p.owner, p.field, p.value) == ("GRPOJob", "num_nodes", 16)
    assert "asks for 16 nodes but cluster 'ray-a4-gpu-spot' has 8" in p.rule
    assert "Cluster.num_nodes=8" in p.rule
    assert job(num_nodes=8).preflight(cluster()) == []


def test_num_nodes_and_an_override_of_the_same_key_must_agree() -> None:
    p = only_problem(job(num_nodes=4, overrides={"cluster.num_nodes": 2}))
    assert (p.field, p.value) == ("overrides['cluster.num_nodes']", 2)
    assert "conflicts with num_nodes=4" in p.rule
    assert job(num_nodes=2, overrides={"cluster.num_nodes": 2}).preflight(cluster()) == []


def test_fewer_gpus_per_node_than_the_node_has_is_a_warning() -> None:
    small = job(recipe="grpo_math_1B", model="Qwen/Qwen2.5-1.5B", num_nodes=1, overrides={"cluster.gpus_per_node": 4})
    warnings = small.preflight(cluster())
    assert any("uses 4 of each node's 8 GPUs" in w and "whole nodes" in w for w in warnings), warnings


@pytest.mark.parametrize("metric", [None, "val:accuracy", "train:reward"])
def test_valid_metric_names(metric: str | None) -> None:
    assert job(metric_name=metric).preflight(cluster()) == []


@pytest.mark.parametrize("metric", ["accuracy", "val:", "validation:accuracy"])
def test_metric_name_prefix_rule(metric: str) -> None:
    p = only_problem(job(metric_name=metric))
    assert (p.field, p.value) == ("checkpointing.metric_name", metric)
    assert "'val:" in p.rule
    assert "'train:" in p.rule


def test_datasets() -> None:
    assert job(dataset="DAPOMath17K").preflight(cluster()) == []
    assert job(dataset="OpenMathInstruct-2").preflight(cluster()) == []
    # NeMo-RL 0.4.0's loader refuses a name it does not know: an error, not a warning.
    typo = only_problem(job(dataset="DeepScaleR"))
    assert (typo.field, typo.value) == ("data.dataset_name", "DeepScaleR")
    assert "'DeepScaler'" in typo.rule
    # A preference dataset is for DPO / reward models; GRPO's loader refuses it.
    for preference in ("HelpSteer3", "Tulu3Preference"):
        p = only_problem(job(dataset=preference))
        assert (p.field, p.value) == ("data.dataset_name", preference)
        assert "preference dataset" in p.rule
    p = only_problem(job(dataset="HelpSteer3", nemo_rl_version="0.6.0"))
    assert (p.field, p.value) == ("data.train.dataset_name", "HelpSteer3")
    # For a version whose loader rl_lustre does not know, an unknown name is a warning.
    assert any("DeepScaleR" in w for w in job(dataset="DeepScaleR", nemo_rl_version="0.6.0").preflight(cluster()))
    (other,) = job(dataset="squad").preflight(cluster())
    assert "not a math dataset" in other
    p = only_problem(job(dataset="ResponseDataset"))
    assert (p.field, p.value) == ("data.dataset_name", "ResponseDataset")
    assert "+data.train_data_path" in p.rule
    ok = job(dataset="ResponseDataset", overrides={"+data.train_data_path": "/lustre/data/train.jsonl"})
    assert ok.preflight(cluster()) == []


def test_checkpoints_must_fit_the_lustre_volume() -> None:
    # 72B x 16 B/param ≈ 1,073 GiB per checkpoint; 10 saves, all kept → 10 x 1,073 > 9,000 GiB.
    small = cluster(volume=LustreVolume(name="small", throughput_mbps_per_tib=1000))
    p = only_problem(job(keep_top_k=None), small)
    assert (p.field, p.value) == ("checkpointing.keep_top_k", None)
    assert "9,000 GiB" in p.rule
    # keep_top_k=2 needs 2 + 2 in flight = 4 x 1,073 GiB, which fits.
    assert job(keep_top_k=2).preflight(small) == []
    assert job(keep_top_k=None).preflight(cluster(volume=LustreVolume(name="big", capacity_gib=36_000))) == []
    assert job(keep_top_k=None, checkpointing=False).preflight(small) == []


def test_almost_full_volume_is_a_warning() -> None:
    small = cluster(volume=LustreVolume(name="small", throughput_mbps_per_tib=1000))
    (w,) = job(keep_top_k=5).preflight(small)  # 7 x 1,073 GiB of 9,000
    assert "80%" in w


def test_unknown_model_size_is_a_warning_not_a_problem() -> None:
    warnings = job(model="acme/mystery-model").preflight(cluster())
    assert any("parameter count" in w for w in warnings)
    assert any("converter_type" in w for w in warnings)


def test_local_volume_uses_free_space_and_rehearsal_scale(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    free = 10 * 1024**3
    usage = shutil._ntuple_diskusage(free, 0, free)  # type: ignore[attr-defined]
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage)
    shape = {"num_nodes": 8, "gpus_per_node": 8}
    rehearsal = Cluster.local("demo", volume_dir=tmp_path / "not-yet" / "vol", rehearsal_scale=1e-5, **shape)
    assert job().preflight(rehearsal) == []
    full_size = Cluster.local("demo", volume_dir=tmp_path / "vol", rehearsal_scale=1.0, **shape)
    p = only_problem(job(), full_size)
    assert p.field == "checkpointing.keep_top_k"
    assert "free space" in p.rule


def test_wandb_needs_its_key_among_the_cluster_secrets() -> None:
    assert job(wandb=True).preflight(cluster()) == []
    p = only_problem(job(wandb=True), cluster(secrets=("HF_TOKEN",)))
    assert p.field == "logger.wandb_enabled"
    assert "WANDB_API_KEY" in p.rule


def test_secret_override_is_a_problem_without_echoing_it() -> None:
    with pytest.raises(PreflightError) as info:
        job(overrides={"++policy.megatron_cfg.env_vars": {"HF_TOKEN": SECRET_VALUE}}).preflight(cluster())
    assert SECRET_VALUE not in str(info.value)
    assert "Cluster.secrets" in str(info.value)


def test_newer_nemo_rl_checks_renamed_keys_and_says_so() -> None:
    warnings = job(nemo_rl_version="0.6.0").preflight(cluster())
    assert any("0.4.0" in w and "data.train.dataset_name" in w for w in warnings)
    p = only_problem(job(nemo_rl_version="0.6.0", overrides={"data.dataset_name": "DAPOMath17K"}))
    assert p.field == "data.dataset_name"
    assert "data.train.dataset_name" in p.rule


def test_image_ray_differing_from_the_pin_is_a_warning() -> None:
    c = cluster(image="rayproject/ray:2.49.2")
    (w,) = job(nemo_rl_version="0.4.0").preflight(c)
    assert "2.46.0" in w
    assert "2.49.2" in w


def test_unshipped_recipe_still_checks_what_the_job_sets() -> None:
    warnings = job(recipe="grpo_math_32B_megatron").preflight(cluster())
    assert any("not one rl_lustre ships" in w for w in warnings)
    p = only_problem(job(recipe="grpo_math_32B_megatron", train_global_batch_size=100))
    assert p.field == "policy.train_global_batch_size"


def test_every_problem_is_reported_at_once() -> None:
    bad = job(
        train_global_batch_size=100,
        metric_name="accuracy",
        dataset="ResponseDataset",
        overrides={"grpo.nonexistent": 1, "logger.wandb.name": "a,b"},
    )
    found = problems(bad)
    fields = [p.field for p in found]
    assert set(fields) == {
        "grpo.nonexistent",
        "policy.train_global_batch_size",
        "checkpointing.metric_name",
        "data.dataset_name",
    }
    assert all(p.rule and p.owner == "GRPOJob" for p in found)
    with pytest.raises(PreflightError) as info:
        bad.preflight(cluster())
    text = str(info.value)
    assert all(f in text for f in fields)
    again = pickle.loads(pickle.dumps(info.value))
    assert [p.field for p in again.problems] == fields


def test_no_remote_call(monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    def refuse(*a: Any, **k: Any) -> None:
        raise AssertionError("preflight tried to open a network connection")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    assert job().preflight(cluster()) == []
