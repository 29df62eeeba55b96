"""Submitting a ``GRPOJob`` through the Jobs API: ids, retries, resume and the secret guard.

Shared by every backend. The submission id is derived from the job, so a retried
``submit()`` of a job that is still running attaches to it instead of starting a
second copy. Submitting it again after it ended is a new attempt, ``<id>-r2``,
``<id>-r3``, ...: NeMo-RL resumes from the newest checkpoint in the same
``checkpoint_dir``, so a new attempt continues the run.

``fresh=True`` starts over instead: the job's command first moves the checkpoint
directory aside (``<dir>.before-fresh-<UTC time>``; nothing is deleted), so NeMo-RL
finds no checkpoint. A run that finds nothing left to do (the newest checkpoint already
at ``max_num_steps``) is reported with a :class:`~rl_lustre.errors.NothingToDoWarning`.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import re
import shlex
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from .. import naming
from .._warnings import warn_caller
from ..errors import SUBMIT_FRESH, ConfigError, NothingToDoWarning, RayError, nothing_to_do_advice
from ..nemo_rl.converters import export_metadata
from ..oncluster import rundir
from ..oncluster.nccl import recorder_env
from ..oncluster.records import (
    CHECKPOINT_DIR,
    DASHBOARD,
    JOB,
    LOG_DIR,
    MODEL,
    NUM_NODES,
    PRIORITY,
    RECIPE,
    RUN_DIR,
    RUN_ID,
    SEQ,
    SUBMITTED_AT,
    TOTAL_STEPS,
)
from ..recovery import shipped_package, supervised
from ..spec.job import secret_in_env
from .handles import RunHandles

if TYPE_CHECKING:
    from ..goodput import GoodputLedger
    from ..goodput.timeline import Evidence
    from ..nemo_rl.checkpoints import Checkpoint
    from ..nemo_rl.deadline import Deadline
    from ..nemo_rl.resolved import ResolvedJob
    from ..prices import Prices
    from ..ray.jobs import JobInfo, JobsClient
    from ..run import Run
    from ..spec import ClusterSpec, JobSpec
    from .granted import OnDemandFallback

__all__ = ["JobsBackend", "Submission", "check_no_secrets", "prepare", "recorded", "submit"]

logger = logging.getLogger("rl_lustre.backends.submission")

# Shorter values would turn up by chance in commands and paths.
_MIN_SECRET_LEN = 8
_RETRIES = 3


@attrs.frozen
class Submission:
    """What goes to the Jobs API for one job (everything but the attempt number).

    Attributes:
        base_id: the id of the first attempt; later ones add ``-r2``, ``-r3``, ...
        entrypoint: the shell command: the recovery supervisor running the job's
            :meth:`~rl_lustre.GRPOJob.entrypoint`.
        runtime_env: Ray's runtime env (no secrets); its ``py_modules`` carry the supervisor.
        metadata: stored with the job (no secrets).
        checkpoint_dir: where NeMo-RL saves and resumes, or None without checkpointing.
        total_steps: ``grpo.max_num_steps``.
    """

    base_id: str
    entrypoint: str
    runtime_env: Mapping[str, Any]
    metadata: Mapping[str, str]
    checkpoint_dir: str | None
    total_steps: int | None


def prepare(
    cluster: ClusterSpec,
    job: JobSpec,
    *,
    fresh: bool = False,
    deadline: Deadline | None = None,
    lifetimes: Sequence[tuple[str, float]] = (),
    now: float | None = None,
    fallback: OnDemandFallback | None = None,
) -> Submission:
    """Render and check ``job`` for ``cluster``; makes no remote call.

    Runs the job's preflight (a job NeMo-RL would reject fails here) and refuses any
    secret in the command, runtime env or metadata. With ``fresh``, the command first
    moves the checkpoint directory aside (see :func:`fresh_entrypoint`). On capacity that
    ends (``deadline``, e.g. flex-start nodes), NeMo-RL is told to save before it does
    (:mod:`rl_lustre.nemo_rl.deadline`; ``now``: the submission time), unless the job sets
    ``checkpointing.checkpoint_must_save_by`` itself, and a
    :class:`~rl_lustre.errors.CapacityDeadlineWarning` says when that cannot work. The
    supervisor works the value out again before each attempt (a rerun starts NeMo-RL's
    clock again), from ``deadline`` and from ``lifetimes``: node-name prefixes of pools
    whose nodes live a limited time (the flex-start standby pool a rerun may resume on;
    :mod:`rl_lustre.oncluster.lifetimes`). With ``fallback``, the supervisor records when the
    run holds nodes of an on-demand fallback (:mod:`rl_lustre.oncluster.fallback`).

    Examples:
        >>> from rl_lustre import Cluster, GRPOJob
        >>> c = Cluster.local("demo", volume_dir="/tmp/rl-demo")
        >>> s = prepare(c, GRPOJob(name="tiny", recipe="grpo_math_1B", max_num_steps=4))
        >>> s.base_id.startswith("rl-lustre-tiny-"), s.checkpoint_dir
        (True, '/tmp/rl-demo/checkpoints/tiny')

    Raises:
        ConfigError: the job is invalid for this cluster, or would carry a secret.
    """
    from ..nemo_rl.resolved import resolve

    resolved = resolve(job, cluster)
    resolved.preflight()
    checkpoint_dir = resolved.checkpoint_dir if resolved.checkpointing else None
    now = time.time() if now is None else now
    # The job's identity leaves the deadline and the run's directory (named after it) out: the
    # same job submitted later is the same job, and the same run.
    identity = _entrypoint(cluster, job, resolved, fresh, now)
    digest = hashlib.sha256(
        json.dumps([identity, resolved.runtime_env], sort_keys=True, default=str).encode()
    ).hexdigest()[:8]
    base_id = f"rl-lustre-{job.name}-{digest}"
    run_dir = rundir.run_dir(cluster.mount_path, base_id)
    told = fallback.options() if fallback is not None else {}
    if deadline is not None or lifetimes:
        entrypoint = _with_deadline(cluster, job, resolved, deadline, lifetimes, now, fresh, run_dir, **told)
    else:
        entrypoint = _entrypoint(cluster, job, resolved, fresh, now, run_dir=run_dir, **told)
    runtime_env = {
        **resolved.runtime_env,
        # PyTorch's NCCL flight recorder, dumping into the run's directory (oncluster.nccl).
        "env_vars": {**resolved.runtime_env.get("env_vars", {}), **recorder_env(run_dir, base_id)},
        "py_modules": [*resolved.runtime_env.get("py_modules", []), shipped_package()],
    }
    steps = resolved.value("grpo.max_num_steps")
    metadata = {
        "rl_lustre.cluster": cluster.name,
        JOB: job.name,
        RUN_ID: base_id,
        RUN_DIR: run_dir,
        "rl_lustre.max_restarts": str(job.max_restarts),
        RECIPE: job.recipe,
        NUM_NODES: str(resolved.num_nodes),
        PRIORITY: str(job.priority),
    }
    model = resolved.value("policy.model_name")
    if isinstance(model, str):
        metadata[MODEL] = model
    if checkpoint_dir is not None:
        metadata[CHECKPOINT_DIR] = checkpoint_dir
    metadata[LOG_DIR] = resolved.log_dir
    metadata.update(export_metadata(job, resolved))
    if isinstance(steps, int):
        metadata[TOTAL_STEPS] = str(steps)
    check_no_secrets(cluster, entrypoint, runtime_env, metadata)
    return Submission(
        base_id=base_id,
        entrypoint=entrypoint,
        runtime_env=runtime_env,
        metadata=metadata,
        checkpoint_dir=checkpoint_dir,
        total_steps=steps if isinstance(steps, int) else None,
    )


def _entrypoint(
    cluster: ClusterSpec, job: JobSpec, resolved: ResolvedJob, fresh: bool, now: float, **options: Any
) -> str:
    """The supervisor around the job's command (NeMo-RL resumes from the newest step_N of its
    checkpoint directory whether or not it saves); with ``fresh``, preceded by moving that
    directory aside (outside the supervisor: only the first attempt starts over)."""
    entrypoint = _supervised(cluster, job, resolved.num_nodes, resolved.entrypoint, resolved.checkpoint_dir, **options)
    if fresh and resolved.checkpointing:
        entrypoint = fresh_entrypoint(entrypoint, resolved.checkpoint_dir, now=now)
    return entrypoint


def _with_deadline(
    cluster: ClusterSpec,
    job: JobSpec,
    resolved: ResolvedJob,
    deadline: Deadline | None,
    lifetimes: Sequence[tuple[str, float]],
    now: float,
    fresh: bool,
    run_dir: str,
    **told: Any,
) -> str:
    """The job's entrypoint with NeMo-RL told to save before ``deadline`` and before nodes
    with a lifetime go (a job that sets the key keeps its own value), warning when that
    cannot work."""
    from ..errors import CapacityDeadlineWarning
    from ..nemo_rl.deadline import SAVE_MARGIN_SECONDS, user_value

    given = user_value(job.extra_overrides)
    for message in deadline.findings(now, given=given) if deadline is not None else ():
        warn_caller(f"job {job.name!r}: {message}", CapacityDeadlineWarning)
    command = resolved.entrypoint
    ours = given is None and resolved.checkpointing
    if ours and deadline is not None:
        command += "".join(f" {shlex.quote(f'{k}={v}')}" for k, v in deadline.override(now).items())
    ends = (
        {
            "capacity_end": deadline.end if deadline is not None else None,
            "lifetimes": tuple(lifetimes),
            "save_margin": deadline.margin if deadline is not None else SAVE_MARGIN_SECONDS,
        }
        if ours
        else {}
    )
    entrypoint = _supervised(
        cluster, job, resolved.num_nodes, command, resolved.checkpoint_dir, run_dir=run_dir, **ends, **told
    )
    if fresh and resolved.checkpointing:
        entrypoint = fresh_entrypoint(entrypoint, resolved.checkpoint_dir, now=now)
    return entrypoint


def _supervised(
    cluster: ClusterSpec, job: JobSpec, nodes: int, command: str, checkpoint_dir: str | None, **ends: Any
) -> str:
    """The Ray job's entrypoint: the recovery supervisor around NeMo-RL's ``command``.

    It first waits in the cluster's queue (named after the cluster) for the job's
    ``nodes``. On GKE it then watches the job's GPU nodes, reading Ray's node table every
    2 s; a failure with every node alive is looked at for 30 s more (Ray's default health
    checks take about 15 s to declare a vanished node dead) before the run ends FAILED,
    and once a node is found lost, 5 s more for others taken with it (declared dead one
    3 s health check apart). A local cluster with worker nodes declares lost nodes dead
    within about 2 s, one 0.5 s health check apart (see :func:`rl_lustre.ray.nodes.node_env`),
    so it looks faster and for less long; one without worker nodes has none to lose.
    """
    assert cluster.gpus_per_node is not None
    kube: dict[str, Any] = {}
    if cluster.backend == "gke":
        python, poll, settle, siblings, watch = "python", 2.0, 30.0, 5.0, True
        kube = {"kube_raycluster": naming.raycluster_name(cluster), "kube_namespace": cluster.namespace}
    else:
        python, poll, settle, siblings, watch = sys.executable, 0.5, 3.0, 1.5, bool(cluster.worker_nodes)
    return supervised(
        command,
        python=python,
        max_restarts=job.max_restarts,
        nodes=nodes,
        gpus_per_node=cluster.gpus_per_node,
        capacity_timeout=job.capacity_timeout,
        checkpoint_dir=checkpoint_dir,
        poll=poll,
        settle=settle,
        siblings=siblings,
        queue=cluster.name,
        cluster_nodes=cluster.num_nodes,
        priority=job.priority,
        backfill_window=job.backfill_window,
        watch=watch,
        hang_timeout=job.hang_timeout,
        startup_timeout=job.startup_timeout,
        **kube,
        **ends,
    )


def fresh_entrypoint(entrypoint: str, checkpoint_dir: str, *, now: float | None = None) -> str:
    """``entrypoint``, preceded by moving ``checkpoint_dir`` aside so that the run starts over.

    The old directory becomes ``<checkpoint_dir>.before-fresh-<UTC time>``; nothing is
    deleted. A later submit without ``fresh`` resumes from the fresh run's checkpoints.

    Examples:
        >>> print(fresh_entrypoint("python train.py", "/v/checkpoints/demo", now=0))  # doctest: +NORMALIZE_WHITESPACE
        { [ ! -e /v/checkpoints/demo ] || mv /v/checkpoints/demo /v/checkpoints/demo.before-fresh-19700101T000000Z; }
        && python train.py
    """
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() if now is None else now))
    old, aside = shlex.quote(checkpoint_dir), shlex.quote(f"{checkpoint_dir}.before-fresh-{stamp}")
    return f"{{ [ ! -e {old} ] || mv {old} {aside}; }} && {entrypoint}"


def nothing_to_do(checkpoints: list[Checkpoint], total_steps: int | None) -> str | None:
    """Why a run with these checkpoints would train nothing, or None when it has work left.

    Examples:
        >>> from rl_lustre.nemo_rl.checkpoints import Checkpoint
        >>> from pathlib import Path
        >>> step_6 = Checkpoint(step=6, path=Path("/v/c/step_6"), size_bytes=1, finished_at=0.0, save_seconds=None)
        >>> nothing_to_do([step_6], 6)
        'its checkpoint directory already holds step_6 and max_num_steps is 6'
        >>> nothing_to_do([], 6) is None
        True
    """
    if not checkpoints or total_steps is None:
        return None
    from ..oncluster.nemo_formats import checkpoint_name

    newest = max(c.step for c in checkpoints)
    if newest < total_steps:
        return None
    return f"its checkpoint directory already holds {checkpoint_name(newest)} and max_num_steps is {total_steps}"


def recorded(info: JobInfo) -> tuple[str | None, int | None]:
    """The checkpoint dir and step count a job was submitted with, from its metadata.

    Lets :meth:`Cluster.attach` rebuild a full run handle from a submission id alone.

    Examples:
        >>> from rl_lustre.ray.jobs import JobInfo
        >>> metadata = {"rl_lustre.checkpoint_dir": "/v/c", "rl_lustre.total_steps": "8"}
        >>> recorded(JobInfo("x", "RUNNING", metadata=metadata))
        ('/v/c', 8)
    """
    steps = info.metadata.get(TOTAL_STEPS, "")
    return info.metadata.get(CHECKPOINT_DIR), int(steps) if steps.isdigit() else None


def check_no_secrets(
    cluster: ClusterSpec, entrypoint: str, runtime_env: Mapping[str, Any], metadata: Mapping[str, str]
) -> None:
    """Refuse a submission that would store a secret in Ray's job records.

    No name in ``cluster.secrets`` may be in ``runtime_env["env_vars"]``, and no value
    those names have in this process's environment may appear in the entrypoint, the
    runtime env or the metadata. The error never contains the value.

    Examples:
        >>> from rl_lustre import Cluster
        >>> c = Cluster.local("demo", volume_dir="/tmp/rl-demo", secrets=("HF_TOKEN",))
        >>> check_no_secrets(c, "echo hi", {"env_vars": {"HF_TOKEN": "x"}}, {})  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        rl_lustre.errors.ConfigError: GRPOJob.env='HF_TOKEN': is one of the cluster's secrets; ...

    Raises:
        ConfigError: a secret would be stored.
    """
    error = secret_in_env(runtime_env.get("env_vars") or {}, cluster.secrets)
    if error is not None:
        raise error
    stored = json.dumps([entrypoint, runtime_env, dict(metadata)], default=str)
    for name in cluster.secrets:
        value = os.environ.get(name, "")
        if len(value) >= _MIN_SECRET_LEN and value in stored:
            raise ConfigError(
                "GRPOJob", "overrides", f"<the value of ${name}>",
                "a secret's value would be stored in plain text in Ray's job records; "
                "pass it through Cluster.secrets instead",
            )  # fmt: skip


def submit(
    jobs: JobsClient,
    submission: Submission,
    make_run: Callable[[str], Any],
    *,
    known: Sequence[JobInfo] | None = None,
    extra: Mapping[str, str] | None = None,
) -> Any:
    """Submit, or attach to the attempt still running; returns ``make_run(job_id)``.

    ``known`` is a recent ``jobs.list()`` to look for earlier attempts in (a sweep lists
    once for all its jobs); should the id turn out to be taken, the cluster is asked again.
    ``extra`` is more metadata (the queue's: the job's order in its batch, the head's
    dashboard); the submission time is added here, on this machine's clock.

    Examples:
        >>> run = submit(jobs, prepare(cluster, job), make_run)  # doctest: +SKIP
    """
    for _ in range(_RETRIES):
        latest, number = _latest_attempt(jobs.list() if known is None else known, submission.base_id)
        known = None
        if latest is not None and not latest.terminal:
            logger.info("job %s is already %s; attaching to it", latest.submission_id, latest.status)
            return make_run(latest.submission_id)
        job_id = submission.base_id if number == 0 else f"{submission.base_id}-r{number + 1}"
        metadata = {
            **submission.metadata,
            **(extra or {}),
            "rl_lustre.attempt": str(number + 1),
            SUBMITTED_AT: repr(time.time()),
        }
        try:
            jobs.submit(
                submission.entrypoint,
                submission_id=job_id,
                runtime_env=submission.runtime_env,
                metadata=metadata,
            )
        except RayError as exc:
            if "already exists" not in str(exc):
                raise
            # Another submit of the same job won the race; look again.
            continue
        if number:
            logger.info(
                "submitted job %s (attempt %d: resumes from the newest checkpoint)",
                job_id,
                number + 1,
            )
        else:
            logger.info("submitted job %s", job_id)
        return make_run(job_id)
    raise RayError(f"could not submit {submission.base_id}: its submission id kept being taken")


def _latest_attempt(listing: Iterable[JobInfo], base_id: str) -> tuple[JobInfo | None, int]:
    """The newest attempt of ``base_id`` in a job listing and its number (0 when none)."""
    pattern = re.compile(re.escape(base_id) + r"(?:-r(\d+))?")
    latest: JobInfo | None = None
    number = 0
    resubmitted = []
    for info in listing:
        m = pattern.fullmatch(info.submission_id)
        if m is None:
            if (info.metadata or {}).get(RUN_ID) == base_id and not info.terminal:
                resubmitted.append(info)  # the keeper's, after a head loss: the run goes on there
            continue
        n = int(m.group(1)) if m.group(1) else 1
        if n > number:
            latest, number = info, n
    if resubmitted:
        latest = max(resubmitted, key=lambda info: (info.start_time or 0.0, info.submission_id))
    return latest, number


class JobsBackend(RunHandles):
    """``submit`` and ``attach``, the same on every backend that has a Jobs API.

    A backend provides ``cluster``, ``jobs`` (its Jobs API), ``list_checkpoints`` (how
    it reads a checkpoint directory on the volume) and ``_where`` (words for errors).
    """

    cluster: ClusterSpec
    _where: str
    # Whether list_checkpoints is cheap (a directory listing) rather than a helper job:
    # then submit() looks before it leaps and warns about a run with nothing to do.
    cheap_listing = False

    @property
    def jobs(self) -> JobsClient:
        raise NotImplementedError

    def list_checkpoints(self, checkpoint_dir: str) -> list[Checkpoint]:
        raise NotImplementedError

    def submit(self, job: JobSpec, *, fresh: bool = False) -> Run:
        return self.submit_all([job], fresh=fresh)[0]

    def before_submitting(self) -> None:
        """Called once every job is prepared (offline checks passed) and the cluster's Jobs API
        found, before anything is submitted; nothing here."""

    def capacity_deadline(self) -> Deadline | None:
        """When the capacity the jobs run on ends (flex-start nodes), or None: it does not."""
        return None

    def capacity_fallback(self) -> OnDemandFallback | None:
        """The nodes a job may run on that are an on-demand fallback of the capacity policy
        (see :mod:`rl_lustre.backends.granted`); none here."""
        return None

    def capacity_lifetimes(self) -> tuple[tuple[str, float], ...]:
        """``(node-name prefix, seconds)`` of the nodes a job may run on that live a limited
        time (flex-start pools: see :func:`rl_lustre.gcp.pool_provisioning.node_lifetimes`); none here."""
        return ()

    def submit_all(self, jobs: Sequence[JobSpec], *, fresh: bool = False, start_over: str = SUBMIT_FRESH) -> list[Run]:
        """Prepare every job (none is sent if one fails), then submit each in order.

        The cluster's jobs are listed once for all of them, to find earlier attempts.
        Where the volume is cheap to read (locally), jobs whose newest checkpoint already
        reaches ``max_num_steps`` are reported first, in one :class:`NothingToDoWarning`
        that advises ``start_over`` (the call that starts them over).
        """
        deadline, lifetimes, told = self.capacity_deadline(), self.capacity_lifetimes(), self.capacity_fallback()
        prepared = [
            prepare(self.cluster, job, fresh=fresh, deadline=deadline, lifetimes=lifetimes, fallback=told)
            for job in jobs
        ]
        if not fresh and self.cheap_listing:
            self._warn_if_nothing_to_do(jobs, prepared, start_over)
        client = self.jobs
        if prepared:
            self.before_submitting()
        known = client.list() if prepared else []
        dashboard = self.dashboard_on_head()
        runs = []
        for i, p in enumerate(prepared):
            make = functools.partial(
                self._run,
                checkpoint_dir=p.checkpoint_dir,
                total_steps=p.total_steps,
                run_id=p.base_id,
                run_dir=p.metadata.get(RUN_DIR),
            )
            lost = self._lost_in_flight(p, known)
            if lost is not None:
                # Its head was lost and its keeper brings it back: follow it, never start it twice.
                logger.info("job %s is in flight (its head was lost; the keeper resubmits it): attaching", lost)
                runs.append(make(lost))
                continue
            # The queue orders jobs submitted together by their place in the batch.
            extra = {SEQ: str(i), **({DASHBOARD: dashboard} if dashboard else {})}
            runs.append(submit(client, p, make, known=known, extra=extra))
        return runs

    def _lost_in_flight(self, p: Submission, known: Sequence[JobInfo]) -> str | None:
        """The submission id of ``p``'s run when the volume says it is in flight and the head knows
        nothing of it (its head was lost; its keeper resubmits it); None otherwise."""
        run_dir = p.metadata.get(RUN_DIR)
        if not run_dir or any((j.metadata or {}).get(RUN_ID, j.submission_id) == p.base_id for j in known):
            return None
        if self.head_replaced() is False:
            return None  # no head was lost: no run of this cluster can be in flight unknown to the head
        view = self.run_view(run_dir)
        if view is None or not view.in_flight or self.cluster_up() is False:
            return None
        return view.current or p.base_id

    def head_replaced(self) -> bool | None:
        """Whether the cluster's Ray head was lost since the cluster came up; None: not known
        cheaply (the run's directory is read)."""
        return None

    def dashboard_on_head(self) -> str | None:
        """The Ray dashboard's address as seen from the head, for the queue's supervisors; None: Ray's default."""
        return None

    def _warn_if_nothing_to_do(self, jobs: Sequence[JobSpec], prepared: Sequence[Submission], start_over: str) -> None:
        idle = []
        for job, p in zip(jobs, prepared, strict=True):
            if p.checkpoint_dir is not None:
                why = nothing_to_do(self.list_checkpoints(p.checkpoint_dir), p.total_steps)
                if why is not None:
                    idle.append((job.name, why))
        if not idle:
            return
        if len(idle) == 1:
            ((name, why),) = idle
            message = (
                f"job {name!r} has nothing left to do: {why}, so its run will end SUCCEEDED without training a step"
            )
        else:
            each = "; ".join(f"{name!r}: {why}" for name, why in idle)
            message = (
                f"{len(idle)} jobs have nothing left to do ({each}), so their runs will end "
                "SUCCEEDED without training a step"
            )
        message += f". {nothing_to_do_advice(start_over)}."
        logger.info("%s", message)
        warn_caller(message, NothingToDoWarning)

    def goodput_evidence(self, since: float, until: float | None, *, prices: Prices | None = None) -> Evidence:
        """What the goodput ledger is computed from, over ``[since, until)`` (to now when None)."""
        raise NotImplementedError(f"the {self._where} cannot account for its GPU-node-seconds")

    def run_goodput(self, job_id: str, *, prices: Prices | None = None) -> GoodputLedger:
        """The goodput ledger of one run (see :meth:`rl_lustre.run.Run.goodput`)."""
        from .goodput import run_goodput

        return run_goodput(self, job_id, prices=prices)

    def cluster_goodput(
        self, since: float | None, until: float | None, *, prices: Prices | None = None, runs: list[str] | None = None
    ) -> GoodputLedger:
        """The cluster's goodput ledger over a window, or a sweep's (``runs``)."""
        from .goodput import cluster_goodput

        return cluster_goodput(self, since, until, prices=prices, runs=runs)
