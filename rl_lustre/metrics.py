"""What Cloud Monitoring says about a deployment: Lustre throughput and GPU utilisation.

The metric types are Google's own (see the pages below); each query lets the server
align the series to ``step`` seconds and reduce them, so the data that comes back is
small whatever the window:

=========================  ==============================================  ======================
series                     metric type, filter                             aggregation
=========================  ==============================================  ======================
Lustre read / write MB/s   ``lustre.googleapis.com/instance/read_bytes_total``  ALIGN_RATE, REDUCE_SUM
                           / ``.../write_bytes_total`` (DELTA, bytes, one  (bytes/s over every
                           series per storage target) on the monitored     storage target)
                           resource ``lustre.googleapis.com/Instance`` with
                           the instance's ``instance_id`` and ``location``
GPU utilisation %          ``kubernetes.io/container/accelerator/duty_cycle``  ALIGN_MEAN, REDUCE_MEAN
                           (GAUGE, 1-100) on ``k8s_container`` with the    grouped by pod (one
                           GKE cluster's ``cluster_name``, ``location``    Ray worker per node)
                           and the RayCluster's namespace
=========================  ==============================================  ======================

Sources: Google Cloud's metrics list, https://cloud.google.com/monitoring/api/metrics_gcp
(the ``lustre`` table: ``instance/read_bytes_total`` and ``instance/write_bytes_total``,
"Data read bytes" / "Data write bytes", BETA, sampled every 60 s, visible after up to
120 s; labels ``component``, ``operation``, ``target``), the monitored-resource list,
https://cloud.google.com/monitoring/api/resources (``lustre.googleapis.com/Instance``:
``resource_container``, ``location``, ``instance_id``), and
https://cloud.google.com/monitoring/api/metrics_kubernetes (GKE system metrics). The
types are module constants, read at each call.

Use :meth:`LustreVolume.metrics <rl_lustre.LustreVolume.metrics>`,
:meth:`Cluster.metrics <rl_lustre.Cluster.metrics>` or, for the window a run ran in,
:meth:`Run.cluster_metrics <rl_lustre.run.Run.cluster_metrics>`.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import attrs

from ._public import public
from .errors import ConfigError

if TYPE_CHECKING:
    from .gcp.monitoring import Monitoring, TimeSeries
    from .spec import ClusterSpec, VolumeSpec

__all__ = ["GPU_DUTY_CYCLE", "LUSTRE_READ_BYTES", "LUSTRE_WRITE_BYTES", "ClusterMetrics", "Series", "VolumeMetrics"]

LUSTRE_READ_BYTES = "lustre.googleapis.com/instance/read_bytes_total"
LUSTRE_WRITE_BYTES = "lustre.googleapis.com/instance/write_bytes_total"
LUSTRE_RESOURCE = "lustre.googleapis.com/Instance"
GPU_DUTY_CYCLE = "kubernetes.io/container/accelerator/duty_cycle"
GPU_RESOURCE = "k8s_container"
DEFAULT_WINDOW = 3600.0

When = datetime.datetime | float | int


@public("rl_lustre")
@attrs.frozen
class Series:
    """A named series of ``(time, value)`` points, oldest first.

    Examples:
        >>> import datetime as dt
        >>> t = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
        >>> s = Series("read", "MB/s", ((t, 100.0), (t + dt.timedelta(minutes=1), 300.0)))
        >>> s.mean(), s.max(), len(s)
        (200.0, 300.0, 2)
    """

    name: str
    unit: str
    points: tuple[tuple[datetime.datetime, float], ...] = ()

    def __len__(self) -> int:
        return len(self.points)

    @property
    def times(self) -> list[datetime.datetime]:
        return [t for t, _ in self.points]

    @property
    def values(self) -> list[float]:
        return [v for _, v in self.points]

    def mean(self) -> float | None:
        """The mean value, or None without points."""
        return sum(self.values) / len(self.points) if self.points else None

    def max(self) -> float | None:
        """The largest value, or None without points."""
        return max(self.values) if self.points else None

    def to_dict(self) -> dict[str, Any]:
        """As JSON data (times in ISO 8601)."""
        return {"name": self.name, "unit": self.unit, "points": [[t.isoformat(), v] for t, v in self.points]}


@public("rl_lustre")
@attrs.frozen
class VolumeMetrics:
    """A Lustre instance's read and write throughput over a window.

    Attributes:
        read_mbps: MB/s read from the instance (all its storage targets together).
        write_mbps: MB/s written to it.
        start: the window's start.
        end: the window's end.
        step: seconds per point.
    """

    read_mbps: Series
    write_mbps: Series
    start: datetime.datetime
    end: datetime.datetime
    step: int

    def to_dict(self) -> dict[str, Any]:
        """As JSON data."""
        return {
            "start": self.start.isoformat(),
            "end": self.end.isoformat(),
            "step": self.step,
            "read_mbps": self.read_mbps.to_dict(),
            "write_mbps": self.write_mbps.to_dict(),
        }


@public("rl_lustre")
@attrs.frozen
class ClusterMetrics:
    """A GKE deployment's GPU utilisation and its volume's throughput over a window.

    Attributes:
        gpu_utilization: the mean duty cycle (%) of the GPUs of the RayCluster's pods.
        gpu_utilization_by_pod: the same, pod by pod (one Ray worker per GPU node).
        volume: the Lustre instance's throughput.
    """

    gpu_utilization: Series
    gpu_utilization_by_pod: dict[str, Series]
    volume: VolumeMetrics

    def to_dict(self) -> dict[str, Any]:
        """As JSON data."""
        return {
            "gpu_utilization": self.gpu_utilization.to_dict(),
            "gpu_utilization_by_pod": {k: s.to_dict() for k, s in self.gpu_utilization_by_pod.items()},
            "volume": self.volume.to_dict(),
        }


def _utc(value: When | None, field: str) -> datetime.datetime | None:
    if value is None:
        return None
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            raise ConfigError("metrics", field, value, "must be timezone-aware (e.g. datetime.now(timezone.utc))")
        return value.astimezone(datetime.timezone.utc)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            return datetime.datetime.fromtimestamp(float(value), datetime.timezone.utc)
        except (ValueError, OverflowError, OSError) as exc:
            raise ConfigError("metrics", field, value, f"must be a real point in time ({exc})") from exc
    raise ConfigError("metrics", field, value, "must be a datetime or seconds since the epoch")


def window(start: When | None, end: When | None) -> tuple[datetime.datetime, datetime.datetime]:
    """``(start, end)`` in UTC: by default the last hour up to now.

    Examples:
        >>> s, e = window(0, 3600)
        >>> (e - s).total_seconds()
        3600.0
    """
    end_utc = _utc(end, "end") or datetime.datetime.now(datetime.timezone.utc)
    start_utc = _utc(start, "start") or end_utc - datetime.timedelta(seconds=DEFAULT_WINDOW)
    return start_utc, end_utc


def _quoted(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _filter(metric_type: str, resource_type: str, **resource_labels: str) -> str:
    terms = [f"metric.type = {_quoted(metric_type)}", f"resource.type = {_quoted(resource_type)}"]
    terms += [f"resource.labels.{k} = {_quoted(v)}" for k, v in resource_labels.items()]
    return " AND ".join(terms)


def _one(found: Sequence[TimeSeries], name: str, unit: str, scale: float = 1.0) -> Series:
    points: dict[datetime.datetime, float] = {}
    for series in found:
        for t, v in series.points:
            points[t] = points.get(t, 0.0) + v * scale
    return Series(name, unit, tuple(sorted(points.items())))


def _monitoring(monitoring: Any) -> Monitoring:
    from ._validate import need
    from .gcp.monitoring import Monitoring

    need("metrics", "monitoring", monitoring, Monitoring, "a rl_lustre.gcp.Monitoring", optional=True)
    return monitoring or Monitoring()


def volume_metrics(
    volume: VolumeSpec,
    *,
    start: When | None = None,
    end: When | None = None,
    step: int = 60,
    monitoring: Monitoring | None = None,
) -> VolumeMetrics:
    """Read and write MB/s of ``volume``'s instance over ``[start, end]``.

    Raises:
        ConfigError: the volume's project or zone is not set, or a bad window or step.
    """

    for field in ("project", "zone"):
        if getattr(volume, field) is None:
            raise ConfigError("LustreVolume", field, None, "must be set to read the volume's metrics")
    assert volume.project is not None
    assert volume.zone is not None
    t0, t1 = window(start, end)
    api = _monitoring(monitoring)
    out = {}
    for key, metric in (("read", LUSTRE_READ_BYTES), ("write", LUSTRE_WRITE_BYTES)):
        found = api.time_series(
            volume.project,
            _filter(metric, LUSTRE_RESOURCE, instance_id=volume.name, location=volume.zone),
            start=t0,
            end=t1,
            step=step,
            aligner="ALIGN_RATE",
            reducer="REDUCE_SUM",
        )
        out[key] = _one(found, f"Lustre {key}", "MB/s", scale=1e-6)
    return VolumeMetrics(out["read"], out["write"], t0, t1, step)


def cluster_metrics(
    cluster: ClusterSpec,
    *,
    start: When | None = None,
    end: When | None = None,
    step: int = 60,
    monitoring: Monitoring | None = None,
) -> ClusterMetrics:
    """GPU utilisation of ``cluster``'s pods and its volume's throughput over ``[start, end]``.

    Raises:
        ConfigError: a local cluster (Cloud Monitoring knows only GKE deployments), or a
            bad window or step.
    """

    if cluster.backend != "gke":
        raise ConfigError(
            "Cluster", "backend", cluster.backend, "Cloud Monitoring metrics exist only for GKE deployments"
        )
    assert cluster.project is not None
    assert cluster.region is not None
    assert cluster.volume is not None
    t0, t1 = window(start, end)
    api = _monitoring(monitoring)
    pod = "resource.labels.pod_name"
    found = api.time_series(
        cluster.project,
        _filter(
            GPU_DUTY_CYCLE,
            GPU_RESOURCE,
            cluster_name=cluster.name,
            location=cluster.region,
            namespace_name=cluster.namespace,
        ),
        start=t0,
        end=t1,
        step=step,
        aligner="ALIGN_MEAN",
        reducer="REDUCE_MEAN",
        group_by=[pod],
    )
    by_pod = {s.labels.get(pod, "?"): Series(f"GPU utilisation {s.labels.get(pod, '?')}", "%", s.points) for s in found}
    sums: dict[datetime.datetime, list[float]] = {}
    for series in by_pod.values():
        for t, v in series.points:
            sums.setdefault(t, []).append(v)
    mean = Series("GPU utilisation", "%", tuple(sorted((t, sum(vs) / len(vs)) for t, vs in sums.items())))
    volume = volume_metrics(cluster.volume, start=t0, end=t1, step=step, monitoring=api)
    return ClusterMetrics(mean, dict(sorted(by_pod.items())), volume)
