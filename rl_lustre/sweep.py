"""Sweeps: many jobs on one cluster, waited for together, summarised as a table.

Build the jobs with ``attrs.evolve``; each has its own name and so its own
checkpoint and log directories on the volume::

    base = GRPOJob(name="base", recipe="grpo_math_1B")
    jobs = [attrs.evolve(base, name=f"gens-{g}", num_generations_per_prompt=g) for g in (4, 8)]
    with cluster:
        result = run_sweep(cluster, jobs)
    print(result)
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from . import _validate as v
from .errors import ConfigError, JobFailedError, RLLustreError, WaitTimeoutError

if TYPE_CHECKING:
    from .cluster import Cluster
    from .job import GRPOJob
    from .run import Run

__all__ = ["Outcome", "SweepResult", "run_sweep", "wait_all"]

logger = logging.getLogger("rl_lustre.sweep")


@attrs.frozen
class Outcome:
    """How one run of a sweep ended.

    Attributes:
        name: the job's name (or the run's id when the job is unknown).
        job_id: the Ray submission id.
        status: ``SUCCEEDED``, ``FAILED``, ``STOPPED``, or ``TIMEOUT`` when the wait ran out.
        steps: the steps completed.
        total: the run's number of steps, when known.
        metrics: the last step's training results.
        checkpoints: the steps of its complete checkpoints.
        seconds: from the start of the wait until the run was seen to end.
        error: the error message, for runs that did not succeed.
    """

    name: str
    job_id: str
    status: str
    steps: int
    total: int | None
    metrics: Mapping[str, float] = attrs.field(factory=dict)
    checkpoints: tuple[int, ...] = ()
    seconds: float = 0.0
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == "SUCCEEDED"


@attrs.frozen
class SweepResult:
    """The outcomes of a sweep, in submission order; ``str()`` is a table.

    Attributes:
        outcomes: one per run.
        submit_seconds: how long :func:`run_sweep` took to check and submit every job
            (0 from :func:`wait_all`, which submits nothing).
    """

    outcomes: tuple[Outcome, ...]
    submit_seconds: float = 0.0

    @property
    def ok(self) -> bool:
        """Whether every run succeeded."""
        return all(o.ok for o in self.outcomes)

    def __iter__(self) -> Any:
        return iter(self.outcomes)

    def __len__(self) -> int:
        return len(self.outcomes)

    def metric_names(self) -> list[str]:
        names: dict[str, None] = {}
        for o in self.outcomes:
            names.update(dict.fromkeys(o.metrics))
        return sorted(names)

    def rows(self, metrics: Sequence[str] | None = None) -> list[dict[str, Any]]:
        """One plain dict per run (for pandas, CSV or JSON)."""
        names = list(metrics) if metrics is not None else self.metric_names()
        return [
            {
                "name": o.name,
                "status": o.status,
                "steps": f"{o.steps}/{o.total if o.total is not None else '?'}",
                **{m: o.metrics.get(m) for m in names},
                "checkpoints": ",".join(map(str, o.checkpoints)) or "-",
                "seconds": round(o.seconds, 1),
                "job_id": o.job_id,
            }
            for o in self.outcomes
        ]

    def __str__(self) -> str:
        rows = self.rows()
        if not rows:
            return "(empty sweep)"
        columns = list(rows[0])
        cells = [[_cell(r[c]) for c in columns] for r in rows]
        widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
        lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True))]
        lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)) for row in cells]
        failed = [o for o in self.outcomes if not o.ok and o.error]
        lines += [f"{o.name}: {o.error.splitlines()[0]}" for o in failed if o.error]
        return "\n".join(lines)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def wait_all(
    runs: Iterable[Run],
    *,
    names: Sequence[str] | None = None,
    timeout: float | None = None,
    poll: float = 1.0,
) -> SweepResult:
    """Wait until every run has ended; never raises for a failed run.

    Example:
        >>> result = wait_all([run_a, run_b], timeout=3600)  # doctest: +SKIP
        >>> result.ok  # doctest: +SKIP
        True

    Args:
        runs: run handles, e.g. from ``cluster.submit``.
        names: a display name per run (default: the job ids).
        timeout: seconds for the whole sweep; runs still going then are ``TIMEOUT``.
        poll: seconds between status checks.
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
    return SweepResult(tuple(_outcome(run, labels[i], ended.get(i), time.monotonic() - start)
                             for i, run in enumerate(runs)))


def _outcome(run: Run, name: str, seconds: float | None, elapsed: float) -> Outcome:
    status = run.status() if seconds is not None else "TIMEOUT"
    error: str | None = None
    if status in ("FAILED", "STOPPED"):
        try:
            run.wait(timeout=0)
        except JobFailedError as exc:
            error = str(exc)
        except WaitTimeoutError:
            pass
    elif status == "TIMEOUT":
        error = f"still {run.status()} after {elapsed:.0f}s"
    progress = run.progress
    metrics = run.metrics()
    last = metrics[max(metrics)] if metrics else {}
    try:
        steps: tuple[int, ...] = tuple(c.step for c in run.checkpoints())
    except (NotImplementedError, RLLustreError):
        steps = ()
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
    )


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


def run_sweep(
    cluster: Cluster, jobs: Iterable[GRPOJob], *, timeout: float | None = None, poll: float = 1.0
) -> SweepResult:
    """Submit every job to ``cluster`` (which must be up), then :func:`wait_all`.

    All jobs are checked first (names unique, each passes preflight), so a bad one
    stops the sweep before anything is submitted.

    Example:
        >>> with Cluster.local("sweep") as cluster:  # doctest: +SKIP
        ...     print(run_sweep(cluster, [attrs.evolve(base, name=f"s{i}") for i in range(3)]))

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
            raise ConfigError("run_sweep", "jobs", job.name,
                              "job names must be unique: each run gets its own checkpoint and log directory")
        seen.add(job.name)
    for job in jobs:
        job.preflight(cluster)
    runs = cluster._backend().submit_all(jobs)
    submitted = time.monotonic() - start
    logger.info("sweep: %d jobs checked and submitted in %.2fs", len(runs), submitted)
    result = wait_all(runs, names=[j.name for j in jobs], timeout=timeout, poll=poll)
    return attrs.evolve(result, submit_seconds=submitted)
