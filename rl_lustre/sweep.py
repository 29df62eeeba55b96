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

The jobs share the cluster through its queue (see :mod:`rl_lustre.queueing`): each run's
:class:`Outcome` says how long it was queued, how long it held its nodes and the GPU-hours
that came to, from its queue records (the head's clock); the result gives the sweep's
makespan against its lower bound, and ``result.plot("sweep.png")`` draws which run held
which node when. Each run's goodput and cost come from its goodput ledger;
``result.goodput()`` is the sweep's ledger: its runs and, from :func:`run_sweep`, the
cluster's own idle time while it ran.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from . import _validate as v
from .errors import SWEEP_FRESH, ConfigError, JobFailedError, RLLustreError, WaitTimeoutError
from .jobrecord import NOTHING_TO_DO_NOTE, REHEARSAL_NOTE

if TYPE_CHECKING:
    from .cluster import Cluster
    from .goodput import GoodputLedger
    from .job import GRPOJob
    from .queueing.state import Timeline
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
        varied: the job's values of the fields that differ between the sweep's jobs.
        synthetic: the run is a rehearsal: its metrics are synthetic, no model was trained.
        nothing_to_do: it SUCCEEDED without training a step: its newest checkpoint already
            reached ``max_num_steps`` (an earlier sweep's; ``fresh=True`` starts over).
        nodes: the nodes it took in its cluster's queue (None when it never joined it).
        gpus_per_node: the GPUs of each.
        submitted_at: when the cluster accepted it (Ray's job start time; the head's clock,
            seconds since the epoch).
        queued_seconds: from its submission until its nodes were its own (Ray's start, its
            supervisor's start and its wait in the queue); until it ended when it never got them.
        run_seconds: how long it held its nodes: from its first admission until it gave them
            back (a recovery after a lost node included: it kept its claim); 0 when it never
            got them.
        gpu_hours: ``nodes x gpus_per_node x run_seconds / 3600``: the GPU-hours it held (for a
            rehearsal, what a real job of this length would hold).
        timeline: its queue records (:class:`~rl_lustre.queueing.state.Timeline`).
        ended_at: when it gave its nodes back, or left the queue (the head's clock).
        goodput: its goodput ledger (where its GPU-node-seconds went), when the backend
            could account for them.
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
    varied: Mapping[str, Any] = attrs.field(factory=dict)
    synthetic: bool = False
    nothing_to_do: bool = False
    nodes: int | None = None
    gpus_per_node: float | None = None
    submitted_at: float | None = None
    queued_seconds: float | None = None
    run_seconds: float | None = None
    gpu_hours: float | None = None
    timeline: Timeline | None = None
    ended_at: float | None = None
    goodput: GoodputLedger | None = attrs.field(default=None, eq=False, repr=False)

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
        ledger: the sweep's goodput ledger (its runs and the cluster's own time while it
            ran), from :func:`run_sweep`.
    """

    outcomes: tuple[Outcome, ...]
    submit_seconds: float = 0.0
    ledger: GoodputLedger | None = attrs.field(default=None, eq=False, repr=False)

    def goodput(self) -> GoodputLedger:
        """Where the sweep's GPU-node-seconds went: :attr:`ledger` from :func:`run_sweep`; from
        :func:`wait_all`, the sum of its runs' ledgers (without the cluster's own idle time).

        Examples:
            >>> print(result.goodput())  # doctest: +SKIP

        Raises:
            NotReadyError: no run of it has a ledger (the backend could not account for them).
        """
        if self.ledger is not None:
            return self.ledger
        ledgers = [o.goodput for o in self.outcomes if o.goodput is not None]
        if not ledgers:
            from .errors import NotReadyError

            raise NotReadyError("no run of this sweep has a goodput ledger (see the log for why)")
        total = ledgers[0]
        for ledger in ledgers[1:]:
            total = total + ledger
        return attrs.evolve(total, scope="sweep", name=f"sweep of {len(ledgers)} runs", notes=(
            *total.notes, "the cluster's own idle time is not included: wait_all has no cluster; run_sweep or "
            "cluster.goodput(since=...) includes it"))

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

    def varied_names(self) -> list[str]:
        """The fields that differ between the runs' jobs, in the order first seen."""
        names: dict[str, None] = {}
        for o in self.outcomes:
            names.update(dict.fromkeys(o.varied))
        return list(names)

    @property
    def synthetic(self) -> bool:
        """Whether any run is a rehearsal, whose metrics are synthetic."""
        return any(o.synthetic for o in self.outcomes)

    def _timed(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.ended_at is not None]

    @property
    def gpu_hours(self) -> float | None:
        """The GPU-hours the sweep's runs held, together; None when none was in a queue."""
        timed = [o.gpu_hours for o in self.outcomes if o.gpu_hours is not None]
        return sum(timed) if timed else None

    @property
    def makespan_seconds(self) -> float | None:
        """From the first submission to the last run's end (the head's clock)."""
        timed = self._timed()
        if not timed:
            return None
        return max(o.ended_at or 0.0 for o in timed) - min(o.submitted_at or 0.0 for o in timed)

    @property
    def lower_bound_seconds(self) -> float | None:
        """No schedule of these runs on this cluster ends sooner: the larger of the longest
        run and all runs' node-seconds over the cluster's nodes (each run's measured
        ``run_seconds``)."""
        timed = [o for o in self._timed() if o.nodes is not None]
        capacity = max((o.timeline.capacity or 0 for o in timed if o.timeline is not None), default=0)
        if not timed or not capacity:
            return None
        longest = max(o.run_seconds or 0.0 for o in timed)
        return max(longest, sum((o.nodes or 0) * (o.run_seconds or 0.0) for o in timed) / capacity)

    @property
    def makespan_ratio(self) -> float | None:
        """``makespan_seconds / lower_bound_seconds``: 1.0 is a perfectly packed sweep."""
        makespan, bound = self.makespan_seconds, self.lower_bound_seconds
        return makespan / bound if makespan is not None and bound else None

    def plot(self, path: str | os.PathLike[str]) -> Path:
        """Draw the sweep as a timeline: which run held which of the cluster's nodes when,
        and how long each waited in the queue; writes a PNG at ``path``.

        Examples:
            >>> result.plot("sweep.png")  # doctest: +SKIP
            PosixPath('sweep.png')

        Raises:
            ConfigError: ``path`` does not end in ``.png`` or its directory does not exist.
        """
        from . import sweep_plot

        return sweep_plot.plot(self, path)

    def rows(self, metrics: Sequence[str] | None = None) -> list[dict[str, Any]]:
        """One plain dict per run (for pandas, CSV or JSON): name, the varied fields,
        status, steps, metrics, whether those are synthetic, checkpoints, seconds, job id.

        Examples:
            >>> result.rows()[0]  # doctest: +SKIP
            {'name': 'lr-1e-06', 'policy.optimizer.kwargs.lr': 1e-06, 'status': 'SUCCEEDED',
             'steps': '4/4', 'avg_reward': 0.31, 'loss': 0.02, 'synthetic': True, ...}
        """
        names = list(metrics) if metrics is not None else self.metric_names()
        varied = self.varied_names()
        queued = any(o.nodes is not None for o in self.outcomes)
        accounted = any(o.goodput is not None for o in self.outcomes)
        return [
            {
                "name": o.name,
                **{v: o.varied.get(v) for v in varied},
                "status": o.status,
                "steps": f"{o.steps}/{o.total if o.total is not None else '?'}",
                **{m: o.metrics.get(m) for m in names},
                "synthetic": o.synthetic,
                "checkpoints": ",".join(map(str, o.checkpoints)) or "-",
                **({"nodes": o.nodes,
                    "queued_s": _round(o.queued_seconds, 1),
                    "run_s": _round(o.run_seconds, 1),
                    "gpu_h": _round(o.gpu_hours, 3)} if queued else {}),
                "seconds": round(o.seconds, 1),
                **(_ledger_cells(o.goodput) if accounted else {}),
                "job_id": o.job_id,
            }
            for o in self.outcomes
        ]

    def __str__(self) -> str:
        rows = self.rows()
        if not rows:
            return "(empty sweep)"
        synthetic = self.synthetic
        metrics = set(self.metric_names())
        columns = [c for c in rows[0] if c != "synthetic"]
        starred = synthetic and any(c in metrics for c in columns)
        headers = [f"{c}*" if starred and c in metrics else c for c in columns]
        cells = [[_cell(r[c]) for c in columns] for r in rows]
        widths = [max(len(h), *(len(row[i]) for row in cells)) for i, h in enumerate(headers)]
        lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
        lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip() for row in cells]
        if self.ledger is not None or any(o.goodput is not None for o in self.outcomes):
            g = self.goodput()
            total = g.total_seconds
            share = {c: 0.0 if total <= 0 else g.seconds[c] / total for c in ("lost", "idle")}
            lines.append(f"GPU-hours billed: {g.gpu_hours():.3g} (goodput {g.goodput_fraction:.0%}, lost {share['lost']:.0%}, "
                         f"idle {share['idle']:.0%}) · ${g.total_usd:,.2f}"
                         + ("" if self.ledger is not None else " (runs only)"))
        if starred:
            lines.append("* synthetic: rehearsal runs train no model; their metrics only exercise the pipeline")
        idle = [o.name for o in self.outcomes if o.nothing_to_do]
        if idle:
            lines.append(f"{', '.join(idle)}: nothing left to do, the newest checkpoint already reaches "
                         "max_num_steps; run_sweep(cluster, jobs, fresh=True) starts over")
        failed = [o for o in self.outcomes if not o.ok and o.error]
        lines += [f"{o.name}: {o.error.splitlines()[0]}" for o in failed if o.error]
        summary = self.summary()
        if summary:
            lines.append(summary)
        return "\n".join(lines)

    def summary(self) -> str:
        """One line: the makespan, its lower bound and their ratio, the GPU-hours held ("" when
        no run was in a queue).

        Examples:
            >>> result.summary()  # doctest: +SKIP
            'makespan 231s, lower bound 208s (ratio 1.11), 12 runs, 4.06 GPU-hours held'
        """
        makespan, bound, ratio, hours = (self.makespan_seconds, self.lower_bound_seconds, self.makespan_ratio,
                                         self.gpu_hours)
        if makespan is None:
            return ""
        text = f"makespan {makespan:.0f}s"
        if bound is not None and ratio is not None:
            text += f", lower bound {bound:.0f}s (ratio {ratio:.2f})"
        text += f", {len(self.outcomes)} run{'s' if len(self.outcomes) != 1 else ''}"
        if hours is not None:
            text += f", {hours:.3g} GPU-hours held"
        return text


def _ledger_cells(ledger: GoodputLedger | None) -> dict[str, Any]:
    if ledger is None:
        return {"goodput": None, "usd": None}
    return {"goodput": f"{ledger.goodput_fraction:.0%}", "usd": round(ledger.total_usd, 2)}


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


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


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
    return SweepResult(tuple(_outcome(run, labels[i], ended.get(i), time.monotonic() - start, varied[i],
                                      ledger=_run_ledger(run) if ledgers else None)
                             for i, run in enumerate(runs)))


def _run_ledger(run: Run) -> GoodputLedger | None:
    try:
        return run.goodput()
    except (NotImplementedError, RLLustreError) as exc:
        logger.info("sweep: no goodput ledger for %s: %s", run.job_id, exc)
        return None


def _outcome(run: Run, name: str, seconds: float | None, elapsed: float,
             varied: Mapping[str, Any], *, ledger: GoodputLedger | None = None) -> Outcome:
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
        "nodes": line.nodes, "gpus_per_node": line.gpus_per_node, "submitted_at": info.start_time,
        "queued_seconds": max(0.0, queued), "run_seconds": held,
        "gpu_hours": line.nodes * line.gpus_per_node * held / 3600, "timeline": line, "ended_at": end,
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


def run_sweep(
    cluster: Cluster, jobs: Iterable[GRPOJob], *, timeout: float | None = None, poll: float = 1.0,
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
            raise ConfigError("run_sweep", "jobs", job.name,
                              "job names must be unique: each run gets its own checkpoint and log directory")
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
