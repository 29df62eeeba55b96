"""Cloud Monitoring time series (``google.cloud.monitoring_v3.MetricService``), read only.

One call, ``ListTimeSeries``, with a filter, a time window and an aggregation: the
server aligns each series to ``step`` seconds and reduces across series, so what comes
back is already a rate or a mean per step.

Example::

    series = Monitoring().time_series(
        "my-project", 'metric.type = "kubernetes.io/container/accelerator/duty_cycle"',
        start=t0, end=t1, step=60, aligner="ALIGN_MEAN", reducer="REDUCE_MEAN")
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Sequence
from typing import Any

import attrs

from ..errors import ConfigError
from . import _clients
from ._errors import MONITORING, Call, RetryPolicy, call

log = logging.getLogger("rl_lustre.gcp.monitoring")

# The API aligns to whole periods of at least a minute.
MIN_STEP = 60


@attrs.frozen
class TimeSeries:
    """One series as returned: its labels and its points, oldest first.

    Attributes:
        metric_type: the metric (``"kubernetes.io/container/accelerator/duty_cycle"``).
        labels: the resource and metric labels the series was grouped by.
        points: ``(end of the step, value)`` pairs, oldest first.
    """

    metric_type: str
    labels: dict[str, str]
    points: tuple[tuple[datetime.datetime, float], ...]


def _value(typed: Any) -> float:
    kind = type(typed).pb(typed).WhichOneof("value")
    return float(getattr(typed, kind)) if kind in ("double_value", "int64_value") else 0.0


class Monitoring:
    """``ListTimeSeries`` through ``MetricServiceClient``.

    Args:
        client: a ``monitoring_v3.MetricServiceClient``; by default the cached one for
            this environment (the emulator's when ``RL_LUSTRE_GCP_EMULATOR_HOST`` is set).
        retry: retries of transient failures.
    """

    def __init__(self, client: Any = None, *, retry: RetryPolicy | None = None) -> None:
        self._client = client
        self._retry = retry

    @property
    def client(self) -> Any:
        return self._client if self._client is not None else _clients.monitoring()

    def time_series(
        self,
        project: str,
        filter: str,
        *,
        start: datetime.datetime,
        end: datetime.datetime,
        step: int,
        aligner: str,
        reducer: str = "REDUCE_NONE",
        group_by: Sequence[str] = (),
    ) -> list[TimeSeries]:
        """The series matching ``filter`` in ``[start, end]``, aligned to ``step`` seconds.

        Example::

            Monitoring().time_series("my-project", 'metric.type = "..."', start=t0, end=t1, step=60,
                                     aligner="ALIGN_RATE", reducer="REDUCE_SUM")

        Raises:
            ConfigError: an empty or reversed window, or ``step`` under a minute.
            GCPError: the API refused the request.
        """
        from google.cloud import monitoring_v3

        if end <= start:
            raise ConfigError(
                "metrics", "window", f"{start.isoformat()} .. {end.isoformat()}", "must end after it starts"
            )
        if not isinstance(step, int) or isinstance(step, bool) or step < MIN_STEP:
            raise ConfigError("metrics", "step", step, f"must be a whole number of seconds, at least {MIN_STEP}")
        request = monitoring_v3.ListTimeSeriesRequest(
            name=f"projects/{project}",
            filter=filter,
            interval=monitoring_v3.TimeInterval(start_time=start, end_time=end),
            aggregation=monitoring_v3.Aggregation(
                alignment_period={"seconds": step},
                per_series_aligner=monitoring_v3.Aggregation.Aligner.__members__[aligner],
                cross_series_reducer=monitoring_v3.Aggregation.Reducer.__members__[reducer],
                group_by_fields=list(group_by),
            ),
            view=monitoring_v3.ListTimeSeriesRequest.TimeSeriesView.FULL,
        )
        log.debug("ListTimeSeries %s [%s, %s] step %ss", filter, start.isoformat(), end.isoformat(), step)

        def fetch() -> list[Any]:
            return list(self.client.list_time_series(request=request, retry=None))

        found = call(Call(MONITORING, "read time series of", f"project {project}"), fetch, policy=self._retry)
        out = []
        for series in found:
            labels = {
                **{f"resource.labels.{k}": v for k, v in series.resource.labels.items()},
                **{f"metric.labels.{k}": v for k, v in series.metric.labels.items()},
            }
            points = sorted((p.interval.end_time, _value(p.value)) for p in series.points)
            out.append(TimeSeries(series.metric.type, labels, tuple(points)))
        return out
