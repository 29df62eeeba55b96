"""What a run cost and how its time went: the part of :class:`rl_lustre.Run` that accounts.

The run's price so far, its goodput ledger, the cluster's Cloud Monitoring metrics over
its window and its picture; :class:`~rl_lustre.Run` inherits them. Each reads through a
function the backend supplies (none on a backend that cannot tell).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    from .goodput import GoodputLedger
    from .metrics import ClusterMetrics
    from .prices import Prices
    from .ray.jobs import JobInfo
    from .run import Run

__all__ = ["RunAccounts"]


class RunAccounts:
    """The accounting methods of :class:`~rl_lustre.Run` (see there)."""

    _usd_per_hour: Callable[[], float] | None
    _cluster_metrics: Callable[..., ClusterMetrics] | None
    _goodput: Callable[..., GoodputLedger] | None

    @property
    def job_id(self) -> str:
        raise NotImplementedError

    def info(self) -> JobInfo:
        raise NotImplementedError

    def cost_so_far(self) -> float | None:
        """USD the deployment has cost while this run ran: its hourly cost (``plan.cost()``)
        times the hours from the run's start to its end, or to now while it runs.

        Examples:
            >>> round(run.cost_so_far(), 2)  # doctest: +SKIP
            152.77

        Returns:
            0.0 before the run starts; None when the backend knows no hourly cost.
        """
        if self._usd_per_hour is None:
            return None
        info = self.info()
        if info.start_time is None:
            return 0.0
        end = info.end_time if info.end_time is not None else time.time()
        return max(0.0, end - info.start_time) / 3600 * self._usd_per_hour()

    def goodput(self, *, prices: Prices | None = None) -> GoodputLedger:
        """Where this run's GPU-node-seconds went, so far or in full, in seconds and USD.

        Every billed second of the nodes the run held (and of the nodes it waited for) is
        in exactly one of ``capacity``, ``startup``, ``training``, ``checkpoint``,
        ``validation``, ``lost``, ``idle`` or ``unattributed``, each from a recorded event:
        the supervisor's journal in the job's log, NeMo-RL's own timers, Ray's node table
        and, on GKE, the Kubernetes Nodes, Pods and Events. USD is each node's seconds at
        the price of its capacity kind; a local cluster costs nothing (see
        :meth:`GoodputLedger.priced <rl_lustre.goodput.GoodputLedger.priced>`).

        Examples:
            >>> ledger = run.goodput()  # doctest: +SKIP
            >>> round(ledger.seconds["training"]), f"{ledger.attributed_fraction:.0%}"  # doctest: +SKIP
            (412, '99%')
            >>> print(ledger)  # doctest: +SKIP

        Args:
            prices: your prices (discounts, your own rates); by default the dated list prices.

        Raises:
            NotImplementedError: this backend cannot account for its nodes.
            NotReadyError: the cluster (and with it the evidence) is gone.
            RayError: the cluster no longer knows the job.
        """
        if self._goodput is None:
            raise NotImplementedError(f"this backend cannot account for the GPU-node-seconds of {self.job_id}")
        return self._goodput(prices=prices)

    def cluster_metrics(self, *, step: int = 60) -> ClusterMetrics | None:
        """GPU utilisation and Lustre throughput while this run ran, from Cloud Monitoring.

        The window is the run's: from its start to its end, or to now while it runs.

        Example::

            m = run.cluster_metrics()
            m.gpu_utilization.mean(), m.volume.write_mbps.max()

        Returns:
            None on a backend without Cloud Monitoring (local), or before the run starts.
        """
        if self._cluster_metrics is None:
            return None
        info = self.info()
        if info.start_time is None:
            return None
        end = info.end_time if info.end_time is not None else time.time()
        # The API aligns to whole steps: the window covers at least one.
        start = min(info.start_time, end - step)
        return self._cluster_metrics(start=start, end=end, step=step)

    def plot(self, path: str | os.PathLike[str], *, cluster_metrics: bool = True) -> Path:
        """Write a PNG of the run: reward and loss per step, checkpoint write time and MB/s
        per save, and on GKE Lustre throughput and GPU utilisation over the run's window.

        Examples:
            >>> run.plot("run.png")  # doctest: +SKIP
            PosixPath('run.png')

        Args:
            path: where to write it (``.png``; its directory must exist).
            cluster_metrics: on GKE, read Cloud Monitoring for the lower two panels.

        Raises:
            ConfigError: ``path`` is not a ``.png`` in an existing directory (checked first).
        """
        from . import plot

        target = Path(path)
        plot.save_check(target)
        return plot.save(plot.figure(plot.collect(cast("Run", self), cluster_metrics=cluster_metrics)), target)
