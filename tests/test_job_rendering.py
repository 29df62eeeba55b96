"""GRPOJob's NeMo-RL command and runtime env, checked against the reference workflow's command."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import attrs
import pytest
from helpers.specs import GKE, REFERENCE
from hydra.core.override_parser.overrides_parser import OverridesParser

from rl_lustre import Cluster, GRPOJob
from rl_lustre.errors import ConfigError, PreflightError
from rl_lustre.nemo_rl.overrides import same_value

PARSER = OverridesParser.create()
PREFIX = [
    "cd",
    "/opt/nemo-rl",
    "&&",
    "uv",
    "run",
    "python",
    "examples/run_grpo_math.py",
    "--config",
    "examples/configs/grpo_math_70B_megatron.yaml",
]
SECRET_VALUE = "hf_SuperSecretValue123"


def reference_cluster(**kw: Any) -> Cluster:
    return Cluster(**REFERENCE, **kw)


def reference_job(**kw: Any) -> GRPOJob:
    return GRPOJob(name="nemo-rl-grpo-test1", checkpoint_root="nemo_rl_qwen_72b_ds_cp", **kw)


def parse_command(command: str, prefix_len: int = len(PREFIX)) -> tuple[list[str], dict[str, Any]]:
    """Split like a shell, then read each override with Hydra's own parser (ordered)."""
    tokens = shlex.split(command)
    parsed: dict[str, Any] = {}
    for token in tokens[prefix_len:]:
        o = PARSER.parse_override(token)
        assert not o.is_sweep_override()
        key = ("+" if o.is_add() else "++" if o.is_force_add() else "") + o.key_or_group
        assert key not in parsed, f"{key} given twice"
        parsed[key] = o.value()
    return tokens[:prefix_len], parsed


@pytest.fixture(scope="module")
def reference_command(ref: Path) -> str:
    command = (ref / "reference_command.txt").read_text().strip()
    assert command.startswith("cd /opt/nemo-rl && uv run python examples/run_grpo_math.py ")
    return command


def test_reference_job_matches_the_reference_command(reference_command: str) -> None:
    cluster, job = reference_cluster(), reference_job()
    ref_prefix, ref = parse_command(reference_command)
    prefix, ours = parse_command(job.entrypoint(cluster))
    assert ref_prefix == PREFIX
    assert prefix == PREFIX

    log_dir = ours.pop("logger.log_dir")
    assert list(ours) == list(ref), "same keys in the same order; the only extra key is logger.log_dir"
    for key, value in ref.items():
        assert same_value(ours[key], value), (key, ours[key], value)

    assert ours["cluster.num_nodes"] == cluster.num_nodes
    assert ours["cluster.gpus_per_node"] == cluster.gpus_per_node
    assert ours["checkpointing.checkpoint_dir"].startswith(cluster.mount_path + "/")
    assert log_dir.startswith(cluster.mount_path + "/")
    assert log_dir != ours["checkpointing.checkpoint_dir"]
    # The structured form agrees with what the command carries.
    overrides = job.overrides(cluster)
    assert all(same_value(overrides[k], v) for k, v in ours.items())
    assert overrides["logger.log_dir"] == log_dir


def test_the_command_is_the_reference_text_plus_log_dir(reference_command: str) -> None:
    """Strings that need no quoting are not quoted: the command reads like the codelab's."""
    ours = reference_job().entrypoint(reference_cluster())
    assert ours == f"{reference_command} logger.log_dir=/lustre/logs/nemo-rl-grpo-test1"


def test_cluster_shape_comes_from_the_cluster(reference_command: str) -> None:
    cluster = reference_cluster(machine_type="a3-highgpu-4g", num_nodes=3)
    _, ref = parse_command(reference_command)
    _, ours = parse_command(reference_job().entrypoint(cluster))
    assert (ours["cluster.num_nodes"], ours["cluster.gpus_per_node"]) == (3, 4)
    assert {k for k in ref if not same_value(ref[k], ours[k])} == {"cluster.num_nodes", "cluster.gpus_per_node"}


def test_num_nodes_sizes_the_job_and_defaults_to_the_whole_cluster() -> None:
    cluster = reference_cluster(num_nodes=8)
    whole = reference_job().resolve(cluster)
    assert (whole.overrides["cluster.num_nodes"], whole.num_nodes) == (8, 8)
    two = reference_job(num_nodes=2).resolve(cluster)
    assert (two.overrides["cluster.num_nodes"], two.num_nodes) == (2, 2)
    _, args = parse_command(reference_job(num_nodes=2).entrypoint(cluster))
    assert args["cluster.num_nodes"] == 2
    # An override alone still sizes the job, as before num_nodes existed.
    by_override = reference_job(overrides={"cluster.num_nodes": 3}).resolve(cluster)
    assert (by_override.overrides["cluster.num_nodes"], by_override.num_nodes) == (3, 3)
    with pytest.raises(PreflightError, match="conflicts with num_nodes=4"):
        reference_job(num_nodes=4, overrides={"cluster.num_nodes": 3}).preflight(cluster)


def test_paths_follow_the_mount_path() -> None:
    cluster = reference_cluster(mount_path="/mnt/lustre")
    job = reference_job(log_root="runs/logs", hf_home="cache/hf")
    o = job.overrides(cluster)
    assert o["checkpointing.checkpoint_dir"] == "/mnt/lustre/nemo_rl_qwen_72b_ds_cp/nemo-rl-grpo-test1"
    assert o["logger.log_dir"] == "/mnt/lustre/runs/logs/nemo-rl-grpo-test1"
    assert job.runtime_env(cluster)["env_vars"]["HF_HOME"] == "/mnt/lustre/cache/hf"


def test_runtime_env_has_nemo_rl_settings_and_no_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TOKEN", SECRET_VALUE)
    monkeypatch.setenv("WANDB_API_KEY", SECRET_VALUE)
    cluster = reference_cluster()
    job = reference_job(env={"TOKENIZERS_PARALLELISM": "false"}, wandb=True)
    env = job.runtime_env(cluster)
    assert env["env_vars"]["RAY_OVERRIDE_JOB_RUNTIME_ENV"] == "1"
    assert env["env_vars"]["HF_HOME"] == "/lustre/huggingface_cache"
    assert env["env_vars"]["TOKENIZERS_PARALLELISM"] == "false"
    assert not set(env["env_vars"]) & set(cluster.secrets)
    for text in (json.dumps(env), job.entrypoint(cluster), repr(job), str(job.overrides(cluster))):
        assert SECRET_VALUE not in text
    assert "working_dir" not in env


def test_runtime_env_carries_working_dir_and_excludes(tmp_path: Path) -> None:
    job = reference_job(working_dir=str(tmp_path), excludes=["*.pt", ".git"])
    env = job.runtime_env(reference_cluster())
    assert env["working_dir"] == str(tmp_path)
    assert env["excludes"] == ["*.pt", ".git", "__pycache__/", "*.pyc"]


@pytest.mark.parametrize(
    "name",
    [
        "HF_TOKEN",
        "WANDB_API_KEY",
        "my_secret",
        "DB_PASSWORD",
        "GITHUBTOKEN",
        "GOOGLE_APPLICATION_CREDENTIALS",
        "Api_Key",
    ],
)
def test_secret_looking_env_is_rejected(name: str) -> None:
    with pytest.raises(ConfigError) as info:
        reference_job(env={name: SECRET_VALUE})
    assert isinstance(info.value, ValueError)
    assert info.value.field == "env"
    assert "Cluster.secrets" in info.value.rule
    assert SECRET_VALUE not in str(info.value)


def test_env_rules() -> None:
    with pytest.raises(ConfigError, match="rl_lustre"):
        reference_job(env={"RAY_OVERRIDE_JOB_RUNTIME_ENV": "0"})
    with pytest.raises(ConfigError, match="strings"):
        reference_job(env={"OMP_NUM_THREADS": 4})
    with pytest.raises(ConfigError):
        reference_job(env={"1BAD": "x"})
    cluster = reference_cluster(secrets=("HF_TOKEN", "MY_LICENSE"))
    with pytest.raises(ConfigError, match="secrets"):
        reference_job(env={"MY_LICENSE": "x"}).runtime_env(cluster)


def test_user_overrides_replace_in_place_and_add_with_plus() -> None:
    cluster = reference_cluster()
    base = reference_job()
    job = attrs.evolve(
        base,
        overrides={
            "grpo.max_num_steps": 5,
            "+logger.mlflow.tracking_uri": "http://mlflow:5000",
            "policy.megatron_cfg.optimizer.lr": 3e-7,
        },
    )
    keys = list(job.overrides(cluster))
    assert keys.index("grpo.max_num_steps") == list(base.overrides(cluster)).index("grpo.max_num_steps")
    assert keys[-2:] == ["+logger.mlflow.tracking_uri", "policy.megatron_cfg.optimizer.lr"]
    _, parsed = parse_command(job.entrypoint(cluster))
    assert parsed["grpo.max_num_steps"] == 5
    assert parsed["+logger.mlflow.tracking_uri"] == "http://mlflow:5000"
    assert same_value(parsed["policy.megatron_cfg.optimizer.lr"], 3e-7)
    assert job.extra_overrides == {
        "grpo.max_num_steps": 5,
        "+logger.mlflow.tracking_uri": "http://mlflow:5000",
        "policy.megatron_cfg.optimizer.lr": 3e-7,
    }


def test_hostile_strings_survive_hydra_and_a_real_shell(tmp_path: Path) -> None:
    nasty = {
        "logger.wandb.name": 'it\'s a "test", $HOME; `id` $(rm -rf /) #1 [x] {y} a=b',
        "+logger.wandb.notes": "true",
        "+logger.wandb.tags": ["a b", "c,d", None, 1, "it's"],
        "++policy.megatron_cfg.env_vars": {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"},
        "checkpointing.checkpoint_must_save_by": "00:03:30:00",
    }
    cluster = reference_cluster()
    job = reference_job(overrides=nasty, model="/lustre/models/Qwen2.5-72B(v2)#1")
    command = job.entrypoint(cluster)
    _, parsed = parse_command(command)
    for key, value in nasty.items():
        assert same_value(parsed[key], value), key
    assert parsed["policy.model_name"] == "/lustre/models/Qwen2.5-72B(v2)#1"
    # A real POSIX shell gives the program the same arguments that shlex.split does.
    args = command.split(" --config examples/configs/grpo_math_70B_megatron.yaml ", 1)[1]
    echo = f"{shlex.quote(sys.executable)} -c 'import json, sys; print(json.dumps(sys.argv[1:]))'"
    out = subprocess.run(["/bin/sh", "-c", f"{echo} {args}"], capture_output=True, text=True, check=True, cwd=tmp_path)
    assert json.loads(out.stdout) == shlex.split(command)[len(PREFIX) :]
    assert not any(tmp_path.iterdir())


def test_converter_follows_model_family_and_recipe() -> None:
    cluster = reference_cluster()
    llama = reference_job(model="meta-llama/Llama-3.3-70B-Instruct").overrides(cluster)
    assert llama["policy.megatron_cfg.converter_type"] == "LlamaForCausalLM"
    explicit = reference_job(converter_type="Qwen3ForCausalLM").overrides(cluster)
    assert explicit["policy.megatron_cfg.converter_type"] == "Qwen3ForCausalLM"
    unknown = reference_job(model="acme/mystery-70B").overrides(cluster)
    assert "policy.megatron_cfg.converter_type" not in unknown  # the recipe's value stays
    dtensor = reference_job(recipe="grpo_math_1B", model="Qwen/Qwen2.5-1.5B").overrides(cluster)
    assert "policy.megatron_cfg.converter_type" not in dtensor
    assert list(dtensor)[:2] == ["policy.model_name", "logger.wandb_enabled"]


def test_wandb_project_follows_log_dir() -> None:
    o = list(reference_job(wandb=True, wandb_project="grpo-prod").overrides(reference_cluster()))
    assert o[o.index("logger.log_dir") + 1] == "logger.wandb.project"


def test_dataset_key_follows_the_nemo_rl_version() -> None:
    cluster = reference_cluster()
    old = list(reference_job().overrides(cluster))
    new = reference_job(nemo_rl_version="0.6.0").overrides(cluster)
    assert "data.dataset_name" not in new
    assert new["data.train.dataset_name"] == "DeepScaler"
    assert list(new).index("data.train.dataset_name") == old.index("data.dataset_name")
    from_image = reference_cluster(image="nvcr.io/nvidia/nemo-rl:v0.6.0", ray_version="2.49.2")
    assert "data.train.dataset_name" in reference_job().overrides(from_image)


def test_local_rehearsal_command(tmp_path: Path) -> None:
    cluster = Cluster.local("demo", volume_dir=tmp_path / "vol", rehearsal_scale=2e-5, rehearsal_step_seconds=0.25)
    job = reference_job()
    tokens = shlex.split(job.entrypoint(cluster))
    # --reserve: the driver holds the job's GPUs in placement groups as NeMo-RL does.
    assert tokens[:10] == [
        sys.executable,
        "-m",
        "rl_lustre.rehearsal",
        "--checkpoint-scale",
        tokens[4],
        "--step-seconds",
        tokens[6],
        "--reserve",
        "--config",
        "grpo_math_70B_megatron",
    ]
    assert float(tokens[4]) == 2e-5
    assert float(tokens[6]) == 0.25
    _, parsed = parse_command(job.entrypoint(cluster), prefix_len=10)
    assert parsed["checkpointing.checkpoint_dir"] == f"{tmp_path}/vol/nemo_rl_qwen_72b_ds_cp/nemo-rl-grpo-test1"
    assert parsed["cluster.num_nodes"] == 1
    assert job.runtime_env(cluster)["env_vars"]["HF_HOME"] == f"{tmp_path}/vol/huggingface_cache"


def test_local_with_nemo_rl_runs_the_real_entrypoint(tmp_path: Path) -> None:
    checkout = tmp_path / "Ne Mo-RL"
    cluster = Cluster.local("demo", volume_dir=tmp_path / "vol", nemo_rl_path=checkout)
    tokens = shlex.split(reference_job().entrypoint(cluster))
    assert tokens[:9] == [
        "cd",
        str(checkout),
        "&&",
        "uv",
        "run",
        "python",
        "examples/run_grpo_math.py",
        "--config",
        "examples/configs/grpo_math_70B_megatron.yaml",
    ]


def test_override_values_and_keys_are_validated_on_construction() -> None:
    with pytest.raises(ConfigError, match="dotted"):
        reference_job(overrides={"grpo max": 1})
    with pytest.raises(ConfigError, match="values must be"):
        reference_job(overrides={"grpo.max_num_steps": object()})
    with pytest.raises(ConfigError, match="dotted"):
        reference_job(overrides={"~+grpo.seed": None})


def test_tilde_deletes_a_key_as_in_nemo_rl() -> None:
    # "~key" is a valid NeMo-RL (Hydra) override: it deletes the key from the recipe.
    job = reference_job(recipe="grpo_math_1B", overrides={"~policy.dynamic_batching": None, "~logger.wandb.name": None})
    resolved = job.resolve(reference_cluster())
    assert "~policy.dynamic_batching" in resolved.override_args
    # A key we set is deleted in its place, not set and then deleted.
    assert "~logger.wandb.name" in resolved.override_args
    assert not any(a.startswith("logger.wandb.name=") for a in resolved.override_args)
    assert resolved.problems == ()
    assert resolved.config is not None
    assert "dynamic_batching" not in resolved.config["policy"]
    assert "name" not in resolved.config["logger"]["wandb"]
    assert "~policy.dynamic_batching" in shlex.split(job.entrypoint(reference_cluster()))
    # Deleting what the recipe lacks is what NeMo-RL refuses.
    with pytest.raises(PreflightError, match=r"has no 'policy\.no_such_key'"):
        reference_job(overrides={"~policy.no_such_key": None}).preflight(reference_cluster())


def test_entry_script_follows_the_nemo_rl_version() -> None:
    # v0.6.0 removed examples/run_grpo_math.py; examples/run_grpo.py runs GRPO from then on.
    from rl_lustre.nemo_rl import nemo_rl_version

    for version, script in (
        ("0.4.0", "examples/run_grpo_math.py"),
        ("0.5.0", "examples/run_grpo_math.py"),
        ("0.6.0", "examples/run_grpo.py"),
        ("0.7.0", "examples/run_grpo.py"),
    ):
        assert nemo_rl_version(version).entry_script == script, version
    tokens = shlex.split(reference_job(nemo_rl_version="0.6.0").entrypoint(reference_cluster()))
    assert tokens[6] == "examples/run_grpo.py"
    from_image = Cluster(
        **GKE,
        image="nvcr.io/nvidia/nemo-rl:v0.6.0",
        ray_version="2.49.2",
    )
    assert shlex.split(reference_job().entrypoint(from_image))[6] == "examples/run_grpo.py"


def test_secret_in_an_override_never_reaches_the_command() -> None:
    # Refused when the job is written, long before a command exists.
    with pytest.raises(ConfigError) as info:
        reference_job(overrides={"+policy.megatron_cfg.env_vars.HF_TOKEN": SECRET_VALUE})
    assert SECRET_VALUE not in str(info.value)
    assert "Cluster.secrets" in str(info.value)


def test_local_rehearsal_runs_the_jobs_nemo_rl_version(tmp_path: Path) -> None:
    cluster = Cluster.local("demo", volume_dir=tmp_path / "vol")
    tokens = shlex.split(reference_job(nemo_rl_version="0.6.0").entrypoint(cluster))
    assert tokens[tokens.index("--nemo-rl-version") + 1] == "0.6.0"
    assert "data.train.dataset_name=DeepScaler" in tokens


def test_interpolations_in_override_strings_follow_interpolate_overrides() -> None:
    """``${...}`` in the job's overrides: interpolated by default (as in NeMo-RL's YAML),
    literal with ``interpolate_overrides=False``; the job's own fields are always literal."""
    cluster = Cluster.local("demo", volume_dir="/tmp/rl-lustre-${HOME}")
    overrides = {"+logger.wandb.tags": ["${policy.model_name}"], "grpo.seed": "${grpo.max_num_steps}"}
    model = "Qwen/Qwen2.5-${x}-1.5B"

    interpolated = reference_job(recipe="grpo_math_1B", model=model, overrides=overrides).resolve(cluster)
    assert interpolated.config is not None
    assert interpolated.config["logger"]["wandb"]["tags"] == [model]
    assert interpolated.config["grpo"]["seed"] == interpolated.config["grpo"]["max_num_steps"] == 20

    literal = reference_job(
        recipe="grpo_math_1B", model=model, overrides=overrides, interpolate_overrides=False
    ).resolve(cluster)
    assert literal.config is not None
    assert literal.config["logger"]["wandb"]["tags"] == ["${policy.model_name}"]
    assert literal.config["grpo"]["seed"] == "${grpo.max_num_steps}"
    for resolved in (interpolated, literal):
        assert resolved.config is not None
        assert resolved.config["policy"]["model_name"] == model
        assert resolved.config["checkpointing"]["checkpoint_dir"].startswith("/tmp/rl-lustre-${HOME}/")
    # What the rehearsal driver (NeMo-RL's stand-in) resolves from the command line agrees.
    tokens = shlex.split(
        reference_job(recipe="grpo_math_1B", model=model, overrides=overrides, interpolate_overrides=False).entrypoint(
            cluster
        )
    )
    args = tokens[tokens.index("--config") + 2 :]
    from rl_lustre.nemo_rl import resolve_config

    assert resolve_config("grpo_math_1B", args)["logger"]["wandb"]["tags"] == ["${policy.model_name}"]
    # In literal mode a "${...}" string is text like any other, so value rules apply to it.
    with pytest.raises(ConfigError, match="whole number"):
        reference_job(overrides={"grpo.max_num_steps": "${x}"}, interpolate_overrides=False)


def test_preflight_never_reads_the_local_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RL_LUSTRE_TEST_PRIVATE", "value-from-this-machine")
    job = reference_job(
        recipe="grpo_math_1B",
        overrides={
            "+logger.wandb.tags": ["${oc.env:RL_LUSTRE_TEST_PRIVATE}"],
            "logger.wandb.name": "run-${oc.env:RL_LUSTRE_TEST_PRIVATE,x}",
        },
    )
    resolved = job.resolve(reference_cluster())
    assert resolved.config is not None
    assert resolved.config["logger"]["wandb"]["tags"] == ["${oc.env:RL_LUSTRE_TEST_PRIVATE}"]
    assert "value-from-this-machine" not in json.dumps(resolved.config)
    assert "value-from-this-machine" not in repr(job.preflight(reference_cluster()))
