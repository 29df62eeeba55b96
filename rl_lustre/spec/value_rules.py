"""The rules a NeMo-RL config value must follow, whether set by a field or by an override.

``GRPOJob(max_num_steps=-1)`` is refused by the field's validator; the same number set
as ``overrides={"grpo.max_num_steps": -1}`` must be refused too, by the same rule, and
before anything runs. NeMo-RL itself would accept some of these and fail much later
(a negative step count trains nothing, ``keep_top_k=0`` deletes every checkpoint but
the newest, a NaN learning rate trains to NaN).

A string holding an interpolation (``${...}``) is resolved by NeMo-RL, so it is not
checked here; preflight checks the resolved value.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from typing import Any

# (rule text, check) by dotted key as spelled at NeMo-RL 0.4.0 and its renames.
Rule = tuple[str, Callable[[Any], bool]]


def _whole(minimum: int, *, optional: bool = False) -> Rule:
    text = f"must be a whole number of at least {minimum}" + (" or None" if optional else "")

    def check(x: Any) -> bool:
        if x is None:
            return optional
        return isinstance(x, int) and not isinstance(x, bool) and x >= minimum

    return text, check


def _flag(x: Any) -> bool:
    return isinstance(x, bool)


def _rate(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x >= 0


_RULES: dict[str, Rule] = {
    "grpo.max_num_steps": _whole(1),
    "grpo.max_num_epochs": _whole(1),
    "grpo.num_prompts_per_step": _whole(1),
    "grpo.num_generations_per_prompt": _whole(1),
    "grpo.val_period": _whole(0),
    "grpo.val_batch_size": _whole(1),
    "policy.train_global_batch_size": _whole(1),
    "policy.train_micro_batch_size": _whole(1),
    "policy.generation_batch_size": _whole(1),
    "policy.logprob_batch_size": _whole(1),
    "policy.max_total_sequence_length": _whole(1),
    "cluster.num_nodes": _whole(1),
    "cluster.gpus_per_node": _whole(1),
    "checkpointing.save_period": _whole(1),
    "checkpointing.keep_top_k": _whole(1, optional=True),
    "checkpointing.enabled": ("must be True or False", _flag),
    "logger.wandb_enabled": ("must be True or False", _flag),
}
# Learning rates wherever they sit (optimizer kwargs, Megatron optimizer, schedulers).
_LR_KEY = re.compile(r"(?:.*\.)?(?:lr|min_lr|max_lr|learning_rate|[a-z_]*_lr)")
_LR_RULE: Rule = ("a learning rate must be a finite number of at least 0 (not NaN, inf or negative)", _rate)


def rule_for(key: str) -> Rule | None:
    """The rule for a dotted key (a leading ``+``/``++`` ignored), if rl_lustre knows one.

    Examples:
        >>> rule_for("grpo.max_num_steps")[0]
        'must be a whole number of at least 1'
        >>> rule_for("+policy.megatron_cfg.optimizer.lr")[0].startswith("a learning rate")
        True
        >>> rule_for("policy.model_name") is None
        True
    """
    bare = key.lstrip("+")
    bare = "data.dataset_name" if bare == "data.train.dataset_name" else bare
    if bare in _RULES:
        return _RULES[bare]
    if _LR_KEY.fullmatch(bare):
        return _LR_RULE
    return None


def _interpolated(value: Any) -> bool:
    return isinstance(value, str) and "${" in value


def broken_rules(key: str, value: Any, *, literal: bool = False) -> list[tuple[str, Any, str]]:
    """``(key, value, rule)`` for each value under ``key`` that breaks its rule.

    A mapping value is walked, so ``{"grpo": {"max_num_steps": -1}}`` is caught too.
    With ``literal``, a string holding ``${...}`` is text like any other.

    Examples:
        >>> broken_rules("checkpointing.keep_top_k", 0)
        [('checkpointing.keep_top_k', 0, 'must be a whole number of at least 1 or None')]
        >>> broken_rules("grpo", {"max_num_steps": 5, "val_period": -1})[0][:2]
        ('grpo.val_period', -1)
    """
    out: list[tuple[str, Any, str]] = []
    if isinstance(value, Mapping):
        prefix = key.lstrip("+")
        for k, v in value.items():
            out += broken_rules(f"{prefix}.{k}", v, literal=literal)
        return out
    rule = rule_for(key)
    if rule is None or (_interpolated(value) and not literal):
        return out
    text, check = rule
    if not check(value):
        out.append((key.lstrip("+"), value, text))
    return out
