"""``GRPOJob``: one NeMo-RL GRPO run, as a validated, evolvable spec."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import attrs

from . import _validate as v

if TYPE_CHECKING:
    from .cluster import Cluster

JOB_NAME_RULE = (
    "must be 1-63 lowercase letters, digits, '-', '_' or '.', starting and ending with a "
    "letter or digit (it names the run's directories and its Ray submission)"
)
_REL_PATH_RULE = "must be a relative path inside the volume (no leading '/', no '..')"
_REL_PATH = r"(?!.*(?:^|/)\.\.(?:/|$))[A-Za-z0-9_.@+-][A-Za-z0-9_.@+/-]*"


@attrs.frozen(kw_only=True)
class GRPOJob:
    """A NeMo-RL GRPO run.

    Defaults reproduce the reference workflow's job: the v0.4.0 recipe
    ``grpo_math_70B_megatron`` on ``Qwen/Qwen2.5-72B-Instruct`` with DeepScaler,
    20 steps of 32 prompts × 8 generations, global batch 256, a checkpoint every
    2 steps keeping 2. Vary it with ``attrs.evolve``::

        sweep = [attrs.evolve(base, name=f"lr-{i}", overrides={"policy.megatron_cfg.optimizer.lr": lr})
                 for i, lr in enumerate([1e-7, 3e-7])]

    Example:
        >>> from rl_lustre import GRPOJob
        >>> job = GRPOJob(name="nemo-rl-grpo-test1")
        >>> job.recipe, job.max_num_steps
        ('grpo_math_70B_megatron', 20)

    Args:
        name: the run name; names its checkpoint and log directories, the W&B run
            and the Ray submission id.
        recipe: a NeMo-RL recipe name (``examples/configs/<recipe>.yaml`` in the image).
        nemo_rl_version: the NeMo-RL version; by default the cluster image's.
        model: ``policy.model_name``.
        converter_type: Megatron's HF converter; inferred from the model family when omitted.
        dataset: the dataset name (``data.dataset_name``; ``data.train.dataset_name`` from v0.6.0).
        max_num_steps: ``grpo.max_num_steps``.
        num_prompts_per_step: ``grpo.num_prompts_per_step``.
        num_generations_per_prompt: ``grpo.num_generations_per_prompt``.
        train_global_batch_size: ``policy.train_global_batch_size``.
        checkpointing: ``checkpointing.enabled``.
        save_period: ``checkpointing.save_period``.
        keep_top_k: ``checkpointing.keep_top_k`` (None keeps all).
        metric_name: ``checkpointing.metric_name``: ``"val:<m>"``, ``"train:<m>"`` or None
            (then the newest checkpoints are kept).
        checkpoint_root: the directory under the mount path holding ``<name>/`` checkpoints.
        log_root: the directory under the mount path holding ``<name>/`` logs.
        hf_home: the Hugging Face cache under the mount path (``HF_HOME``).
        wandb: ``logger.wandb_enabled``; needs ``WANDB_API_KEY`` among the cluster's secrets.
        wandb_project: ``logger.wandb.project``.
        overrides: more NeMo-RL overrides, dotted key → value; prefix a key with ``+``
            to add one the recipe lacks.
        env: non-secret environment variables for the job.
        working_dir: a local directory uploaded with the job.
        excludes: ``.rayignore``-style patterns left out of ``working_dir``.
        nemo_rl_dir: where NeMo-RL lives in the image.
    """

    name: str = attrs.field(validator=v.matches(r"[a-z0-9](?:[a-z0-9._-]{0,61}[a-z0-9])?", JOB_NAME_RULE))
    recipe: str = attrs.field(
        default="grpo_math_70B_megatron",
        validator=v.matches(r"[A-Za-z0-9_.-]+(?:\.ya?ml)?", "must be a recipe name like 'grpo_math_70B_megatron'"),
    )
    nemo_rl_version: str | None = attrs.field(
        default=None, validator=v.matches(r"\d+\.\d+\.\d+", "must be a version like '0.4.0'", optional=True)
    )
    model: str = attrs.field(
        default="Qwen/Qwen2.5-72B-Instruct",
        validator=v.matches(r"[^\s'\"\\]+", "must be a Hugging Face model id or path without spaces or quotes"),
    )
    converter_type: str | None = attrs.field(
        default=None, validator=v.matches(r"[A-Za-z0-9_]+", "must be a class name like 'Qwen2ForCausalLM'", optional=True)
    )
    dataset: str = attrs.field(
        default="DeepScaler", validator=v.matches(r"[A-Za-z0-9_./-]+", "must be a dataset name like 'DeepScaler'")
    )
    max_num_steps: int = attrs.field(default=20, validator=v.integer(min=1))
    num_prompts_per_step: int = attrs.field(default=32, validator=v.integer(min=1))
    num_generations_per_prompt: int = attrs.field(default=8, validator=v.integer(min=1))
    train_global_batch_size: int = attrs.field(default=256, validator=v.integer(min=1))
    checkpointing: bool = attrs.field(default=True, validator=v.boolean)
    save_period: int = attrs.field(default=2, validator=v.integer(min=1))
    keep_top_k: int | None = attrs.field(default=2, validator=v.integer(min=1, optional=True))
    metric_name: str | None = attrs.field(default=None)
    checkpoint_root: str = attrs.field(default="checkpoints", validator=v.matches(_REL_PATH, _REL_PATH_RULE))
    log_root: str = attrs.field(default="logs", validator=v.matches(_REL_PATH, _REL_PATH_RULE))
    hf_home: str = attrs.field(default="huggingface_cache", validator=v.matches(_REL_PATH, _REL_PATH_RULE))
    wandb: bool = attrs.field(default=False, validator=v.boolean)
    wandb_project: str | None = attrs.field(
        default=None, validator=v.matches(r"[A-Za-z0-9_.-]{1,128}", "must be a W&B project name", optional=True)
    )
    overrides: Mapping[str, Any] = attrs.field(factory=dict, converter=v.to_frozen_mapping)
    env: Mapping[str, str] = attrs.field(factory=dict, converter=v.to_frozen_mapping)
    working_dir: str | None = attrs.field(default=None)
    excludes: tuple[str, ...] = attrs.field(default=(), converter=v.to_tuple)
    nemo_rl_dir: str = attrs.field(
        default="/opt/nemo-rl", validator=v.matches(r"/[^\s'\"]*", "must be an absolute path without spaces")
    )
