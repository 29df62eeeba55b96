"""The result of a sweep: how each run ended (:class:`Outcome`), and the sweep's table,
numbers and pictures (:class:`SweepResult`).

``str(result)`` is a table with a column per field that differs between the jobs (an
override key such as ``policy.optimizer.kwargs.lr`` when ``overrides`` differ); it marks
the metrics of rehearsal runs as synthetic, and ``result.rows()`` gives its rows as plain
dicts. Each :class:`Outcome` says, from its run's queue records (the head's clock), how
long it was queued, how long it held its nodes and the GPU-hours that came to; the result
gives the sweep's makespan against its lower bound, ``result.plot("sweep.png")`` draws
which run held which node when (:mod:`rl_lustre.sweep_plot`), and ``result.goodput()``
is the sweep's goodput ledger. :mod:`rl_lustre.sweep` runs the sweeps that make them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from ._public import public

if TYPE_CHECKING:
    from .goodput import GoodputLedger
    from .queueing.state import Timeline

__all__ = ["Outcome", "SweepResult"]


@public("rl_lustre")
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
        timeline: its queue records (:class:`~rl_lustre.Timeline`).
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


@public("rl_lustre")
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
        return attrs.evolve(
            total,
            scope="sweep",
            name=f"sweep of {len(ledgers)} runs",
            notes=(
                *total.notes,
                "the cluster's own idle time is not included: wait_all has no cluster; run_sweep or "
                "cluster.goodput(since=...) includes it",
            ),
        )

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
                **(
                    {
                        "nodes": o.nodes,
                        "queued_s": _round(o.queued_seconds, 1),
                        "run_s": _round(o.run_seconds, 1),
                        "gpu_h": _round(o.gpu_hours, 3),
                    }
                    if queued
                    else {}
                ),
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
            lines.append(
                f"GPU-hours billed: {g.gpu_hours():.3g} (goodput {g.goodput_fraction:.0%}, lost {share['lost']:.0%}, "
                f"idle {share['idle']:.0%}) · ${g.total_usd:,.2f}" + ("" if self.ledger is not None else " (runs only)")
            )
        if starred:
            lines.append("* synthetic: rehearsal runs train no model; their metrics only exercise the pipeline")
        idle = [o.name for o in self.outcomes if o.nothing_to_do]
        if idle:
            lines.append(
                f"{', '.join(idle)}: nothing left to do, the newest checkpoint already reaches "
                "max_num_steps; run_sweep(cluster, jobs, fresh=True) starts over"
            )
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
        makespan, bound, ratio, hours = (
            self.makespan_seconds,
            self.lower_bound_seconds,
            self.makespan_ratio,
            self.gpu_hours,
        )
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


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)
