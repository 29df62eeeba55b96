"""``JobSpec``: the fields and rules of a NeMo-RL GRPO run (``GRPOJob``'s spec)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeAlias, cast

import attrs

from .. import _validate as v
from .._secrets import REDACTED, looks_secret
from ..catalog import HF_HOME_DIR, REFERENCE_MODEL, RESERVED_ENV
from ..errors import ConfigError

__all__ = ["JOB_NAME_RULE", "JobSpec", "secret_in_env"]

JOB_NAME_RULE = (
    "must be 1-63 lowercase letters, digits, '-', '_' or '.', starting and ending with a "
    "letter or digit (it names the run's directories and its Ray submission)"
)
_NO_CONTROL = r"[^\x00-\x1f\x7f-\x9f]"
_REL_PATH_RULE = "must be a relative path inside the volume (no leading '/', no '..')"
_REL_PATH = r"(?!.*(?:^|/)\.\.(?:/|$))[A-Za-z0-9_.@+-][A-Za-z0-9_.@+/-]*"
_OVERRIDE_KEY = re.compile(r"(?:\+\+?|~)?[A-Za-z_][\w-]*(?:\.[A-Za-z0-9_][\w-]*)*")


def secret_in_env(env: Iterable[str], secrets: Iterable[str]) -> ConfigError | None:
    """The error for the first variable of a job's environment ``env`` that is one of the
    cluster's ``secrets``, or None: a secret reaches the job through the cluster, never
    through the job's environment, which Ray stores in plain text.

    Examples:
        >>> print(secret_in_env({"A": "1", "HF_TOKEN": "x"}, ("HF_TOKEN",)))  # doctest: +ELLIPSIS
        GRPOJob.env='HF_TOKEN': is one of the cluster's secrets; secrets reach jobs through the cluster ...
        >>> secret_in_env({"A": "1"}, ("HF_TOKEN",)) is None
        True
    """
    secret = set(secrets)
    name = next((name for name in env if name in secret), None)
    if name is None:
        return None
    return ConfigError(
        "GRPOJob", "env", name,
        "is one of the cluster's secrets; secrets reach jobs through the cluster (a Kubernetes "
        "Secret, or the local head's environment), never through the job's environment, which "
        "Ray stores in plain text",
    )  # fmt: skip


def _check_env(inst: Any, attr: attrs.Attribute[Any], value: Any) -> None:
    if not isinstance(value, Mapping):
        v.fail(inst, v.field_name(attr), value, "must be a mapping of environment variable name to value")
    v.env_name(inst, attr, value)
    for name, val in value.items():
        if looks_secret(name):
            v.fail(
                inst,
                v.field_name(attr),
                name,
                "looks like a secret, and the job's environment is stored in plain text in Ray's job "
                f"records and dashboard; list {name!r} in Cluster.secrets instead (it then reaches "
                "the pods through a Kubernetes Secret)",
            )
        if name in RESERVED_ENV:
            v.fail(
                inst,
                v.field_name(attr),
                name,
                f"is set by rl_lustre ({name}={RESERVED_ENV[name]}, which NeMo-RL needs)",
            )
        if not isinstance(val, str):
            v.fail(inst, f"{v.field_name(attr)}[{name!r}]", val, "environment values must be strings")
        _refuse_secret_value(inst, f"{v.field_name(attr)}[{name!r}]", name, val)
        v.no_control(type(inst).__name__, f"{v.field_name(attr)}[{name!r}]", val)


# A NeMo-RL override's value, as Hydra takes it: a scalar, or a list or mapping of them.
OverrideValue: TypeAlias = "str | int | float | bool | Sequence[OverrideValue] | Mapping[str, OverrideValue] | None"


def _overrides(value: Mapping[str, OverrideValue]) -> Mapping[str, Any]:
    """Converter of ``overrides``: an immutable, hashable copy (checked by ``_check_overrides``)."""
    return cast("Mapping[str, Any]", v.to_frozen_mapping(value))


def _override_value_ok(value: Any) -> bool:
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    if isinstance(value, (list, tuple)):
        return all(_override_value_ok(x) for x in value)
    if isinstance(value, Mapping):
        return all(isinstance(k, str) and _override_value_ok(x) for k, x in value.items())
    return False


# A 40-hex-digit value is a W&B key's shape, and also a git commit's.
_HASH_KEY = re.compile(r"(?:.*[._])?(?:revision|commit|sha|hash|git_sha|commit_id)", re.IGNORECASE)
_SECRETS_ADVICE = (
    "secrets must not be written into a job: it would be stored in plain text in the job's "
    "command line, Ray's job records and logs. Put the value in an environment variable and "
    "list its name in Cluster.secrets, e.g. Cluster(secrets=['HF_TOKEN']) (the pods get it from a "
    "Kubernetes Secret)"
)


def _refuse_secret_value(inst: Any, field: str, key: str, value: Any) -> None:
    from .._secrets import secret_shape

    what = secret_shape(value)
    if what is None:
        return
    if what.startswith("a Weights & Biases") and _HASH_KEY.fullmatch(key.lstrip("+")):
        return
    v.fail(inst, field, value, f"looks like {what}; {_SECRETS_ADVICE}")


def _mapping_keys(value: Any) -> Iterator[str]:
    """The keys of the mappings nested in an override's value."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            yield str(key)
            yield from _mapping_keys(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _mapping_keys(item)


def _check_overrides(inst: Any, attr: attrs.Attribute[Any], value: Any) -> None:
    from .._secrets import env_references, secret_key
    from .value_rules import broken_rules

    if not isinstance(value, Mapping):
        v.fail(inst, "overrides", value, f"must be a mapping of NeMo-RL key to value (got {v.type_name(value)})")
    for key, val in value.items():
        if not isinstance(key, str) or not _OVERRIDE_KEY.fullmatch(key):
            v.fail(
                inst,
                "overrides",
                key,
                "keys are dotted NeMo-RL config keys like 'grpo.val_period'; prefix '+' to add a key "
                "the recipe lacks ('++' adds or replaces, '~' deletes: {'~key': None})",
            )
        field = f"overrides[{key!r}]"
        if not _override_value_ok(val):
            v.fail(
                inst, field, val, "values must be None, bool, int, float, str, or lists and string-keyed dicts of those"
            )
        _refuse_secret_value(inst, field, key, val)
        if secret_key(key) and val is not None and not isinstance(val, bool):
            v.fail(inst, field, REDACTED, f"{key.lstrip('+')!r} names a secret; {_SECRETS_ADVICE}")
        for name in env_references(val) if getattr(inst, "interpolate_overrides", True) else ():
            if looks_secret(name):
                v.fail(
                    inst,
                    field,
                    val,
                    f"reads the secret {name!r} into the config, which NeMo-RL prints in full at "
                    "start-up and saves with every checkpoint; code that needs it reads it from "
                    "the environment (list it in Cluster.secrets)",
                )
        # A value may hold newlines and tabs (NeMo-RL's stop strings); the keys inside it may not.
        v.no_control(type(inst).__name__, field, val, allow=v.VALUE_WHITESPACE)
        for inner in _mapping_keys(val):
            v.no_control(type(inst).__name__, field, inner)
        literal = not getattr(inst, "interpolate_overrides", True)
        for where, bad, rule in broken_rules(key, val, literal=literal):
            v.fail(inst, f"overrides[{where!r}]", bad, rule + " (the same rule as the GRPOJob field)")


@v.keyword_errors
@attrs.frozen(kw_only=True)
class JobSpec:
    """The frozen, validated fields of a NeMo-RL GRPO run; see :class:`rl_lustre.GRPOJob`,
    which adds its rendering for a cluster (overrides, command, preflight) and documents
    every field."""

    name: str = attrs.field(validator=v.matches(r"[a-z0-9](?:[a-z0-9._-]{0,61}[a-z0-9])?", JOB_NAME_RULE))
    recipe: str = attrs.field(
        default="grpo_math_70B_megatron",
        validator=v.matches(r"[A-Za-z0-9_.-]+(?:\.ya?ml)?", "must be a recipe name like 'grpo_math_70B_megatron'"),
    )
    nemo_rl_version: str | None = attrs.field(
        default=None, validator=v.matches(r"\d+\.\d+\.\d+", "must be a version like '0.4.0'", optional=True)
    )
    model: str = attrs.field(
        default=REFERENCE_MODEL,
        validator=v.matches(
            r"[^\s'\"\\\x00-\x1f\x7f]+",
            "must be a Hugging Face model id or path without spaces, quotes or control characters",
        ),
    )
    converter_type: str | None = attrs.field(
        default=None,
        validator=v.matches(r"[A-Za-z0-9_]+", "must be a class name like 'Qwen2ForCausalLM'", optional=True),
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
    metric_name: str | None = attrs.field(
        default=None,
        validator=v.matches(_NO_CONTROL + "+", "must be a metric like 'val:accuracy' or None", optional=True),
    )
    checkpoint_root: str = attrs.field(default="checkpoints", validator=v.matches(_REL_PATH, _REL_PATH_RULE))
    log_root: str = attrs.field(default="logs", validator=v.matches(_REL_PATH, _REL_PATH_RULE))
    hf_home: str = attrs.field(default=HF_HOME_DIR, validator=v.matches(_REL_PATH, _REL_PATH_RULE))
    wandb: bool = attrs.field(default=False, validator=v.boolean)
    wandb_project: str | None = attrs.field(
        default=None, validator=v.matches(r"[A-Za-z0-9_.-]{1,128}", "must be a W&B project name", optional=True)
    )
    # Passed as ``overrides=``; stored under another name because ``overrides(cluster)`` is
    # the method that returns every override the job sends.
    extra_overrides: Mapping[str, Any] = attrs.field(
        alias="overrides", factory=dict, converter=_overrides, validator=_check_overrides
    )
    interpolate_overrides: bool = attrs.field(default=True, validator=v.boolean)
    env: Mapping[str, str] = attrs.field(factory=dict, converter=v.string_mapping, validator=_check_env)
    working_dir: str | None = attrs.field(
        default=None,
        validator=v.matches(
            _NO_CONTROL + "+", "must be a local directory path without control characters", optional=True
        ),
    )
    excludes: tuple[str, ...] = attrs.field(
        default=(),
        converter=v.strings,
        validator=[
            v.names,
            attrs.validators.deep_iterable(
                v.matches(_NO_CONTROL + "+", "must be a non-empty .rayignore-style pattern without control characters")
            ),
        ],
    )
    nemo_rl_dir: str = attrs.field(
        default="/opt/nemo-rl",
        validator=v.matches(
            r"/[^\s'\"\x00-\x1f\x7f]*", "must be an absolute path without spaces or control characters"
        ),
    )
    max_restarts: int = attrs.field(default=3, validator=v.integer(min=0, max=100))
    capacity_timeout: float = attrs.field(default=1800.0, validator=v.number(gt=0, le=7 * 24 * 3600))
    hang_timeout: float | None = attrs.field(
        default=None, validator=attrs.validators.optional(v.number(gt=0, le=7 * 24 * 3600))
    )
    startup_timeout: float = attrs.field(default=3600.0, validator=v.number(gt=0, le=7 * 24 * 3600))
    num_nodes: int | None = attrs.field(default=None, validator=v.integer(min=1, max=1000, optional=True))
    priority: int = attrs.field(default=0, validator=v.integer(min=-1000, max=1000))
    backfill_window: float = attrs.field(default=3600.0, validator=v.number(ge=0, le=7 * 24 * 3600))
    # Renderings of this job by cluster (rl_lustre.nemo_rl.resolved.resolve); not part of the spec.
    _resolved: _Resolutions = attrs.field(factory=lambda: _Resolutions(), init=False, repr=False, eq=False, hash=False)


class _Resolutions(dict[Any, Any]):
    """A job's resolutions by cluster; pickled empty, since they are rebuilt on demand."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (_Resolutions, ())
