"""A job rendered once for one cluster: what it runs, with which config, and what preflight found.

:func:`resolve_job` walks a ``GRPOJob`` down to what the Jobs API receives, in one
pass: the NeMo-RL version, the ordered overrides, their Hydra spelling, the recipe
with those overrides applied and resolved, the preflight findings, the entrypoint and
the runtime env. It reads the job's and the cluster's fields and never calls back
into them, so the walk of a submission reads top-down::

    GRPOJob, Cluster (specs) -> ResolvedJob (this module) -> backend (Jobs API)

:func:`resolve` (``GRPOJob.resolve(cluster)``) caches the result on the job, so ``overrides()``,
``entrypoint()``, ``preflight()``, ``cluster.submit()`` and sweeps all read the same
object. What depends on the moment rather than on the specs (the free space of a local
volume, the secrets in this process's environment) is checked when it is asked for.
"""

from __future__ import annotations

import copy
import logging
import posixpath
import shlex
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import attrs

from .._command import number
from .._secrets import REDACTED
from .._validate import FrozenDict
from ..catalog import RESERVED_ENV
from ..errors import ConfigError, PreflightError
from ..spec.job import secret_in_env
from .versions import DEFAULT_VERSION, NemoRLVersion, choose_version, nemo_rl_version

if TYPE_CHECKING:
    from ..spec import ClusterSpec, JobSpec

__all__ = ["RESERVED_ENV", "ResolvedJob", "resolve", "resolve_job"]

# Bytecode left in an uploaded working_dir by a local run; never uploaded.
ALWAYS_EXCLUDED = ("__pycache__/", "*.pyc")

OWNER = "GRPOJob"

log = logging.getLogger("rl_lustre.job")


@attrs.frozen(eq=False, repr=False)
class ResolvedJob:
    """One ``GRPOJob`` rendered for one ``Cluster``; built by :func:`resolve_job`.

    Immutable. Everything is computed at construction; the parts that can be invalid
    (the command line, the runtime env, preflight) raise when read, as the job's own
    methods do.

    Examples:
        >>> from rl_lustre import Cluster, GRPOJob
        >>> c = Cluster(name="demo", project="my-project", region="us-east1", zone="us-east1-b")
        >>> r = GRPOJob(name="run-1").resolve(c)
        >>> r.version.version, r.overrides["cluster.num_nodes"], r.checkpoint_dir
        ('0.4.0', 8, '/lustre/checkpoints/run-1')
        >>> r.preflight(), r.config["grpo"]["max_num_steps"]
        ([], 20)

    Attributes:
        job: the spec.
        cluster: the cluster it was resolved for.
        version: the NeMo-RL version the job runs.
        overrides: every override the job passes, in order (dotted key -> typed value).
        num_nodes: the GPU nodes the job takes (its ``cluster.num_nodes`` in force): its
            size in the cluster's queue.
        checkpoint_dir: where NeMo-RL saves and resumes: ``checkpointing.checkpoint_dir``
            in force (``<mount>/<checkpoint_root>/<name>`` unless an override moves it).
        log_dir: NeMo-RL's ``logger.log_dir`` in force, likewise.
        checkpointing: whether NeMo-RL saves checkpoints (``checkpointing.enabled`` in force).
        hf_home: ``HF_HOME`` on the volume.
        warnings: the preflight warnings that follow from the specs alone.
        problems: the preflight problems that follow from the specs alone.
    """

    job: JobSpec
    cluster: ClusterSpec
    version: NemoRLVersion
    overrides: Mapping[str, Any]
    num_nodes: int
    checkpoint_dir: str
    log_dir: str
    checkpointing: bool
    hf_home: str
    warnings: tuple[str, ...]
    problems: tuple[ConfigError, ...]
    _config: dict[str, Any] | None
    _flat: dict[str, Any] | None
    _args: tuple[str, ...]
    _args_error: ConfigError | None
    _entrypoint: str
    _runtime_env: Mapping[str, Any]
    _env_error: ConfigError | None

    def __repr__(self) -> str:
        return f"ResolvedJob({self.job.name!r} on {self.cluster.name!r}, NeMo-RL {self.version.version})"

    @property
    def config(self) -> dict[str, Any] | None:
        """The config NeMo-RL would run (recipe + overrides, resolved), as a fresh nested dict.

        None when the recipe is not one rl_lustre ships, or does not resolve (see :attr:`problems`).
        """
        return copy.deepcopy(self._config)

    @property
    def override_args(self) -> list[str]:
        """:attr:`overrides` as Hydra override strings (not yet shell-quoted).

        Raises:
            ConfigError: a value cannot be written so that Hydra reads it back unchanged,
                or an override sets a secret-looking environment variable.
        """
        _reraise(self._args_error)
        return list(self._args)

    @property
    def entrypoint(self) -> str:
        """The exact shell command the Ray job runs.

        Raises:
            ConfigError: as :attr:`override_args`.
        """
        _reraise(self._args_error)
        return self._entrypoint

    @property
    def runtime_env(self) -> dict[str, Any]:
        """The job's Ray runtime env (a fresh copy; never a secret).

        Raises:
            ConfigError: an environment variable of the job is one of ``cluster.secrets``.
        """
        _reraise(self._env_error)
        return copy.deepcopy(dict(self._runtime_env))

    def value(self, key: str, default: Any = None) -> Any:
        """The value of the dotted ``key`` NeMo-RL runs with: the resolved config's, else
        the job's or our override's (``key``, ``+key`` or ``++key``), else ``default``.

        Examples:
            >>> from rl_lustre import Cluster, GRPOJob
            >>> c = Cluster(name="demo", project="my-project", region="us-east1", zone="us-east1-b")
            >>> r = GRPOJob(name="run-1", overrides={"++grpo.max_num_steps": 7}).resolve(c)
            >>> r.value("grpo.max_num_steps"), r.value("no.such.key", "x")
            (7, 'x')
        """
        return _in_force(key, default, self._flat, self.overrides)

    def preflight(self) -> list[str]:
        """The preflight findings: returns the warnings, raises on problems.

        Adds to :attr:`problems` and :attr:`warnings` what must be looked at now: the
        space for checkpoints on the volume.

        Raises:
            PreflightError: every problem, each naming the key, value and rule.
        """
        from .preflight import check_storage

        problems = list(self.problems)
        warnings = list(self.warnings)
        if self._flat is not None:
            more_problems, more_warnings = check_storage(self._flat, self.cluster)
            problems += more_problems
            warnings += more_warnings
        if problems:
            raise PreflightError(problems)
        for w in warnings:
            log.warning("preflight %s: %s", self.job.name, w)
        return warnings


def _reraise(error: ConfigError | None) -> None:
    if error is not None:
        raise error.with_traceback(None)


def resolve(job: JobSpec, cluster: ClusterSpec) -> ResolvedJob:
    """``job`` rendered for ``cluster``: built by :func:`resolve_job` on first use, then
    kept on the job (specs are frozen, so the job and the cluster are the key).

    Examples:
        >>> from rl_lustre import Cluster, GRPOJob
        >>> c = Cluster(name="demo", project="my-project", region="us-east1", zone="us-east1-b")
        >>> job = GRPOJob(name="run-1")
        >>> resolve(job, c) is resolve(job, c) is job.resolve(c)
        True
    """
    cache = job._resolved
    try:
        return cache[cluster]
    except KeyError:
        resolved = cache[cluster] = resolve_job(job, cluster)
        return resolved


def resolve_job(job: JobSpec, cluster: ClusterSpec) -> ResolvedJob:
    """Render ``job`` for ``cluster`` once, top-down; see :class:`ResolvedJob`.

    Prefer :func:`resolve` (``job.resolve(cluster)``), which caches the result on the job.

    Examples:
        >>> from rl_lustre import Cluster, GRPOJob
        >>> c = Cluster(name="demo", project="my-project", region="us-east1", zone="us-east1-b")
        >>> resolve_job(GRPOJob(name="run-1"), c).override_args[:1]
        ['policy.model_name=Qwen/Qwen2.5-72B-Instruct']
    """
    from .config import available_recipes, flatten, recipe_name, shared_recipe
    from .config_cache import resolve_shared
    from .preflight import check_config

    version = nemo_rl_version(choose_version(job.nemo_rl_version, cluster.nemo_rl_version))
    name = recipe_name(job.recipe)
    try:
        recipe, notes = shared_recipe(job.recipe, version.version)
    except ConfigError:
        # A recipe we do not ship (it may exist in the image).
        recipe, notes = None, ()
    megatron = (
        "megatron" in name
        if recipe is None
        else bool(recipe.get("policy", {}).get("megatron_cfg", {}).get("enabled", False))
    )
    default_checkpoint_dir = posixpath.join(cluster.mount_path, job.checkpoint_root, job.name)
    default_log_dir = posixpath.join(cluster.mount_path, job.log_root, job.name)
    hf_home = posixpath.join(cluster.mount_path, job.hf_home)
    overrides = _overrides(job, cluster, version, megatron, default_checkpoint_dir, default_log_dir)

    problems: list[ConfigError] = []
    warnings: list[str] = []
    texts: list[str] = []
    shown: list[Any] = []
    args, args_error = _render(overrides, texts, shown, problems)

    config: dict[str, Any] | None = None
    flat: dict[str, Any] | None
    if recipe is None:
        warnings.append(
            f"recipe {job.recipe!r} is not one rl_lustre ships ({', '.join(available_recipes())}); "
            f"NeMo-RL will look for examples/configs/{name}.yaml, and only the values "
            "this job sets are checked"
        )
        flat = {key.lstrip("+"): value for key, value in overrides.items() if not key.startswith("~")}
    else:
        warnings.extend(notes)
        config, applied, unresolved = resolve_shared(recipe, texts, owner=OWNER, values=shown, version=version.version)
        problems += applied + unresolved
        flat = None if config is None else flatten(config)
    # The values in force: the job's overrides may move them ("++checkpointing.checkpoint_dir" too).
    checkpoint_dir = str(_in_force("checkpointing.checkpoint_dir", default_checkpoint_dir, flat, overrides))
    log_dir = str(_in_force("logger.log_dir", default_log_dir, flat, overrides))
    checkpointing = _in_force("checkpointing.enabled", job.checkpointing, flat, overrides) is not False
    found = check_config(job, cluster, version, overrides, flat)
    problems += found.problems
    warnings += found.warnings

    runtime_env, env_error = _runtime_env(job, cluster, hf_home)
    return ResolvedJob(
        job=job,
        cluster=cluster,
        version=version,
        overrides=FrozenDict(overrides),
        num_nodes=_num_nodes(job, cluster, overrides, flat),
        checkpoint_dir=checkpoint_dir,
        log_dir=log_dir,
        checkpointing=checkpointing,
        hf_home=hf_home,
        warnings=tuple(warnings),
        problems=tuple(problems),
        config=config,
        flat=flat,
        args=tuple(args),
        args_error=args_error,
        entrypoint=_entrypoint(job, cluster, version, name, args),
        runtime_env=runtime_env,
        env_error=env_error,
    )


def _in_force(key: str, default: Any, flat: Mapping[str, Any] | None, overrides: Mapping[str, Any]) -> Any:
    """The value of ``key`` NeMo-RL runs with: the resolved config's, else the override's
    (``key``, ``+key`` or ``++key``), else ``default``."""
    if flat is not None and flat.get(key) is not None:
        return flat[key]
    for written in (key, f"+{key}", f"++{key}"):
        if overrides.get(written) is not None:
            return overrides[written]
    return default


def _num_nodes(job: JobSpec, cluster: ClusterSpec, overrides: Mapping[str, Any], flat: Mapping[str, Any] | None) -> int:
    """The job's size in nodes: ``cluster.num_nodes`` in force, else the field's (or the cluster's)."""
    default = job.num_nodes if job.num_nodes is not None else cluster.num_nodes
    value = _in_force("cluster.num_nodes", default, flat, overrides)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else default


def _overrides(
    job: JobSpec, cluster: ClusterSpec, version: NemoRLVersion, megatron: bool, checkpoint_dir: str, log_dir: str
) -> dict[str, Any]:
    """The reference command's overrides, then ``logger.log_dir`` (and the W&B project), then
    the job's own; a key of ours the job also sets takes the job's value in our place."""
    from .models import converter_for
    from .overrides import literal

    out: dict[str, Any] = {"policy.model_name": job.model}
    if megatron:
        converter = job.converter_type or converter_for(job.model)
        if converter is not None:
            out["policy.megatron_cfg.converter_type"] = converter
    out.update(
        {
            "logger.wandb_enabled": job.wandb,
            "cluster.num_nodes": job.num_nodes if job.num_nodes is not None else cluster.num_nodes,
            "cluster.gpus_per_node": cluster.gpus_per_node,
            "logger.wandb.name": job.name,
            "grpo.max_num_steps": job.max_num_steps,
            "grpo.num_generations_per_prompt": job.num_generations_per_prompt,
            "grpo.num_prompts_per_step": job.num_prompts_per_step,
            "policy.train_global_batch_size": job.train_global_batch_size,
            "checkpointing.enabled": job.checkpointing,
            "checkpointing.save_period": job.save_period,
            "checkpointing.keep_top_k": job.keep_top_k,
            "checkpointing.metric_name": job.metric_name,
            "checkpointing.checkpoint_dir": checkpoint_dir,
            version.key("data.dataset_name"): job.dataset,
            "logger.log_dir": log_dir,
        }
    )
    if job.wandb_project is not None:
        out["logger.wandb.project"] = job.wandb_project
    # Our values are literal text; the job's follow GRPOJob.interpolate_overrides.
    out = {k: literal(v) for k, v in out.items()}
    result: dict[str, Any] = {}
    users = dict(job.extra_overrides)
    if not job.interpolate_overrides:
        users = {k: literal(v) for k, v in users.items()}
    # "+key", "++key" and "~key" (a deletion) take the place of our "key".
    bare_users = {k.lstrip("+~"): k for k in users}
    for key, value in out.items():
        if key in bare_users:
            user_key = bare_users.pop(key)
            result[user_key] = users.pop(user_key)
        else:
            result[key] = value
    result.update(users)
    return result


def _render(
    overrides: Mapping[str, Any], texts: list[str], shown: list[Any], problems: list[ConfigError]
) -> tuple[list[str], ConfigError | None]:
    """Each override in Hydra syntax, rendered once.

    Fills ``texts`` and ``shown`` (what preflight applies, and shows as values) and
    ``problems`` (overrides that cannot be written); returns the command-line
    arguments, or the error the command line fails with: the first override that
    sets a secret or cannot be written.
    """
    from .overrides import render_override
    from .preflight import secret_names

    args: list[str] = []
    error: ConfigError | None = None
    for key, value in overrides.items():
        secret = secret_names(key, value) if "env_vars" in key else []  # the only keys that set one
        seen = REDACTED if secret else value  # as preflight.shown_value shows it
        try:
            text = render_override(key, value)
        except ConfigError as exc:
            problems.append(ConfigError(OWNER, key.lstrip("+~"), seen, exc.rule))
            if error is None:
                error = (
                    ConfigError(OWNER, f"overrides[{key!r}]", REDACTED, _secret_rule(secret[0]))
                    if secret
                    else _with_cause(ConfigError(OWNER, f"overrides[{key!r}]", value, exc.rule), exc)
                )
            continue
        texts.append(text)
        shown.append(seen)
        if error is None and secret:
            error = ConfigError(OWNER, f"overrides[{key!r}]", REDACTED, _secret_rule(secret[0]))
        args.append(text)
    return args, error


def _secret_rule(name: str) -> str:
    return (
        f"{name!r} looks like a secret, which must not appear in the job's command line; "
        "list it in Cluster.secrets instead"
    )


def _with_cause(error: ConfigError, cause: BaseException) -> ConfigError:
    error.__cause__ = cause
    return error


def _entrypoint(job: JobSpec, cluster: ClusterSpec, version: NemoRLVersion, name: str, args: list[str]) -> str:
    """NeMo-RL's GRPO example; locally without NeMo-RL, the rehearsal driver with the same
    config and overrides."""
    quoted = " ".join([shlex.quote(a) for a in args])
    if cluster.backend == "local" and cluster.nemo_rl_path is None:
        # The driver applies the overrides with this version's key names.
        pinned = f" --nemo-rl-version {version.version}" if version.version != DEFAULT_VERSION else ""
        # The driver holds the job's GPUs as NeMo-RL does; with worker nodes it also places
        # per-node work on them.
        placed = " --place-workers" if cluster.worker_nodes else " --reserve"
        return (
            f"{shlex.quote(sys.executable)} -m rl_lustre.rehearsal"
            f" --checkpoint-scale {number(cluster.rehearsal_scale)}"
            f" --step-seconds {number(cluster.rehearsal_step_seconds)}{pinned}{placed}"
            f" --config {shlex.quote(name)} {quoted}"
        )
    root = cluster.nemo_rl_path if cluster.backend == "local" else job.nemo_rl_dir
    assert root is not None
    return (
        f"cd {shlex.quote(root)} && uv run python {version.entry_script} --config examples/configs/{name}.yaml {quoted}"
    )


def _runtime_env(job: JobSpec, cluster: ClusterSpec, hf_home: str) -> tuple[Mapping[str, Any], ConfigError | None]:
    error = secret_in_env(job.env, cluster.secrets)
    if error is not None:
        return {}, error
    from .caches import nemo_rl_cache_env

    # Every cache NeMo-RL keeps goes on the volume: one function owns those variables.
    out: dict[str, Any] = {"env_vars": {**RESERVED_ENV, **nemo_rl_cache_env(cluster.mount_path, hf_home), **job.env}}
    if job.working_dir is not None:
        out["working_dir"] = job.working_dir
        # Bytecode a local run left in the working_dir is for this machine's Python, not the image's.
        out["excludes"] = [*job.excludes, *(p for p in ALWAYS_EXCLUDED if p not in job.excludes)]
    elif job.excludes:
        out["excludes"] = list(job.excludes)
    return out, None
