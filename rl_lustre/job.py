"""``GRPOJob``: one NeMo-RL GRPO run, as a validated, evolvable spec."""

from __future__ import annotations

import copy
import logging
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import attrs

from . import _validate as v
from ._secrets import looks_secret
from .catalog import REFERENCE_MODEL
from .nemo_rl.caches import HF_HOME_DIR
from .nemo_rl.resolved import RESERVED_ENV as _RESERVED_ENV

if TYPE_CHECKING:
    from .cluster import Cluster
    from .nemo_rl.resolved import ResolvedJob

JOB_NAME_RULE = (
    "must be 1-63 lowercase letters, digits, '-', '_' or '.', starting and ending with a "
    "letter or digit (it names the run's directories and its Ray submission)"
)
_NO_CONTROL = r"[^\x00-\x1f\x7f-\x9f]"
_REL_PATH_RULE = "must be a relative path inside the volume (no leading '/', no '..')"
_REL_PATH = r"(?!.*(?:^|/)\.\.(?:/|$))[A-Za-z0-9_.@+-][A-Za-z0-9_.@+/-]*"
_OVERRIDE_KEY = re.compile(r"(?:\+\+?|~)?[A-Za-z_][\w-]*(?:\.[A-Za-z0-9_][\w-]*)*")

log = logging.getLogger("rl_lustre.job")


def _check_env(inst: Any, attr: attrs.Attribute[Any], value: Any) -> None:
    if not isinstance(value, Mapping):
        v.fail(inst, attr.name, value, "must be a mapping of environment variable name to value")
    v.env_name(inst, attr, value)
    for name, val in value.items():
        if looks_secret(name):
            v.fail(inst, attr.name, name,
                   "looks like a secret, and the job's environment is stored in plain text in Ray's job "
                   f"records and dashboard; list {name!r} in Cluster.secrets instead (it then reaches "
                   "the pods through a Kubernetes Secret)")
        if name in _RESERVED_ENV:
            v.fail(inst, attr.name, name, f"is set by rl_lustre ({name}={_RESERVED_ENV[name]}, which NeMo-RL needs)")
        if not isinstance(val, str):
            v.fail(inst, f"{attr.name}[{name!r}]", val, "environment values must be strings")
        _refuse_secret_value(inst, f"{attr.name}[{name!r}]", name, val)
        v.no_control(type(inst).__name__, f"{attr.name}[{name!r}]", val)


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
    from ._secrets import secret_shape

    what = secret_shape(value)
    if what is None:
        return
    if what.startswith("a Weights & Biases") and _HASH_KEY.fullmatch(key.lstrip("+")):
        return
    v.fail(inst, field, value, f"looks like {what}; {_SECRETS_ADVICE}")


def _check_overrides(inst: Any, attr: attrs.Attribute[Any], value: Any) -> None:
    from ._secrets import env_references, secret_key
    from .nemo_rl.value_rules import broken_rules

    if not isinstance(value, Mapping):
        v.fail(inst, "overrides", value,
               f"must be a mapping of NeMo-RL key to value (got {v.type_name(value)})")
    for key, val in value.items():
        if not isinstance(key, str) or not _OVERRIDE_KEY.fullmatch(key):
            v.fail(inst, "overrides", key,
                   "keys are dotted NeMo-RL config keys like 'grpo.val_period'; prefix '+' to add a key "
                   "the recipe lacks ('++' adds or replaces, '~' deletes: {'~key': None})")
        field = f"overrides[{key!r}]"
        if not _override_value_ok(val):
            v.fail(inst, field, val,
                   "values must be None, bool, int, float, str, or lists and string-keyed dicts of those")
        _refuse_secret_value(inst, field, key, val)
        if secret_key(key) and val is not None and not isinstance(val, bool):
            v.fail(inst, field, "<redacted>", f"{key.lstrip('+')!r} names a secret; {_SECRETS_ADVICE}")
        for name in env_references(val) if getattr(inst, "interpolate_overrides", True) else ():
            if looks_secret(name):
                v.fail(inst, field, val,
                       f"reads the secret {name!r} into the config, which NeMo-RL prints in full at "
                       "start-up and saves with every checkpoint; code that needs it reads it from "
                       "the environment (list it in Cluster.secrets)")
        v.no_control(type(inst).__name__, field, val)
        literal = not getattr(inst, "interpolate_overrides", True)
        for where, bad, rule in broken_rules(key, val, literal=literal):
            v.fail(inst, f"overrides[{where!r}]", bad, rule + " (the same rule as the GRPOJob field)")


@v.keyword_errors
@attrs.frozen(kw_only=True)
class GRPOJob:
    """A NeMo-RL GRPO run.

    Defaults reproduce the reference workflow's job: the v0.4.0 recipe
    ``grpo_math_70B_megatron`` on ``Qwen/Qwen2.5-72B-Instruct`` with DeepScaler,
    20 steps of 32 prompts x 8 generations, global batch 256, a checkpoint every
    2 steps keeping 2. Vary it with ``attrs.evolve``. Which key sets a knob depends on
    the recipe's training backend: the learning rate is ``policy.megatron_cfg.optimizer.lr``
    on the Megatron recipes (the default) and ``policy.optimizer.kwargs.lr`` on
    ``grpo_math_1B``, which trains with DTensor; preflight names an override under a section
    the recipe disables.

    Examples:
        >>> import attrs
        >>> from rl_lustre import Cluster, GRPOJob
        >>> job = GRPOJob(name="nemo-rl-grpo-test1")
        >>> job.recipe, job.max_num_steps
        ('grpo_math_70B_megatron', 20)
        >>> sweep = [attrs.evolve(job, name=f"lr-{i}", overrides={"policy.megatron_cfg.optimizer.lr": lr})
        ...          for i, lr in enumerate([1e-7, 3e-7])]
        >>> small = GRPOJob(name="small", recipe="grpo_math_1B", model="Qwen/Qwen2.5-1.5B")
        >>> small_sweep = [attrs.evolve(small, name=f"lr-{i}", overrides={"policy.optimizer.kwargs.lr": lr})
        ...                for i, lr in enumerate([1e-6, 3e-6])]
        >>> c = Cluster(name="demo", project="my-project", region="us-east1", zone="us-east1-b")
        >>> [j.preflight(c) for j in sweep + small_sweep]
        [[], [], [], []]

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
            to add one the recipe lacks, ``++`` to add or replace, ``~`` to delete one
            (``{"~policy.dynamic_batching": None}``). Read back as :attr:`extra_overrides`,
            since :meth:`overrides` returns every override the job passes.
        interpolate_overrides: whether ``${...}`` in the string values of ``overrides``
            is an OmegaConf interpolation that NeMo-RL resolves, as in its YAML recipes
            (True, the default: ``"${policy.max_total_sequence_length}"`` is that key's
            value), or literal text (False: the string reaches NeMo-RL exactly as
            written). The job's own fields (``model``, ``metric_name``, paths ...) are
            always literal.
        env: non-secret environment variables for the job.
        working_dir: a local directory uploaded with the job.
        excludes: ``.rayignore``-style patterns left out of ``working_dir``.
        nemo_rl_dir: where NeMo-RL lives in the image.
        max_restarts: how many times the run is started again, on the cluster, after
            worker nodes were lost (a Spot preemption); 0 turns recovery off. A failure
            with every node alive is never retried. See :mod:`rl_lustre.recovery`.
        capacity_timeout: seconds to wait, after a loss, for the GPU nodes to be back
            before giving up (the run then ends FAILED).
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
        default=REFERENCE_MODEL,
        validator=v.matches(r"[^\s'\"\\\x00-\x1f\x7f]+",
                            "must be a Hugging Face model id or path without spaces, quotes or control characters"),
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
    metric_name: str | None = attrs.field(
        default=None,
        validator=v.matches(_NO_CONTROL + "+", "must be a metric like 'val:accuracy' or None", optional=True)
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
        alias="overrides", factory=dict, converter=v.to_frozen_mapping, validator=_check_overrides
    )
    interpolate_overrides: bool = attrs.field(default=True, validator=v.boolean)
    env: Mapping[str, str] = attrs.field(factory=dict, converter=v.to_frozen_mapping, validator=_check_env)
    working_dir: str | None = attrs.field(
        default=None,
        validator=v.matches(_NO_CONTROL + "+", "must be a local directory path without control characters",
                            optional=True)
    )
    excludes: tuple[str, ...] = attrs.field(
        default=(), converter=v.to_tuple,
        validator=[v.names, attrs.validators.deep_iterable(
            v.matches(_NO_CONTROL + "+", "must be a non-empty .rayignore-style pattern without control characters")
        )],
    )
    nemo_rl_dir: str = attrs.field(
        default="/opt/nemo-rl",
        validator=v.matches(r"/[^\s'\"\x00-\x1f\x7f]*", "must be an absolute path without spaces or control characters")
    )
    max_restarts: int = attrs.field(default=3, validator=v.integer(min=0, max=100))
    capacity_timeout: float = attrs.field(default=1800.0, validator=v.number(gt=0, le=7 * 24 * 3600))
    # Resolutions of this job by cluster (see resolve); not part of the spec.
    _resolved: _Resolutions = attrs.field(factory=lambda: _Resolutions(), init=False, repr=False, eq=False, hash=False)

    @property
    def recipe_name(self) -> str:
        """The recipe without a ``.yaml`` suffix."""
        from .nemo_rl.config import recipe_name

        return recipe_name(self.recipe)

    def resolve(self, cluster: Cluster) -> ResolvedJob:
        """This job rendered for ``cluster``, once: version, overrides, config, command, findings.

        Built on first use and kept on the job (specs are frozen, so the job and the
        cluster are the key); :meth:`overrides`, :meth:`entrypoint`, :meth:`preflight`,
        ``cluster.submit`` and sweeps all read it. See
        :class:`~rl_lustre.nemo_rl.resolved.ResolvedJob`.

        Examples:
            >>> from rl_lustre import Cluster, GRPOJob
            >>> c = Cluster(name="demo", project="my-project", region="us-east1", zone="us-east1-b")
            >>> job = GRPOJob(name="run-1")
            >>> job.resolve(c) is job.resolve(c), job.resolve(c).version.version
            (True, '0.4.0')
        """
        from .nemo_rl.resolved import resolve_job

        _need_cluster("resolve", cluster)
        try:
            return self._resolved[cluster]
        except KeyError:
            resolved = self._resolved[cluster] = resolve_job(self, cluster)
            return resolved

    def checkpoint_dir(self, cluster: Cluster) -> str:
        """``<mount>/<checkpoint_root>/<name>``: where NeMo-RL saves and resumes this run.

        Examples:
            >>> from rl_lustre import Cluster, GRPOJob
            >>> c = Cluster(name="demo", project="my-project", region="us-east1", zone="us-east1-b")
            >>> GRPOJob(name="run-1").checkpoint_dir(c)
            '/lustre/checkpoints/run-1'
        """
        return self.resolve(cluster).checkpoint_dir

    def log_dir(self, cluster: Cluster) -> str:
        """``<mount>/<log_root>/<name>``; NeMo-RL adds an ``exp_NNN`` folder per start."""
        return self.resolve(cluster).log_dir

    def hf_home_path(self, cluster: Cluster) -> str:
        """``HF_HOME`` on the volume, shared by every node."""
        return self.resolve(cluster).hf_home

    def nemo_rl_version_for(self, cluster: Cluster) -> str:
        """The NeMo-RL version this job runs on ``cluster``: the job's, the image's, or 0.4.0."""
        return self.resolve(cluster).version.version

    def overrides(self, cluster: Cluster) -> dict[str, Any]:
        """Every NeMo-RL override this job passes, in order: dotted key → typed value.

        The order is the reference command's, then ``logger.log_dir`` (on the volume),
        ``logger.wandb.project`` when set, then the job's own ``overrides``. A key of
        those that we also set replaces our value in place; a key written ``+key`` is
        added to the recipe (the ``+`` stays in the key).

        Examples:
            >>> from rl_lustre import Cluster, GRPOJob
            >>> c = Cluster(name="demo", project="my-project", region="us-east1", zone="us-east1-b")
            >>> o = GRPOJob(name="run-1", overrides={"grpo.max_num_steps": 5}).overrides(c)
            >>> o["policy.megatron_cfg.converter_type"], o["grpo.max_num_steps"], o["cluster.num_nodes"]
            ('Qwen2ForCausalLM', 5, 8)
        """
        return copy.deepcopy(dict(self.resolve(cluster).overrides))

    def override_args(self, cluster: Cluster) -> list[str]:
        """:meth:`overrides` as Hydra override strings (not yet shell-quoted).

        Examples:
            >>> from rl_lustre import Cluster, GRPOJob
            >>> c = Cluster(name="demo", project="my-project", region="us-east1", zone="us-east1-b")
            >>> GRPOJob(name="run-1").override_args(c)[:2]
            ['policy.model_name=Qwen/Qwen2.5-72B-Instruct', 'policy.megatron_cfg.converter_type=Qwen2ForCausalLM']

        Raises:
            ConfigError: a value cannot be written so that Hydra reads it back unchanged, or
                an override sets a secret-looking environment variable.
        """
        return self.resolve(cluster).override_args

    def entrypoint(self, cluster: Cluster) -> str:
        """The exact shell command the Ray job runs.

        On GKE (and locally with ``nemo_rl_path``) NeMo-RL's own GRPO example; locally
        without NeMo-RL, the rehearsal driver with the same config and overrides.

        Examples:
            >>> from rl_lustre import Cluster, GRPOJob
            >>> c = Cluster(name="demo", project="my-project", region="us-east1", zone="us-east1-b")
            >>> GRPOJob(name="run-1").entrypoint(c)[:112]
            'cd /opt/nemo-rl && uv run python examples/run_grpo_math.py --config examples/configs/grpo_math_70B_megatron.yaml'

        Raises:
            ConfigError: as :meth:`override_args`.
        """
        return self.resolve(cluster).entrypoint

    def runtime_env(self, cluster: Cluster) -> dict[str, Any]:
        """The Ray runtime env of the job: ``env_vars`` and, when set, ``working_dir``/``excludes``.

        Holds ``RAY_OVERRIDE_JOB_RUNTIME_ENV=1`` (NeMo-RL needs it under ``ray job submit``),
        every cache NeMo-RL keeps, on the volume (``HF_HOME``, the converted Megatron
        checkpoints, the compile caches: :func:`~rl_lustre.nemo_rl.caches.nemo_rl_cache_env`),
        so a second submit or a restart computes none of it again, and :attr:`env`. Never a
        secret: those reach the pods through the cluster's Kubernetes Secret
        (:attr:`Cluster.secrets`).

        Examples:
            >>> from rl_lustre import Cluster, GRPOJob
            >>> c = Cluster(name="demo", project="my-project", region="us-east1", zone="us-east1-b")
            >>> env = GRPOJob(name="run-1").runtime_env(c)["env_vars"]
            >>> env["RAY_OVERRIDE_JOB_RUNTIME_ENV"], env["HF_HOME"], env["NRL_MEGATRON_CHECKPOINT_DIR"]
            ('1', '/lustre/huggingface_cache', '/lustre/huggingface_cache/nemo_rl')

        Raises:
            ConfigError: an :attr:`env` name is one of ``cluster.secrets``.
        """
        return self.resolve(cluster).runtime_env

    def preflight(self, cluster: Cluster) -> list[str]:
        """Check offline that NeMo-RL will accept this job and that it fits ``cluster``.

        Resolves the recipe with the job's overrides exactly as NeMo-RL does, then
        checks batch arithmetic, parallelism against the GPUs, the checkpoint metric,
        the dataset name and whether the checkpoints fit the volume. See
        :mod:`rl_lustre.nemo_rl.preflight`.

        Examples:
            >>> from rl_lustre import Cluster, GRPOJob
            >>> c = Cluster(name="demo", project="my-project", region="us-east1", zone="us-east1-b")
            >>> GRPOJob(name="run-1").preflight(c)
            []

        Returns:
            Warnings: things that may be fine but deserve a look.

        Raises:
            PreflightError: every problem found, each naming the key, value and rule.
        """
        warnings = self.resolve(cluster).preflight()
        for w in warnings:
            log.warning("preflight %s: %s", self.name, w)
        return warnings


class _Resolutions(dict[Any, Any]):
    """A job's resolutions by cluster; pickled empty, since they are rebuilt on demand."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (_Resolutions, ())


def _need_cluster(method: str, cluster: Any) -> None:
    from .cluster import Cluster

    v.need(f"GRPOJob.{method}", "cluster", cluster, Cluster, "a Cluster")
