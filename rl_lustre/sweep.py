"""Sweeps: many jobs on one cluster, waited for together, summarised as a table.

Build the jobs with ``attrs.evolve``; each has its own name and so its own
checkpoint and log directories on the volume::

    base = GRPOJob(name="base", recipe="grpo_math_1B")
    jobs = [attrs.evolve(base, name=f"gens-{g}", num_generations_per_prompt=g) for g in (4, 8)]
    with cluster:
        result = run_sweep(cluster, jobs)
    print(result)

The table has a column per field that differs between the jobs (``num_generations_per_prompt``
above; an override key such as ``policy.optimizer.kwargs.lr`` when ``overrides`` differ),
and marks the metrics of rehearsal runs as synthetic.

The jobs share the cluster through its queue (see :mod:`rl_lustre.oncluster.queue`): each run's
:class:`Outcome` says how long it was queued, how long it held its nodes and the GPU-hours
that came to, from its queue records (the head's clock); the result gives the sweep's
makespan against its lower bound, and ``result.plot("sweep.png")`` draws which run held
which node when. Each run's goodput and cost come from its goodput ledger;
``result.goodput()`` is the sweep's ledger: its runs and, from :func:`run_sweep`, the
cluster's own idle time while it ran. The result (:class:`Outcome`, :class:`SweepResult`,
re-exported here) is in :mod:`rl_lustre.sweep_result`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from . import _validate as v
from ._public import public
from .errors import SWEEP_FRESH, ConfigError, JobFailedError, RLLustreError, WaitTimeoutError
from .oncluster.records import NOTHING_TO_DO_NOTE, REHEARSAL_NOTE
from .sweep_result import Outcome, SweepResult

if TYPE_CHECKING:
    from .cluster import Cluster
    from .goodput import GoodputLedger
    from .job import GRPOJob
    from .run import Run

__all__ = ["Outcome", "SweepResult", "run_sweep", "wait_all"]

logger = logging.getLogger("rl_lustre.sweep")


def varied_fields(jobs: Sequence[GRPOJob]) -> list[dict[str, Any]]:
    """Per job, its values of the fields that differ between ``jobs`` (not the name).

    An ``overrides`` (or ``env``) mapping counts key by key, so a sweep over one override
    shows that key.

    Examples:
        >>> import attrs
        >>> from rl_lustre import GRPOJob
        >>> base = GRPOJob(name="b", recipe="grpo_math_1B")
        >>> varied_fields([attrs.evolve(base, name=f"lr-{lr}",
        ...                             overrides={"policy.optimizer.kwargs.lr": lr}) for lr in (1e-6, 3e-6)])
        [{'policy.optimizer.kwargs.lr': 1e-06}, {'policy.optimizer.kwargs.lr': 3e-06}]
    """
    flat = [_flat_fields(job) for job in jobs]
    keys: dict[str, None] = {}
    for f in flat:
        keys.update(dict.fromkeys(f))
    differ = [k for k in keys if len({repr(f.get(k, _MISSING)) for f in flat}) > 1]
    return [{k: f.get(k) for k in differ} for f in flat]


_MISSING = object()


def _flat_fields(job: GRPOJob) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for field in attrs.fields(type(job)):
        # Only what the user set: not the name, not caches (init=False, eq=False).
        if field.name == "name" or not field.init or not field.eq:
            continue
        value = getattr(job, field.name)
        if isinstance(value, Mapping):
            out.update({str(k): v for k, v in value.items()})
        else:
            out[field.name] = value
    return out


@public("rl_lustre")
def wait_all(
    runs: Iterable[Run],
    *,
    names: Sequence[str] | None = None,
    timeout: float | None = None,
    poll: float = 1.0,
    jobs: Sequence[GRPOJob] | None = None,
    ledgers: bool = True,
) -> SweepResult:
    """Wait until every run has ended; never raises for a failed run.

    Examples:
        >>> result = wait_all([run_a, run_b], timeout=3600)  # doctest: +SKIP
        >>> result.ok  # doctest: +SKIP
        True

    Args:
        runs: run handles, e.g. from ``cluster.submit``.
        names: a display name per run (default: the job ids).
        timeout: seconds for the whole sweep; runs still going then are ``TIMEOUT``.
        poll: seconds between status checks.
        jobs: the runs' jobs, in the same order: the fields that differ between them
            become columns of the result.
        ledgers: take each run's goodput ledger (``Outcome.goodput``); a backend that
            cannot leaves it None, with the reason logged.
    """
    from .run import Run

    runs = _sequence("wait_all", "runs", runs, Run, "run handles (from cluster.submit)")
    _check_wait("wait_all", timeout, poll)
    if names is not None:
        for n in _sequence("wait_all", "names", names, str, "display names"):
            v.no_control("wait_all", "names", n)
    labels = list(names) if names is not None else [r.job_id for r in runs]
    if len(labels) != len(runs):
        raise ConfigError("wait_all", "names", len(labels), f"must name each of the {len(runs)} runs")
    if jobs is not None and len(jobs) != len(runs):
        raise ConfigError("wait_all", "jobs", len(jobs), f"must give the job of each of the {len(runs)} runs")
    varied = varied_fields(jobs) if jobs is not None else [{} for _ in runs]
    start = time.monotonic()
    deadline = None if timeout is None else start + timeout
    ended: dict[int, float] = {}
    while len(ended) < len(runs):
        for i, run in enumerate(runs):
            if i not in ended and run.done():
                ended[i] = time.monotonic() - start
                logger.info("sweep: %s ended %s", labels[i], run.status())
        if len(ended) == len(runs):
            break
        if deadline is not None and time.monotonic() >= deadline:
            break
        time.sleep(poll if deadline is None else max(0.0, min(poll, deadline - time.monotonic())))
    return SweepResult(
        tuple(
            _outcome(
                run,
                labels[i],
                ended.get(i),
                time.monotonic() - start,
                varied[i],
                ledger=_run_ledger(run) if ledgers else None,
            )
            for i, run in enumerate(runs)
        )
    )


def _run_ledger(run: Run) -> GoodputLedger | None:
    try:
        return run.goodput()
    except (NotImplementedError, RLLustreError) as exc:
        logger.info("sweep: no goodput ledger for %s: %s", run.job_id, exc)
        return None


def _outcome(
    run: Run,
    name: str,
    seconds: float | None,
    elapsed: float,
    varied: Mapping[str, Any],
    *,
    ledger: GoodputLedger | None = None,
) -> Outcome:
    status = run.status() if seconds is not None else "TIMEOUT"
    error: str | None = None
    if status == "FAILED":
        try:
            run.wait(timeout=0)
        except JobFailedError as exc:
            error = str(exc)
        except WaitTimeoutError:
            pass
    elif status == "STOPPED":
        error = f"stopped at {run.progress} (run.stop() or `rl-lustre stop`); its checkpoints stay"
    elif status == "TIMEOUT":
        error = f"still {run.status()} after {elapsed:.0f}s"
    notes = run.notes()
    progress = run.progress
    metrics = run.metrics()
    last = metrics[max(metrics)] if metrics else {}
    try:
        steps: tuple[int, ...] = tuple(c.step for c in run.checkpoints())
    except (NotImplementedError, RLLustreError):
        steps = ()
    timing = _timing(run) if seconds is not None else {}
    return Outcome(
        name=name,
        job_id=run.job_id,
        status=status,
        steps=progress.completed,
        total=progress.total,
        metrics=last,
        checkpoints=steps,
        seconds=seconds if seconds is not None else elapsed,
        error=error,
        varied=varied,
        synthetic=REHEARSAL_NOTE in notes,
        nothing_to_do=any(n.startswith(NOTHING_TO_DO_NOTE) for n in notes),
        **timing,
        goodput=ledger,
    )


def _timing(run: Run) -> dict[str, Any]:
    """An ended run's queue facts, from its queue records and Ray's job times (both the
    head's clock); nothing for a run that never joined a queue."""
    line = run.timeline()
    info = run.info()
    if line is None or info.start_time is None:
        return {}
    started = line.started_at
    end = line.released_at if line.released_at is not None else info.end_time
    if end is None:
        return {}
    if started is None:
        queued, held = end - info.start_time, 0.0
    else:
        queued, held = started - info.start_time, max(0.0, end - started)
    return {
        "nodes": line.nodes,
        "gpus_per_node": line.gpus_per_node,
        "submitted_at": info.start_time,
        "queued_seconds": max(0.0, queued),
        "run_seconds": held,
        "gpu_hours": line.nodes * line.gpus_per_node * held / 3600,
        "timeline": line,
        "ended_at": end,
    }


def _sequence(owner: str, param: str, items: Any, kind: type, what: str) -> list[Any]:
    """``items`` as a list, each a ``kind``; one string or one spec is not a sequence of them."""
    if isinstance(items, (str, bytes, Mapping, kind)) or not isinstance(items, Iterable):
        raise ConfigError(owner, param, items, f"must be a list of {what} (got {v.type_name(items)})")
    out = list(items)
    for i, item in enumerate(out):
        if not isinstance(item, kind):
            raise ConfigError(owner, param, item, f"item {i} must be one of {what} (got {v.type_name(item)})")
    return out


def _check_wait(owner: str, timeout: Any, poll: Any) -> None:
    v.need(owner, "timeout", timeout, (int, float), "a number of seconds or None", optional=True)
    v.need(owner, "poll", poll, (int, float), "a number of seconds")
    if timeout is not None and not timeout >= 0:
        raise ConfigError(owner, "timeout", timeout, "must be at least 0 seconds, or None to wait without limit")
    if not 0 < poll < float("inf"):
        raise ConfigError(owner, "poll", poll, "must be a positive, finite number of seconds")


@public("rl_lustre")
def run_sweep(
    cluster: Cluster,
    jobs: Iterable[GRPOJob],
    *,
    timeout: float | None = None,
    poll: float = 1.0,
    fresh: bool = False,
) -> SweepResult:
    """Submit every job to ``cluster`` (which must be up), then :func:`wait_all`.

    All jobs are checked first (names unique, each passes preflight), so a bad one
    stops the sweep before anything is submitted.

    Examples:
        >>> with Cluster.local("sweep") as cluster:  # doctest: +SKIP
        ...     print(run_sweep(cluster, [attrs.evolve(base, name=f"s{i}") for i in range(3)]))

    Args:
        cluster: a cluster that is up.
        jobs: the jobs, each with its own name.
        timeout: seconds for the whole sweep (see :func:`wait_all`).
        poll: seconds between status checks.
        fresh: start every job over (see :meth:`Cluster.submit`) instead of resuming
            from checkpoints an earlier sweep left.

    Raises:
        ConfigError: two jobs share a name (they would share checkpoint directories),
            or a job fails preflight.
    """
    from .cluster import Cluster
    from .job import GRPOJob

    start = time.monotonic()
    v.need("run_sweep", "cluster", cluster, Cluster, "a Cluster")
    jobs = _sequence("run_sweep", "jobs", jobs, GRPOJob, "GRPOJob specs")
    _check_wait("run_sweep", timeout, poll)
    seen: set[str] = set()
    for job in jobs:
        if job.name in seen:
            raise ConfigError(
                "run_sweep",
                "jobs",
                job.name,
                "job names must be unique: each run gets its own checkpoint and log directory",
            )
        seen.add(job.name)
    for job in jobs:
        job.preflight(cluster)
    began = time.time()
    runs = cluster._backend().submit_all(jobs, fresh=fresh, start_over=SWEEP_FRESH)
    submitted = time.monotonic() - start
    logger.info("sweep: %d jobs checked and submitted in %.2fs", len(runs), submitted)
    result = wait_all(runs, names=[j.name for j in jobs], timeout=timeout, poll=poll, jobs=jobs, ledgers=False)
    # One ledger for the whole sweep (one reading of the cluster): its runs, and the
    # cluster's own time while it ran; each run's part goes to its outcome.
    try:
        ledger = cluster._backend().cluster_goodput(began - 1.0, time.time(), runs=[r.job_id for r in runs])
    except (NotImplementedError, RLLustreError) as exc:
        logger.info("sweep: no goodput ledger: %s", exc)
        return attrs.evolve(result, submit_seconds=submitted)
    outcomes = tuple(attrs.evolve(o, goodput=_part(ledger, o.job_id)) for o in result.outcomes)
    return attrs.evolve(result, outcomes=outcomes, submit_seconds=submitted, ledger=ledger)


def _part(ledger: GoodputLedger, job_id: str) -> GoodputLedger | None:
    try:
        return ledger.run(job_id)
    except KeyError:
        return None
