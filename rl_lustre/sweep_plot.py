"""A picture of a sweep: which run held which of the cluster's nodes when, and how long
each waited in the queue.

:func:`collect` turns a :class:`~rl_lustre.sweep_result.SweepResult` into bars (seconds since
the sweep's first submission, the head's clock, from each run's queue records);
:func:`figure` draws them on a matplotlib ``Figure`` (imported only here);
:meth:`SweepResult.plot <rl_lustre.sweep_result.SweepResult.plot>` does both and writes a PNG.

Example::

    result = run_sweep(cluster, jobs)
    result.plot("sweep.png")
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import attrs

from .plot import WIDTH_IN, save, save_check

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from .sweep_result import Outcome, SweepResult

__all__ = ["Bar", "SweepPlot", "Wait", "collect", "figure", "plot"]

OWNER = "SweepResult.plot"


@attrs.frozen
class Bar:
    """A run holding one of the queue's node slots from ``start`` to ``end`` (seconds since
    the first submission); ``recovering`` while it waited for lost nodes, keeping its claim."""

    name: str
    slot: int
    start: float
    end: float
    recovering: bool = False


@attrs.frozen
class Wait:
    """A run in the queue: from its submission until it held its nodes (or left)."""

    name: str
    start: float
    end: float


@attrs.frozen
class SweepPlot:
    """Everything the sweep's plot shows: ``bars`` per run per row, ``waits`` per run,
    ``capacity`` rows named ``rows`` (Ray's node names when the runs' records name them,
    else the queue's node numbers), and the title."""

    title: str
    capacity: int
    bars: tuple[Bar, ...] = ()
    waits: tuple[Wait, ...] = ()
    names: tuple[str, ...] = ()
    rows: tuple[str, ...] = ()


def collect(result: SweepResult) -> SweepPlot:
    """The bars of ``result``'s plot: one per run per slot per admission, from the admission
    until the next one (a rerun after a recovery) or the release; recoveries as bars of their own."""
    timed = [o for o in result if o.timeline is not None and o.submitted_at is not None and o.ended_at is not None]
    origin = min((o.submitted_at or 0.0 for o in timed), default=0.0)
    bars: list[Bar] = []
    waits: list[Wait] = []
    capacity = 0
    for o in timed:
        line = o.timeline
        assert line is not None
        assert o.submitted_at is not None
        assert o.ended_at is not None
        capacity = max(capacity, line.capacity or 0, *(s + 1 for _, slots in line.admissions for s in slots))
        end = o.ended_at - origin
        first = line.started_at
        waits.append(Wait(o.name, o.submitted_at - origin, (first if first is not None else o.ended_at) - origin))
        for i, (at, slots) in enumerate(line.admissions):
            until = line.admissions[i + 1][0] - origin if i + 1 < len(line.admissions) else end
            lost = [
                (a - origin, (b if b is not None else o.ended_at) - origin)
                for a, b in line.recoveries
                if at - origin <= a - origin < until
            ]
            for slot in slots:
                bars.append(Bar(o.name, slot, at - origin, until if not lost else lost[0][0]))
                bars += [Bar(o.name, slot, a, b, recovering=True) for a, b in lost]
    rows = tuple(f"node {i}" for i in range(capacity))
    named = _ray_nodes(timed, capacity)
    if named is not None:
        # Each run's bar on the Ray nodes its placement groups held.
        rows = tuple(sorted({n for nodes in named.values() for n in nodes}))
        spans = {b.name: (b.start, b.end) for b in bars}
        bars = [
            Bar(name, rows.index(node), *spans[name])
            for name, nodes in named.items()
            if name in spans
            for node in nodes
        ]
    title = result.summary() or f"{len(result)} runs"
    return SweepPlot(
        title=title,
        capacity=capacity,
        bars=tuple(bars),
        waits=tuple(waits),
        names=tuple(o.name for o in timed),
        rows=rows,
    )


def _ray_nodes(timed: Sequence[Outcome], capacity: int) -> dict[str, tuple[str, ...]] | None:
    """Each run's Ray nodes, when every run that held nodes names exactly as many as it took,
    once (no recovery), and together they name the cluster's nodes (worker nodes, not a
    head that declares every GPU); else None."""
    out: dict[str, tuple[str, ...]] = {}
    for o in timed:
        line = o.timeline
        if line is None or not line.admissions:
            continue
        if line.recoveries or len(line.admissions) != 1 or len(line.held_nodes) != line.nodes:
            return None
        out[o.name] = line.held_nodes
    names = {n for nodes in out.values() for n in nodes}
    return out if out and len(names) == capacity else None


def figure(data: SweepPlot) -> Figure:
    """``data`` drawn on a new ``Figure`` (Agg canvas): above, the cluster's node slots with
    a bar per run (hatched while recovering); below, a line per run while it was queued."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    rows = max(data.capacity, len(data.rows), 1)
    fig = Figure(figsize=(WIDTH_IN, 1.5 + 0.45 * rows + 0.25 * len(data.names)), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    fig.suptitle(data.title)
    nodes_ax, queue_ax = fig.subplots(2, 1, sharex=True, height_ratios=[max(rows, 1), max(len(data.names), 1) * 0.6])
    colors = {name: f"C{i % 10}" for i, name in enumerate(data.names)}
    for bar in data.bars:
        nodes_ax.barh(
            bar.slot,
            bar.end - bar.start,
            left=bar.start,
            height=0.8,
            color=colors.get(bar.name, "0.5"),
            alpha=0.35 if bar.recovering else 0.85,
            hatch="//" if bar.recovering else None,
            edgecolor="black",
            linewidth=0.5,
        )
        if bar.end - bar.start > 0:
            nodes_ax.text(
                (bar.start + bar.end) / 2, bar.slot, bar.name, ha="center", va="center", fontsize=7, clip_on=True
            )
    nodes_ax.set_yticks(range(rows), list(data.rows) or [f"node {i}" for i in range(rows)])
    nodes_ax.set_ylim(rows - 0.5, -0.5)
    nodes_ax.set_title("Who held which node (hatched: recovering, its claim kept)")
    for i, wait in enumerate(data.waits):
        queue_ax.plot(
            [wait.start, wait.end], [i, i], color=colors.get(wait.name, "0.5"), linewidth=3, solid_capstyle="butt"
        )
    queue_ax.set_yticks(range(len(data.waits)), [w.name for w in data.waits])
    queue_ax.set_ylim(max(len(data.waits), 1) - 0.5, -0.5)
    queue_ax.set_title("Queued: from submission until it held its nodes")
    queue_ax.set_xlabel("seconds since the first submission (the Ray head's clock)")
    if not data.bars:
        nodes_ax.text(0.5, 0.5, "no run held nodes", transform=nodes_ax.transAxes, ha="center")
    return fig


def plot(result: SweepResult, path: str | os.PathLike[str]) -> Path:
    """Write ``result``'s timeline as a PNG at ``path`` (checked before anything is drawn)."""
    save_check(path, OWNER)
    return save(figure(collect(result)), path, OWNER)
