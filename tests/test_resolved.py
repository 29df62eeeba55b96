"""GRPOJob.resolve: one rendering of a job per cluster, read by every consumer, equal to
the full NeMo-RL resolution it replaces."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import attrs
import pytest
from helpers.specs import REFERENCE

from rl_lustre import Cluster, GRPOJob
from rl_lustre.errors import ConfigError, PreflightError
from rl_lustre.nemo_rl import config as nemo_config
from rl_lustre.nemo_rl import config_cache, resolve_config


def cluster(**kw: Any) -> Cluster:
    kw.setdefault("num_nodes", 1)
    return Cluster(**REFERENCE, **kw)


SMALL = GRPOJob(
    name="small",
    recipe="grpo_math_1B",
    model="Qwen/Qwen2.5-1.5B",
    max_num_steps=4,
    num_prompts_per_step=64,
    num_generations_per_prompt=4,
    train_global_batch_size=256,
)

# Leaf values, values other keys interpolate, '+' additions, a replaced key of ours,
# containers, and a version with renamed keys.
VARIANTS = [
    GRPOJob(name="reference"),
    attrs.evolve(SMALL, name="lr", overrides={"policy.optimizer.kwargs.lr": 3e-6, "grpo.seed": 7}),
    attrs.evolve(SMALL, name="seq", overrides={"policy.max_total_sequence_length": 2048}),
    attrs.evolve(SMALL, name="model", model="Qwen/Qwen2.5-7B"),
    attrs.evolve(
        SMALL,
        name="add",
        overrides={
            "+logger.mlflow.tracking_uri": "http://mlflow:5000",
            "checkpointing.checkpoint_dir": "/lustre/elsewhere",
        },
    ),
    attrs.evolve(
        SMALL,
        name="containers",
        overrides={"policy.generation.stop_strings": ["</s>", "a b"], "++policy.generation.vllm_kwargs": {"x": 1}},
    ),
    attrs.evolve(SMALL, name="quoted", overrides={"logger.wandb.project": "team a, run b", "grpo.seed": None}),
    attrs.evolve(SMALL, name="v060", nemo_rl_version="0.6.0"),
    # An interpolation in an override: resolved in full, not through the shared resolution.
    attrs.evolve(SMALL, name="interpolated", overrides={"+logger.run_tag": "${policy.model_name}"}),
    GRPOJob(
        name="mega-8b",
        recipe="grpo_math_8B_megatron",
        model="meta-llama/Llama-3.1-8B-Instruct",
        overrides={"policy.megatron_cfg.optimizer.weight_decay": 0.1},
    ),
]


@pytest.mark.parametrize("job", VARIANTS, ids=lambda j: j.name)
def test_the_resolved_config_is_the_full_nemo_rl_resolution(job: GRPOJob) -> None:
    """The config a job resolves to (shared resolution plus per-job values) equals the
    config the rehearsal driver computes from the job's command line from scratch."""
    c = cluster(num_nodes=8)
    resolved = job.resolve(c)
    assert resolved.problems == ()
    expected = resolve_config(job.recipe, job.override_args(c), version=resolved.version.version)
    assert resolved.config == expected


def test_a_sweep_shares_one_resolution_and_each_job_keeps_its_own_values() -> None:
    c = cluster()
    jobs = [
        attrs.evolve(SMALL, name=f"s{i}", overrides={"policy.optimizer.kwargs.lr": (i + 1) * 1e-6}) for i in range(4)
    ]
    configs = [j.resolve(c).config for j in jobs]
    assert [cfg["policy"]["optimizer"]["kwargs"]["lr"] for cfg in configs] == [1e-6, 2e-6, 3e-6, 4e-6]
    assert [cfg["logger"]["wandb"]["name"] for cfg in configs] == ["s0", "s1", "s2", "s3"]
    assert [cfg["checkpointing"]["checkpoint_dir"] for cfg in configs] == [
        f"/lustre/checkpoints/s{i}" for i in range(4)
    ]
    # Interpolations still follow the recipe: the tokenizer is the model.
    assert all(cfg["policy"]["tokenizer"]["name"] == "Qwen/Qwen2.5-1.5B" for cfg in configs)
    # Handing out a config never changes the next one.
    configs[0]["grpo"]["seed"] = -1
    assert jobs[0].resolve(c).config["grpo"]["seed"] != -1


def test_resolved_once_per_job_and_cluster() -> None:
    job = attrs.evolve(SMALL, name="once")
    c = cluster()
    first = job.resolve(c)
    assert job.resolve(c) is first
    assert job.resolve(cluster()) is first  # an equal cluster is the same key
    other = job.resolve(cluster(num_nodes=4))
    assert other.overrides["cluster.num_nodes"] == 4
    assert other is not first
    assert attrs.evolve(job, max_num_steps=6).resolve(c).overrides["grpo.max_num_steps"] == 6
    # Every consumer reads the resolution: the job's own methods agree with it.
    assert job.overrides(c) == dict(first.overrides)
    assert job.entrypoint(c) == first.entrypoint
    assert job.runtime_env(c) == first.runtime_env
    assert job.checkpoint_dir(c) == first.checkpoint_dir
    assert job.nemo_rl_version_for(c) == first.version.version
    # What is handed out is a copy.
    job.overrides(c)["grpo.max_num_steps"] = 99
    job.runtime_env(c)["env_vars"]["X"] = "y"
    assert job.overrides(c)["grpo.max_num_steps"] == 4
    assert "X" not in job.runtime_env(c)["env_vars"]


def test_the_cache_is_not_part_of_the_spec() -> None:
    job = attrs.evolve(SMALL, name="spec")
    fresh = attrs.evolve(SMALL, name="spec")
    job.resolve(cluster())
    assert job == fresh
    assert hash(job) == hash(fresh)
    assert "resolved" not in repr(job).lower()
    again = pickle.loads(pickle.dumps(job))
    assert again == job
    assert again._resolved == {}


def test_shipped_recipes_are_parsed_once_per_process(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    load = nemo_config._load_chain

    def counting(path: Path, seen: tuple[Path, ...] = ()) -> Any:
        if not seen:
            calls.append(path.name)
        return load(path, seen)

    monkeypatch.setattr(nemo_config, "_load_chain", counting)
    nemo_config._shipped.cache_clear()
    try:
        c = cluster()
        for i in range(3):
            job = GRPOJob(name=f"parse-{i}", recipe="grpo_math_8B_megatron", model="meta-llama/Llama-3.1-8B-Instruct")
            job.preflight(c)
            job.entrypoint(c)
        assert calls == ["grpo_math_8B_megatron.yaml"]
    finally:
        nemo_config._shipped.cache_clear()


def test_problems_of_a_shared_resolution_carry_each_jobs_values() -> None:
    c = cluster()
    found = []
    for value in (1, 2):
        with pytest.raises(PreflightError) as info:
            attrs.evolve(SMALL, name=f"bad-{value}", overrides={"grpo.nonexistent": value}).preflight(c)
        found.append([(p.field, p.value) for p in info.value.problems])
    assert found == [[("grpo.nonexistent", 1)], [("grpo.nonexistent", 2)]]


def test_a_command_line_error_is_raised_each_time_it_is_read() -> None:
    job = attrs.evolve(SMALL, name="unwritable", overrides={"+policy.extra": {"not an identifier": 1}})
    resolved = job.resolve(cluster())
    for _ in range(2):
        with pytest.raises(ConfigError, match="identifier-like") as info:
            job.entrypoint(cluster())
        assert info.value.field == "overrides['+policy.extra']"
    with pytest.raises(ConfigError, match="identifier-like"):
        _ = resolved.override_args
    # Preflight reports it as a problem of that key, with the rest of the job checked.
    with pytest.raises(PreflightError) as found:
        job.preflight(cluster())
    assert [p.field for p in found.value.problems] == ["policy.extra"]


@pytest.mark.parametrize(
    "overrides",
    [
        ["e.f=3", "g=x"],
        ["c=5", "e.f=3"],
        ["a.b=2", "e.f=3"],
        ["e=4", "e.f=3"],
        ["~e.f", "e.f=1"],
        ["+e.f=1", "g=y"],
        ["e.f=1", "e.f=2"],
        ["g=${c}", "e.f=3"],
        ["h=1", "g=???"],
        ["d=7", "g='a b'"],
    ],
)
def test_shared_resolution_matches_the_full_one_on_edge_cases(overrides: list[str]) -> None:
    from omegaconf import OmegaConf

    recipe = OmegaConf.create({"a": [{"b": 1}], "c": 1, "d": "${c}", "e": {"f": 2}, "g": "s", "h": "${e}"})

    def outcome(shared: bool) -> Any:
        resolve = config_cache.resolve_shared if shared else nemo_config.resolve_overrides
        config, applied, unresolved = resolve(recipe, overrides, owner="t", version="0.4.0")
        return config, [(p.field, p.rule) for p in applied], [(p.field, p.rule) for p in unresolved]

    assert outcome(shared=True) == outcome(shared=False)
