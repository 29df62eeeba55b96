"""What rl_lustre knows about NeMo-RL: recipes, config resolution, override syntax, versions.

Everything here works offline and without NeMo-RL installed. Hydra and OmegaConf load
on first use, so importing this package stays cheap.

    >>> from rl_lustre.nemo_rl import flatten, render_override, resolve_config
    >>> cfg = flatten(resolve_config("grpo_math_70B_megatron", ["grpo.max_num_steps=20"]))
    >>> cfg["grpo.max_num_steps"], cfg["policy.megatron_cfg.tensor_model_parallel_size"]
    (20, 4)
    >>> render_override("logger.wandb.name", "grpo 70b, run 1")
    'logger.wandb.name="grpo 70b, run 1"'
"""

from __future__ import annotations

from .config import (
    available_recipes,
    flatten,
    load_recipe,
    recipe_path,
    resolve_config,
)
from .overrides import Override, parse_override, render_override, render_value
from .versions import KEY_RENAMES, KeyRename, NemoRLVersion, nemo_rl_version, version_for

__all__ = [
    "KEY_RENAMES",
    "KeyRename",
    "NemoRLVersion",
    "Override",
    "available_recipes",
    "flatten",
    "load_recipe",
    "nemo_rl_version",
    "parse_override",
    "recipe_path",
    "render_override",
    "render_value",
    "resolve_config",
    "version_for",
]
