"""Cloud Monitoring metrics through the real MetricServiceClient against the fake:
what is asked (metric type, filter, window, aggregation) and what comes back."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

import pytest
from google.cloud import monitoring_v3
from helpers.specs import GKE

from rl_lustre import Cluster
from rl_lustre.errors import ConfigError
from rl_lustre.metrics import GPU_DUTY_CYCLE, LUSTRE_READ_BYTES, LUSTRE_WRITE_BYTES
from rl_lustre.ray.jobs import JobInfo
from rl_lustre.run import Run
from rl_lustre.testing import FakeGCP

T0 = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.timezone.utc)
CLUSTER = Cluster(**GKE, num_nodes=2)


@pytest.fixture(scope="module")
def gcp() -> Iterator[FakeGCP]:
    with FakeGCP() as fake:
        lustre = {"resource_type": "lustre.googleapis.com/Instance", "kind": "DELTA"}
        every_10s = [T0 + dt.timedelta(seconds=10 * i) for i in range(1, 19)]  # 3 minutes
        for ost in ("OST0000", "OST0001"):
            # 50 MB written every 10 s by each storage target: 5 MB/s each, 10 MB/s together.
            fake.add_time_series(
                LUSTRE_WRITE_BYTES,
                [(t, 50e6) for t in every_10s],
                metric_labels={"component": "ost", "target": ost, "operation": "write"},
                resource_labels={
                    "resource_container": "my-project",
                    "location": "us-east1-b",
                    "instance_id": "demo-lustre",
                },
                **lustre,
            )
        fake.add_time_series(
            LUSTRE_READ_BYTES,
            [(t, 12e6) for t in every_10s],
            resource_labels={
                "resource_container": "my-project",
                "location": "us-east1-b",
                "instance_id": "demo-lustre",
            },
            **lustre,
        )
        # The same metric and labels on another kind of monitored resource must not count.
        fake.add_time_series(
            LUSTRE_READ_BYTES,
            [(t, 777e6) for t in every_10s],
            resource_type="global",
            kind="DELTA",
            resource_labels={"location": "us-east1-b", "instance_id": "demo-lustre"},
        )
        # Another instance's traffic must not count.
        fake.add_time_series(
            LUSTRE_WRITE_BYTES,
            [(t, 999e6) for t in every_10s],
            resource_labels={
                "resource_container": "my-project",
                "location": "us-east1-b",
                "instance_id": "other-lustre",
            },
            **lustre,
        )
        gpu = {"resource_type": "k8s_container"}
        for pod, busy in (("demo-worker-0", 90.0), ("demo-worker-1", 70.0), ("demo-head-0", 0.0)):
            fake.add_time_series(
                GPU_DUTY_CYCLE,
                [(t, busy) for t in every_10s],
                **gpu,
                resource_labels={
                    "project_id": "my-project",
                    "location": "us-east1",
                    "cluster_name": "demo",
                    "namespace_name": "default",
                    "pod_name": pod,
                    "container_name": "ray-worker",
                },
            )
        fake.add_time_series(
            GPU_DUTY_CYCLE,
            [(t, 5.0) for t in every_10s],
            **gpu,
            resource_labels={
                "project_id": "my-project",
                "location": "us-east1",
                "cluster_name": "someone-elses",
                "namespace_name": "default",
                "pod_name": "x",
            },
        )
        yield fake


def test_volume_throughput_is_a_server_side_rate_summed_over_storage_targets(gcp: FakeGCP) -> None:
    before = len(gcp.time_series_requests)
    m = CLUSTER.volume.metrics(T0, T0 + dt.timedelta(minutes=3), step=60)
    assert m.write_mbps.values == pytest.approx([10.0, 10.0, 10.0])
    assert m.read_mbps.values == pytest.approx([1.2, 1.2, 1.2])
    assert m.write_mbps.times == [T0 + dt.timedelta(minutes=k) for k in (1, 2, 3)]
    assert (m.write_mbps.unit, m.write_mbps.name) == ("MB/s", "Lustre write")

    read, write = gcp.time_series_requests[before:]
    assert read.name == "projects/my-project"
    assert read.filter == (
        f'metric.type = "{LUSTRE_READ_BYTES}" AND resource.type = "lustre.googleapis.com/Instance" '
        'AND resource.labels.instance_id = "demo-lustre" AND resource.labels.location = "us-east1-b"'
    )
    assert write.filter.startswith(f'metric.type = "{LUSTRE_WRITE_BYTES}" AND ')
    assert (write.interval.start_time, write.interval.end_time) == (T0, T0 + dt.timedelta(minutes=3))
    agg = write.aggregation
    assert agg.alignment_period == dt.timedelta(seconds=60)
    assert agg.per_series_aligner == monitoring_v3.Aggregation.Aligner.ALIGN_RATE
    assert agg.cross_series_reducer == monitoring_v3.Aggregation.Reducer.REDUCE_SUM
    assert write.view == monitoring_v3.ListTimeSeriesRequest.TimeSeriesView.FULL


def test_gpu_utilisation_is_the_mean_per_pod_of_the_deployments_containers(gcp: FakeGCP) -> None:
    before = len(gcp.time_series_requests)
    m = CLUSTER.metrics(T0.timestamp(), (T0 + dt.timedelta(minutes=2)).timestamp(), step=120)
    assert sorted(m.gpu_utilization_by_pod) == ["demo-head-0", "demo-worker-0", "demo-worker-1"]
    assert m.gpu_utilization_by_pod["demo-worker-0"].values == [90.0]
    assert m.gpu_utilization.values == pytest.approx([(90 + 70 + 0) / 3])
    assert m.volume.write_mbps.values == pytest.approx([10.0])

    gpu = gcp.time_series_requests[before]
    assert gpu.filter == (
        f'metric.type = "{GPU_DUTY_CYCLE}" AND resource.type = "k8s_container" AND '
        'resource.labels.cluster_name = "demo" AND '
        'resource.labels.location = "us-east1" AND resource.labels.namespace_name = "default"'
    )
    assert gpu.aggregation.per_series_aligner == monitoring_v3.Aggregation.Aligner.ALIGN_MEAN
    assert gpu.aggregation.cross_series_reducer == monitoring_v3.Aggregation.Reducer.REDUCE_MEAN
    assert list(gpu.aggregation.group_by_fields) == ["resource.labels.pod_name"]
    assert gpu.aggregation.alignment_period == dt.timedelta(seconds=120)


def test_a_run_reads_the_metrics_of_its_own_window(gcp: FakeGCP) -> None:
    class Jobs:
        def info(self, job_id: str) -> JobInfo:
            return JobInfo(job_id, "SUCCEEDED", start_time=T0.timestamp(), end_time=T0.timestamp() + 180)

    run = Run(Jobs(), "j", cluster_metrics=CLUSTER.metrics)  # type: ignore[arg-type]
    before = len(gcp.time_series_requests)
    m = run.cluster_metrics()
    assert m is not None
    assert len(m.gpu_utilization) == 3
    sent = gcp.time_series_requests[before]
    assert (sent.interval.start_time, sent.interval.end_time) == (T0, T0 + dt.timedelta(minutes=3))
    assert Run(Jobs(), "j").cluster_metrics() is None  # type: ignore[arg-type]


def test_bad_windows_and_backends_are_refused_before_any_request(gcp: FakeGCP) -> None:
    before = len(gcp.time_series_requests)
    with pytest.raises(ConfigError, match="at least 60"):
        CLUSTER.volume.metrics(T0, T0 + dt.timedelta(hours=1), step=10)
    with pytest.raises(ConfigError, match="must end after it starts"):
        CLUSTER.metrics(T0, T0 - dt.timedelta(hours=1))
    with pytest.raises(ConfigError, match="timezone-aware"):
        CLUSTER.metrics(dt.datetime(2026, 1, 1), None)
    with pytest.raises(ConfigError, match="only for GKE deployments"):
        Cluster.local("x", volume_dir="/tmp/x").metrics()
    assert len(gcp.time_series_requests) == before


def test_the_metric_types_are_the_ones_in_googles_metrics_list() -> None:
    # Google Cloud's metrics list (lustre table; GKE system metrics) and monitored resources,
    # as recorded in rl_lustre/metrics.py: a renamed constant must be a deliberate change.
    from rl_lustre import metrics

    assert (metrics.LUSTRE_READ_BYTES, metrics.LUSTRE_WRITE_BYTES, metrics.LUSTRE_RESOURCE) == (
        "lustre.googleapis.com/instance/read_bytes_total",
        "lustre.googleapis.com/instance/write_bytes_total",
        "lustre.googleapis.com/Instance",
    )
    assert (metrics.GPU_DUTY_CYCLE, metrics.GPU_RESOURCE) == (
        "kubernetes.io/container/accelerator/duty_cycle",
        "k8s_container",
    )
