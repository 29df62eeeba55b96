"""``GRPOJob``: one NeMo-RL GRPO run, as a validated, evolvable spec.

The fields and their rules are :class:`~rl_lustre.spec.JobSpec`'s; this module adds the
job rendered for a cluster (overrides, command, runtime env, preflight), which
:mod:`rl_lustre.nemo_rl.resolved` computes once per cluster.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

import attrs

from . import _validate as v
from ._public import public
from .spec.job import JOB_NAME_RULE, JobSpec

if TYPE_CHECKING:
    from .nemo_rl.resolved import ResolvedJob
    from .spec.cluster import ClusterSpec

__all__ = ["JOB_NAME_RULE", "GRPOJob"]


@public("rl_lustre")
@v.keyword_errors
@attrs.frozen(kw_only=True)
class GRPOJob(JobSpec):
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
            before giving up (the run then ends FAILED). Only that wait: the wait in
            the cluster's queue before a job first starts has no limit.
        hang_timeout: seconds a running attempt may go without progress (a step, phase,
            save or validation line of NeMo-RL's, a checkpoint written) before it is
            declared stalled: its evidence is kept in the run's directory (a diagnostics
            bundle: every process's stack, Ray's state, the logs, the NCCL flight
            recorder), then it is rerun from the newest checkpoint, as a restart within
            ``max_restarts`` (``cause="hung"``); a second stall at the same step ends the
            run FAILED. None (the default) adapts: 3 x the longest step, save or validation
            seen so far in the run, at least 600 s. A job waiting in the queue or for
            capacity is never stalled. See docs/hangs.md.
        startup_timeout: seconds an attempt may take, silent, until its first step is done
            (model loading, vLLM's start-up, compilation, the first step); at least
            ``hang_timeout``. Default 3600.
        num_nodes: the GPU nodes this job takes: NeMo-RL's ``cluster.num_nodes``. None
            (the default) takes the whole cluster. Jobs smaller than the cluster run side
            by side; a job waits in the cluster's queue until its nodes are free (see
            docs/sweeps.md). More than the cluster has fails preflight.
        priority: the job's place in the cluster's queue: higher goes first, equal
            priorities in order of submission (-1000 to 1000, default 0). A running job
            is never preempted.
        backfill_window: seconds that later, smaller jobs may start ahead of this one
            while it waits for more nodes than are free (default 3600); after that no
            job passes it. 0: no later job ever starts ahead of it (strict FIFO).
    """

    @property
    def recipe_name(self) -> str:
        """The recipe without a ``.yaml`` suffix."""
        from .nemo_rl.config import recipe_name

        return recipe_name(self.recipe)

    def resolve(self, cluster: ClusterSpec) -> ResolvedJob:
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
        from .nemo_rl.resolved import resolve

        _need_cluster("resolve", cluster)
        return resolve(self, cluster)

    def checkpoint_dir(self, cluster: ClusterSpec) -> str:
        """Where NeMo-RL saves and resumes this run: ``<mount>/<checkpoint_root>/<name>``,
        unless an override of ``checkpointing.checkpoint_dir`` puts it elsewhere.

        Examples:
            >>> from rl_lustre import Cluster, GRPOJob
            >>> c = Cluster(name="demo", project="my-project", region="us-east1", zone="us-east1-b")
            >>> GRPOJob(name="run-1").checkpoint_dir(c)
            '/lustre/checkpoints/run-1'
        """
        return self.resolve(cluster).checkpoint_dir

    def log_dir(self, cluster: ClusterSpec) -> str:
        """``<mount>/<log_root>/<name>`` (or an override of ``logger.log_dir``); NeMo-RL adds
        an ``exp_NNN`` folder per start."""
        return self.resolve(cluster).log_dir

    def hf_home_path(self, cluster: ClusterSpec) -> str:
        """``HF_HOME`` on the volume, shared by every node."""
        return self.resolve(cluster).hf_home

    def nemo_rl_version_for(self, cluster: ClusterSpec) -> str:
        """The NeMo-RL version this job runs on ``cluster``: the job's, the image's, or 0.4.0."""
        return self.resolve(cluster).version.version

    def overrides(self, cluster: ClusterSpec) -> dict[str, Any]:
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

    def override_args(self, cluster: ClusterSpec) -> list[str]:
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

    def entrypoint(self, cluster: ClusterSpec) -> str:
        """The exact shell command the Ray job runs.

        On GKE (and locally with ``nemo_rl_path``) NeMo-RL's own GRPO example; locally
        without NeMo-RL, the rehearsal driver with the same config and overrides.

        Examples:
            >>> from rl_lustre import Cluster, GRPOJob
            >>> c = Cluster(name="demo", project="my-project", region="us-east1", zone="us-east1-b")
            >>> print(GRPOJob(name="run-1").entrypoint(c)[:112])  # doctest: +NORMALIZE_WHITESPACE
            cd /opt/nemo-rl && uv run python examples/run_grpo_math.py
            --config examples/configs/grpo_math_70B_megatron.yaml

        Raises:
            ConfigError: as :meth:`override_args`.
        """
        return self.resolve(cluster).entrypoint

    def runtime_env(self, cluster: ClusterSpec) -> dict[str, Any]:
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

    def preflight(self, cluster: ClusterSpec) -> list[str]:
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
        return self.resolve(cluster).preflight()


def _need_cluster(method: str, cluster: Any) -> None:
    from .spec.cluster import ClusterSpec

    v.need(f"GRPOJob.{method}", "cluster", cluster, ClusterSpec, "a Cluster")
