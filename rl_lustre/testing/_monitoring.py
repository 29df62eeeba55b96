"""The fake ``google.monitoring.v3.MetricService``: ``ListTimeSeries`` over stored points,
with the real API's filter, interval and aggregation rules (the subset rl_lustre uses).

Tests store raw points with :meth:`FakeGCP.add_time_series`; a request is filtered,
each series is aligned to ``alignment_period`` windows ending at the interval's end
(ALIGN_RATE: sum / period, for DELTA and CUMULATIVE metrics only; ALIGN_MEAN; ALIGN_SUM),
reduced across series per ``group_by_fields`` (REDUCE_SUM, REDUCE_MEAN, REDUCE_NONE),
and returned with the points newest first, as the API returns them.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import grpc
from google.cloud import monitoring_v3

from ._core import Core, FakeError
from ._filters import monitoring_filter
from ._grpc import GrpcServer

Aligner = monitoring_v3.Aggregation.Aligner
Reducer = monitoring_v3.Aggregation.Reducer

_MIN_PERIOD = 60


@attrs.define
class StoredSeries:
    metric_type: str
    kind: str
    resource_type: str
    resource_labels: dict[str, str]
    metric_labels: dict[str, str]
    points: list[tuple[datetime.datetime, float]]


def _utc(ts: Any) -> datetime.datetime:
    if ts.tzinfo is None:
        return ts.replace(tzinfo=datetime.timezone.utc)
    return ts.astimezone(datetime.timezone.utc)


class MonitoringFake:
    """``ListTimeSeries`` over series stored by the test."""

    def __init__(self, core: Core) -> None:
        self.core = core
        self.series: list[StoredSeries] = []
        self.requests: list[monitoring_v3.ListTimeSeriesRequest] = []

    def register(self, server: GrpcServer) -> None:
        server.add(
            "google.monitoring.v3.MetricService",
            "ListTimeSeries",
            "monitoring.ListTimeSeries",
            self.list_time_series,
            monitoring_v3.ListTimeSeriesRequest,
            monitoring_v3.ListTimeSeriesResponse,
        )

    def add(
        self,
        metric_type: str,
        points: Sequence[tuple[datetime.datetime, float]],
        *,
        kind: str,
        resource_type: str,
        resource_labels: Mapping[str, str],
        metric_labels: Mapping[str, str],
    ) -> None:
        if kind not in ("GAUGE", "DELTA", "CUMULATIVE"):
            raise ValueError(f"kind must be GAUGE, DELTA or CUMULATIVE, not {kind!r}")
        with self.core.lock:
            self.series.append(
                StoredSeries(
                    metric_type,
                    kind,
                    resource_type,
                    dict(resource_labels),
                    dict(metric_labels),
                    sorted((_utc(t), float(v)) for t, v in points),
                )
            )

    def list_time_series(self, request: monitoring_v3.ListTimeSeriesRequest) -> monitoring_v3.ListTimeSeriesResponse:
        self.requests.append(monitoring_v3.ListTimeSeriesRequest(request))
        if not request.name.startswith("projects/"):
            raise FakeError(grpc.StatusCode.INVALID_ARGUMENT, f"name {request.name!r} is not projects/PROJECT")
        project = request.name.removeprefix("projects/")
        matches = monitoring_filter(request.filter)
        if "end_time" not in request.interval:
            raise FakeError(grpc.StatusCode.INVALID_ARGUMENT, "interval.end_time is required")
        end = _utc(request.interval.end_time)
        start = _utc(request.interval.start_time) if "start_time" in request.interval else end
        if start > end:
            raise FakeError(grpc.StatusCode.INVALID_ARGUMENT, "interval.start_time is after interval.end_time")
        agg = request.aggregation
        aligner, reducer = Aligner(agg.per_series_aligner), Reducer(agg.cross_series_reducer)
        period = agg.alignment_period.total_seconds() if "alignment_period" in agg else 0
        if aligner != Aligner.ALIGN_NONE and period < _MIN_PERIOD:
            raise FakeError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"aggregation.alignment_period must be at least {_MIN_PERIOD}s, not {period}s",
            )
        if reducer != Reducer.REDUCE_NONE and aligner == Aligner.ALIGN_NONE:
            raise FakeError(grpc.StatusCode.INVALID_ARGUMENT, "a cross_series_reducer needs a per_series_aligner")

        picked = [
            s
            for s in self.series
            if _project_of(s, project) == project
            and matches(s.metric_type, s.resource_type, s.resource_labels, s.metric_labels)
        ]
        aligned = [(s, self._align(s, aligner, start, end, period)) for s in picked]
        out: list[monitoring_v3.TimeSeries] = []
        if reducer == Reducer.REDUCE_NONE:
            for s, points in aligned:
                out.append(
                    self._series(
                        s.metric_type, s.resource_type, s.resource_labels, s.metric_labels, points, period, aligner
                    )
                )
        else:
            groups: dict[tuple[str, ...], list[tuple[StoredSeries, dict[datetime.datetime, float]]]] = {}
            for s, points in aligned:
                key = tuple(self._label(s, f) for f in agg.group_by_fields)
                groups.setdefault(key, []).append((s, points))
            for key, members in sorted(groups.items()):
                times = sorted({t for _, pts in members for t in pts})
                reduced = {}
                for t in times:
                    values = [pts[t] for _, pts in members if t in pts]
                    reduced[t] = sum(values) if reducer == Reducer.REDUCE_SUM else sum(values) / len(values)
                resource = {
                    f.removeprefix("resource.labels."): v
                    for f, v in zip(agg.group_by_fields, key, strict=True)
                    if f.startswith("resource.labels.")
                }
                metric = {
                    f.removeprefix("metric.labels."): v
                    for f, v in zip(agg.group_by_fields, key, strict=True)
                    if f.startswith("metric.labels.")
                }
                first = members[0][0]
                out.append(
                    self._series(first.metric_type, first.resource_type, resource, metric, reduced, period, aligner)
                )
        return monitoring_v3.ListTimeSeriesResponse(time_series=out)

    @staticmethod
    def _label(s: StoredSeries, field: str) -> str:
        if field.startswith("resource.labels."):
            return s.resource_labels.get(field.removeprefix("resource.labels."), "")
        if field.startswith("metric.labels."):
            return s.metric_labels.get(field.removeprefix("metric.labels."), "")
        raise FakeError(grpc.StatusCode.INVALID_ARGUMENT, f"cannot group by {field!r}")

    @staticmethod
    def _align(
        s: StoredSeries, aligner: Aligner, start: datetime.datetime, end: datetime.datetime, period: float
    ) -> dict[datetime.datetime, float]:
        if aligner == Aligner.ALIGN_NONE:
            return {t: v for t, v in s.points if start <= t <= end}
        if aligner == Aligner.ALIGN_RATE and s.kind == "GAUGE":
            raise FakeError(
                grpc.StatusCode.INVALID_ARGUMENT, f"ALIGN_RATE is not valid for the GAUGE metric {s.metric_type}"
            )
        out = {}
        step = datetime.timedelta(seconds=period)
        window_end = end
        while window_end - step >= start - datetime.timedelta(microseconds=1):
            values = [v for t, v in s.points if window_end - step < t <= window_end]
            if values:
                if aligner == Aligner.ALIGN_RATE:
                    out[window_end] = sum(values) / period
                elif aligner == Aligner.ALIGN_MEAN:
                    out[window_end] = sum(values) / len(values)
                elif aligner == Aligner.ALIGN_SUM:
                    out[window_end] = sum(values)
                else:
                    raise FakeError(grpc.StatusCode.UNIMPLEMENTED, f"the fake does not implement {aligner.name}")
            window_end -= step
        return out

    @staticmethod
    def _series(
        metric_type: str,
        resource_type: str,
        resource: Mapping[str, str],
        metric: Mapping[str, str],
        points: Mapping[datetime.datetime, float],
        period: float,
        aligner: Aligner,
    ) -> monitoring_v3.TimeSeries:
        step = datetime.timedelta(seconds=period)
        kind = "GAUGE" if aligner in (Aligner.ALIGN_RATE, Aligner.ALIGN_MEAN) else "DELTA"
        return monitoring_v3.TimeSeries(
            metric={"type": metric_type, "labels": dict(metric)},
            resource={"type": resource_type, "labels": dict(resource)},
            metric_kind=kind,
            value_type="DOUBLE",
            points=[
                {"interval": {"start_time": t - step if period else t, "end_time": t}, "value": {"double_value": v}}
                for t, v in sorted(points.items(), reverse=True)
            ],
        )


def _project_of(series: StoredSeries, default: str) -> str:
    """The series' project: GKE's resources name it ``project_id``, Lustre's ``resource_container``."""
    labels = series.resource_labels
    return labels.get("project_id", labels.get("resource_container", default))
