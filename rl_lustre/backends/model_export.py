"""The model out: one checkpoint of a run copied to Cloud Storage while the cluster is up
(:meth:`rl_lustre.Run.export_model`), converted to Hugging Face format first when asked.

1. The checkpoint: ``"final"`` (the newest ``step_N``), ``"best"`` (the one ``keep_top_k``
   ranks first: by the job's ``checkpointing.metric_name``, as NeMo-RL ranks them), or a
   step number.
2. With ``format="hf"``: NeMo-RL's own converter for the policy's backend
   (:mod:`rl_lustre.nemo_rl.converters`) runs as a Ray job asking for a node with the
   memory the whole model needs (``rl-lustre-convert-<id>``), writing
   ``<mount>/rl_lustre/models/<run id>/step_N-hf`` on the volume.
3. The checkpoint (or its conversion) is copied to ``dest`` with the teardown's movers
   (ExportData on GKE, file copies locally), verified by its counters.

``dry_run=True`` says what would run (the converter's command, the memory it asks for,
source and destination) and runs nothing.
"""

from __future__ import annotations

import logging
import posixpath
import threading
import time
import uuid
from typing import TYPE_CHECKING

import attrs

from ..errors import ConfigError, RayError, WaitTimeoutError
from ..oncluster.nemo_formats import checkpoint_name
from ..oncluster.records import CHECKPOINT_DIR, METRIC, MODEL, NEMO_RL_DIR, POLICY_BACKEND, RUN_ID
from .export import ModelExport

if TYPE_CHECKING:
    from ..nemo_rl.checkpoints import Checkpoint
    from .export import Mover
    from .submission import JobsBackend

__all__ = ["export_for", "export_model", "pick_checkpoint"]

logger = logging.getLogger("rl_lustre.export")
# Under the volume's mount path: conversions to Hugging Face format.
MODELS = "rl_lustre/models"
# What the cluster-side existence test prints before its exit status.
_EXISTS_MARK = "rl-lustre-test-d="


def pick_checkpoint(checkpoints: list[Checkpoint], step: str | int, metric: str | None) -> Checkpoint:
    """The checkpoint ``step`` names: ``"final"``, ``"best"`` (by ``metric``, ``-name`` when
    lower is better), or a step number.

    Examples:
        >>> from pathlib import Path
        >>> from rl_lustre.nemo_rl.checkpoints import Checkpoint
        >>> cs = [Checkpoint(step=s, path=Path(f"/c/step_{s}"), size_bytes=1, finished_at=0.0, save_seconds=None,
        ...                  training_info={"val_reward": r}) for s, r in ((2, 0.5), (4, 0.3))]
        >>> pick_checkpoint(cs, "final", None).step, pick_checkpoint(cs, "best", "val_reward").step
        (4, 2)
        >>> pick_checkpoint(cs, 2, None).step
        2

    Raises:
        ConfigError: no such checkpoint, or ``"best"`` for a run that ranks by no metric.
    """
    steps = [c.step for c in checkpoints]
    if not checkpoints:
        raise ConfigError("Run.export_model", "step", step, "the run has no complete checkpoint (yet)")
    if step == "final":
        return max(checkpoints, key=lambda c: c.step)
    if step == "best":
        if not metric:
            raise ConfigError(
                "Run.export_model",
                "step",
                step,
                "'best' needs the metric keep_top_k ranks checkpoints by (checkpointing.metric_name); this run "
                f"ranks by none: give a step ({', '.join(map(str, steps))}) or 'final'",
            )
        name, higher = metric.removeprefix("-"), not metric.startswith("-")
        ranked = [c for c in checkpoints if isinstance(c.training_info.get(name), (int, float))]
        if not ranked:
            raise ConfigError("Run.export_model", "step", step, f"no checkpoint records {name!r}")
        return (max if higher else min)(ranked, key=lambda c: (c.training_info[name], c.step))
    if isinstance(step, int) and not isinstance(step, bool):
        for c in checkpoints:
            if c.step == step:
                return c
        raise ConfigError("Run.export_model", "step", step, f"is not a checkpoint of the run (it has {steps})")
    raise ConfigError("Run.export_model", "step", step, "must be 'final', 'best' or a step number")


def _convert(backend: JobsBackend, command: str, memory: int, timeout: float) -> None:
    """Run the converter as a Ray job on a node with ``memory`` free; raise if it fails."""
    from ..nemo_rl.caches import nemo_rl_cache_env

    jobs = backend.jobs
    job_id = f"rl-lustre-convert-{uuid.uuid4().hex[:12]}"
    env = nemo_rl_cache_env(backend.cluster.mount_path)
    jobs.submit(
        command,
        submission_id=job_id,
        runtime_env={"env_vars": dict(env)},
        metadata={"rl_lustre.cluster": backend.cluster.name, "rl_lustre.helper": "convert-checkpoint"},
        entrypoint_memory=memory,
    )
    logger.info("converting with %s (job %s, %.0f GB of memory)", command, job_id, memory / 1e9)
    deadline = time.monotonic() + timeout
    while not (info := jobs.info(job_id)) or not info.terminal:
        if time.monotonic() > deadline:
            jobs.stop(job_id)
            raise WaitTimeoutError(f"the conversion {job_id}", timeout, info.status if info else "unknown")
        time.sleep(1.0)
    if info.status != "SUCCEEDED":
        tail = "\n".join(f"  | {line}" for line in jobs.logs(job_id).splitlines()[-15:])
        raise RayError(f"the conversion {job_id} ended {info.status}:\n{tail}")


def export_model(
    backend: JobsBackend,
    job_id: str,
    dest: str,
    *,
    step: str | int,
    format: str | None,
    dry_run: bool,
    timeout: float,
    mover: Mover,
) -> ModelExport:
    """Export one checkpoint of job ``job_id`` to ``dest`` (see the module)."""
    from ..nemo_rl.converters import conversion
    from .export import Transfer, _run_transfer

    info = backend.jobs.info(job_id)
    if info is None:
        raise RayError(f"the cluster has no job {job_id!r}")
    meta = dict(info.metadata or {})
    checkpoint_dir = meta.get(CHECKPOINT_DIR)
    if not checkpoint_dir:
        raise ConfigError("Run.export_model", "job", job_id, "saves no checkpoint (checkpointing is off)")
    chosen = pick_checkpoint(backend.list_checkpoints(checkpoint_dir), step, meta.get(METRIC))
    run_id = meta.get(RUN_ID, job_id)
    source = str(chosen.path)
    command = memory = None
    if format == "hf":
        out = posixpath.join(backend.cluster.mount_path, MODELS, run_id, f"{checkpoint_name(chosen.step)}-hf")
        conv = conversion(
            backend.cluster,
            meta.get(NEMO_RL_DIR) or "/opt/nemo-rl",
            meta.get(POLICY_BACKEND) or "dtensor",
            source,
            out,
            meta.get(MODEL),
        )
        command, memory, source = conv.command, conv.memory_bytes, out
    result = ModelExport(run_id, chosen.step, format or "checkpoint", source, dest, command, memory, dry_run=dry_run)
    if dry_run:
        return result
    if command is not None and memory is not None and not _exists(backend, source):
        _convert(backend, command, memory, timeout)
    state = _run_transfer(
        mover,
        Transfer(source, "", f"{run_id} {checkpoint_name(chosen.step)}"),
        abandon=threading.Event(),
        poll=lambda: time.sleep(0.5),
        echo=logger.info,
    )
    return attrs.evolve(result, files=state.found, bytes=state.bytes_copied + state.bytes_skipped)


def _exists(backend: JobsBackend, path: str) -> bool:
    """Whether an earlier conversion already wrote ``path`` (converters never overwrite)."""
    if backend.cheap_listing:
        import os

        return os.path.isdir(path)
    import shlex

    # Ray's job log starts with the entrypoint itself ("Running entrypoint for job ...: <command>"):
    # only a line the command printed, whole, answers (never a word the command also contains).
    helper = f"rl-lustre-ls-{uuid.uuid4().hex[:12]}"
    _, log = backend.jobs.run(f"test -d {shlex.quote(path)}; echo {_EXISTS_MARK}$?", submission_id=helper)
    answers = [line[len(_EXISTS_MARK) :] for line in log.splitlines() if line.startswith(_EXISTS_MARK)]
    if not answers or answers[-1].strip() not in ("0", "1"):
        tail = "\n".join(f"  | {line}" for line in log.splitlines()[-10:])
        raise RayError(f"could not tell whether {path} exists on the cluster (job {helper}):\n{tail}")
    return answers[-1].strip() == "0"


def export_for(
    backend: JobsBackend,
    job_id: str,
    dest: str,
    *,
    step: str | int = "final",
    format: str | None = None,
    dry_run: bool = False,
    timeout: float = 3600.0,
) -> ModelExport:
    """:func:`export_model` for ``backend``, with the mover of its kind; ``dest`` checked first:
    ``gs://BUCKET/PREFIX`` on GKE, a directory (or ``file://``) locally."""
    from ..plan.results import ResultsLocation
    from ..spec.cluster_storage import WARM_START_RULE, is_warm_start

    if backend.cluster.backend == "gke":
        if not is_warm_start(dest):
            raise ConfigError("Run.export_model", "dest", dest, WARM_START_RULE)
    elif not isinstance(dest, str) or not dest.strip() or "://" in dest.removeprefix("file://"):
        raise ConfigError(
            "Run.export_model", "dest", dest, "must be a directory path or 'file://' URI on a local cluster"
        )
    where = ResultsLocation(dest)
    mover = backend.results_mover(where)  # type: ignore[attr-defined]
    return export_model(
        backend, job_id, where.uri, step=step, format=format, dry_run=dry_run, timeout=timeout, mover=mover
    )
