"""A picture of a run: reward and loss per step, checkpoint writes, on GKE Lustre
throughput and GPU utilisation over time, and where its GPU-node-hours went (the goodput
ledger as one stacked bar).

:func:`collect` gathers the data from a :class:`~rl_lustre.run.Run` (its log, its
checkpoints and, on GKE, Cloud Monitoring); :func:`figure` draws it on a matplotlib
``Figure`` (Agg canvas, no display, imported only here); :meth:`Run.plot
<rl_lustre.run.Run.plot>` does both and writes a PNG.

Example::

    run.wait()
    run.plot("run.png")
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from ._public import public
from .errors import ConfigError

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from .goodput import GoodputLedger
    from .metrics import ClusterMetrics
    from .run import Run

__all__ = ["RunData", "SaveRecord", "collect", "figure", "save", "save_check"]

REWARD_KEYS = ("avg_reward", "reward", "mean_reward")
WIDTH_IN, ROW_IN, LEDGER_IN, DPI = 12.0, 4.0, 1.8, 100
# The ledger's bar: one colour per category, in the ledger's order.
CATEGORY_COLORS = {
    "capacity": "tab:gray",
    "startup": "tab:olive",
    "training": "tab:green",
    "checkpoint": "tab:blue",
    "validation": "tab:cyan",
    "lost": "tab:red",
    "hung": "tab:pink",
    "idle": "tab:orange",
    "unattributed": "lightgray",
}


@public("rl_lustre")
@attrs.frozen
class SaveRecord:
    """One checkpoint save: its step, how long it took, its write rate and size (None where
    the checkpoint was since deleted by ``keep_top_k``)."""

    step: int
    seconds: float | None
    mb_per_second: float | None
    size_mb: float | None


@public("rl_lustre")
@attrs.frozen
class RunData:
    """Everything a run's plot shows.

    Attributes:
        title: the plot's title: the model and recipe (the job id when they are unknown).
        steps: the completed steps, in order.
        reward: the average reward of each step (None where not printed).
        loss: the loss of each step.
        saves: the checkpoint saves.
        cluster: Lustre throughput and GPU utilisation while it ran (GKE), or None.
        subtitle: the line under the title (the job id).
        synthetic: a rehearsal run: the title and the training panel say its metrics are
            synthetic (no model was trained).
        ledger: the run's goodput ledger, or None (``no_ledger`` says why).
        no_ledger: why there is no ledger.
    """

    title: str
    steps: tuple[int, ...] = ()
    reward: tuple[float | None, ...] = ()
    loss: tuple[float | None, ...] = ()
    saves: tuple[SaveRecord, ...] = ()
    cluster: ClusterMetrics | None = None
    subtitle: str = ""
    synthetic: bool = False
    ledger: GoodputLedger | None = None
    no_ledger: str = ""

    def plot(self, path: str | os.PathLike[str]) -> Path:
        """Write a PNG of this data at ``path``: the picture ``Run.plot`` draws, without a run.

        Examples:
            >>> RunData(title="my run", steps=(1, 2), reward=(0.1, 0.2), loss=(0.0, 0.0)).plot("/tmp/run.pdf")
            Traceback (most recent call last):
            ...
            rl_lustre.errors.ConfigError: RunData.plot.path='/tmp/run.pdf': must end in .png

        Raises:
            ConfigError: ``path`` is not a ``.png`` in an existing directory (checked first).
        """
        out = save_check(path, "RunData.plot")
        return save(figure(self), out, "RunData.plot")


def _first(metrics: Mapping[str, float], keys: Sequence[str]) -> float | None:
    return next((float(metrics[k]) for k in keys if k in metrics), None)


def collect(run: Run, *, cluster_metrics: bool = True) -> RunData:
    """The data of ``run``'s plot, read now.

    Args:
        cluster_metrics: read Cloud Monitoring too (GKE runs only).
    """
    from .oncluster.records import MODEL, RECIPE, REHEARSAL_NOTE

    meta = run.info().metadata
    per_step = run.metrics()
    steps = tuple(sorted(per_step))
    try:
        checkpoints = {c.step: c for c in run.checkpoints()}
    except NotImplementedError:
        checkpoints = {}
    # Every save the log reports (keep_top_k may have deleted the older checkpoints since),
    # with size and MB/s where the checkpoint is still there to measure.
    logged = {s.step: s.timed_seconds for s in run.saves()}
    saves = tuple(
        SaveRecord(
            step,
            checkpoints[step].save_seconds if step in checkpoints else logged.get(step),
            checkpoints[step].mb_per_second if step in checkpoints else None,
            checkpoints[step].size_bytes / 1e6 if step in checkpoints else None,
        )
        for step in sorted(set(logged) | set(checkpoints))
    )
    named = [meta[k] for k in (MODEL, RECIPE) if meta.get(k)]
    ledger, no_ledger = _ledger(run)
    return RunData(
        title=" · ".join(named) if named else run.job_id,
        subtitle=run.job_id if named else "",
        synthetic=REHEARSAL_NOTE in run.notes(),
        steps=steps,
        reward=tuple(_first(per_step[s], REWARD_KEYS) for s in steps),
        loss=tuple(_first(per_step[s], ("loss",)) for s in steps),
        saves=saves,
        cluster=run.cluster_metrics() if cluster_metrics else None,
        ledger=ledger,
        no_ledger=no_ledger,
    )


def _ledger(run: Run) -> tuple[GoodputLedger | None, str]:
    from .errors import NotReadyError, RayError

    try:
        return run.goodput(), ""
    except (NotImplementedError, NotReadyError, RayError) as exc:
        return None, str(exc)


def _xy(xs: Sequence[Any], ys: Sequence[float | None]) -> tuple[list[Any], list[float]]:
    pairs = [(x, y) for x, y in zip(xs, ys, strict=True) if y is not None]
    return [x for x, _ in pairs], [y for _, y in pairs]


def figure(data: RunData) -> Figure:
    """``data`` drawn on a new matplotlib ``Figure`` (Agg canvas): 2 panels, 4 with cluster
    metrics, and the goodput ledger's bar across the bottom.

    Every line and bar carries a label (``"reward"``, ``"loss"``, ``"save seconds"``,
    ``"write MB/s"``, ``"Lustre read MB/s"``, ``"Lustre write MB/s"``, ``"GPU utilisation %"``,
    and each non-zero category of the ledger: ``"capacity"``, ``"startup"``, ``"training"``,
    ``"checkpoint"``, ``"validation"``, ``"lost"``, ``"hung"``, ``"idle"``, ``"unattributed"``, its width
    the category's node-hours).
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    rows = 2 if data.cluster is not None else 1
    fig = Figure(figsize=(WIDTH_IN, ROW_IN * rows + LEDGER_IN + 0.5), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    heading = [data.title]
    if data.subtitle or data.synthetic:
        heading.append(
            " · ".join(
                filter(
                    None,
                    (
                        data.subtitle,
                        "rehearsal: no model is trained, the metrics are synthetic" if data.synthetic else "",
                    ),
                )
            )
        )
    fig.suptitle("\n".join(heading))
    grid = fig.add_gridspec(rows + 1, 2, height_ratios=[ROW_IN] * rows + [LEDGER_IN])
    axes: list[list[Any]] = [[fig.add_subplot(grid[r, c]) for c in range(2)] for r in range(rows)]

    ax = axes[0][0]
    ax.set_title("Training, per step (synthetic)" if data.synthetic else "Training, per step")
    ax.set_xlabel("step")
    ax.set_ylabel("reward")
    xs, ys = _xy(data.steps, data.reward)
    lines = ax.plot(xs, ys, marker="o", color="tab:blue", label="reward")
    twin = ax.twinx()
    twin.set_ylabel("loss")
    xs, ys = _xy(data.steps, data.loss)
    lines += twin.plot(xs, ys, marker=".", color="tab:orange", label="loss")
    ax.legend(lines, [line.get_label() for line in lines], loc="best")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if not data.steps:
        ax.text(0.5, 0.5, "no completed step yet", transform=ax.transAxes, ha="center")

    ax = axes[0][1]
    ax.set_title("Checkpoint saves")
    unmeasured = [s.step for s in data.saves if s.mb_per_second is None and s.size_mb is None]
    ax.set_xlabel(
        "step"
        if not unmeasured
        else f"step\nno MB/s for step{'s' if len(unmeasured) > 1 else ''} {', '.join(map(str, unmeasured))}: "
        "keep_top_k deleted the checkpoint, so its size is unknown"
    )
    ax.set_ylabel("seconds")
    steps = [s.step for s in data.saves]
    ax.bar(steps, [s.seconds or 0.0 for s in data.saves], color="tab:green", alpha=0.6, label="save seconds")
    twin = ax.twinx()
    twin.set_ylabel("MB/s")
    xs, ys = _xy(steps, [s.mb_per_second for s in data.saves])
    twin.plot(xs, ys, marker="s", color="tab:red", label="write MB/s")
    handles = ax.get_legend_handles_labels()[0] + twin.get_legend_handles_labels()[0]
    ax.legend(handles, [h.get_label() for h in handles], loc="best")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if not data.saves:
        ax.text(0.5, 0.5, "no checkpoint yet", transform=ax.transAxes, ha="center")

    if data.cluster is not None:
        volume = data.cluster.volume
        ax = axes[1][0]
        ax.set_title("Lustre throughput")
        ax.set_ylabel("MB/s")
        for series, color in ((volume.read_mbps, "tab:blue"), (volume.write_mbps, "tab:red")):
            ax.plot(series.times, series.values, color=color, label=f"{series.name} MB/s")
        ax.legend(loc="best")
        ax = axes[1][1]
        ax.set_title("GPU utilisation")
        ax.set_ylabel("%")
        ax.set_ylim(0, 100)
        for pod, series in data.cluster.gpu_utilization_by_pod.items():
            ax.plot(series.times, series.values, color="0.75", linewidth=0.8, label=f"_{pod}")
        gpu = data.cluster.gpu_utilization
        ax.plot(gpu.times, gpu.values, color="tab:purple", linewidth=2, label="GPU utilisation %")
        ax.legend(loc="best")
        for ax in axes[1]:
            ax.tick_params(axis="x", labelrotation=30)
    _ledger_bar(fig.add_subplot(grid[rows, :]), data)
    return fig


def _ledger_bar(ax: Any, data: RunData) -> None:
    """The ledger as one horizontal bar of node-hours, stacked in the ledger's category order."""
    ledger = data.ledger
    ax.set_yticks([])
    ax.set_xlabel("GPU-node-hours")
    if ledger is None:
        ax.set_title("GPU-node-hours by cause")
        ax.set_xticks([])
        ax.text(
            0.5,
            0.5,
            "no goodput ledger for this run" + (f": {data.no_ledger}" if data.no_ledger else ""),
            transform=ax.transAxes,
            ha="center",
            va="center",
            wrap=True,
        )
        return
    total = ledger.total_seconds / 3600
    money = f", ${ledger.total_usd:,.2f}" if ledger.total_usd > 0 else ""
    ax.set_title(
        f"GPU-node-hours by cause (total {total:.3g} h{money}{', so far' if not ledger.complete else ''}; "
        f"attributed {ledger.attributed_fraction:.0%})"
    )
    left = 0.0
    for category, color in CATEGORY_COLORS.items():
        width = ledger.seconds[category] / 3600
        if width <= 0:
            continue
        ax.barh([0], [width], left=left, color=color, label=category)
        share = width / total if total else 0.0
        if share > 0.04:
            text = f"{share:.0%}" + (f"\n${ledger.usd[category]:,.2f}" if ledger.usd[category] > 0 else "")
            ax.text(left + width / 2, 0, text, ha="center", va="center", fontsize=8)
        left += width
    ax.set_xlim(0, max(left, 1e-9))
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.45), ncol=len(CATEGORY_COLORS), frameon=False)


def save_check(path: str | os.PathLike[str], owner: str = "Run.plot") -> Path:
    """``path`` as a ``Path``, checked before anything is read or drawn.

    Examples:
        >>> save_check("/tmp/run.pdf")
        Traceback (most recent call last):
        ...
        rl_lustre.errors.ConfigError: Run.plot.path='/tmp/run.pdf': must end in .png

    Raises:
        ConfigError: ``path`` does not end in ``.png`` or its directory does not exist.
    """
    out = Path(path)
    if out.suffix.lower() != ".png":
        raise ConfigError(owner, "path", str(path), "must end in .png")
    if not out.parent.is_dir():
        raise ConfigError(owner, "path", str(path), f"its directory {str(out.parent)!r} does not exist")
    return out


def save(fig: Figure, path: str | os.PathLike[str], owner: str = "Run.plot") -> Path:
    """Write ``fig`` as a PNG at ``path`` (checked by :func:`save_check`)."""
    out = save_check(path, owner)
    fig.savefig(out, format="png", dpi=DPI)
    return out
