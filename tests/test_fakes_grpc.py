"""The gRPC fakes: the real Lustre and GKE clients, LROs through google.longrunning,
latency and time scale, fault injection, loud failure on what is not implemented."""

from __future__ import annotations

import time
from collections.abc import Iterator

import grpc
import pytest
from google.api_core import exceptions as gexc
from google.api_core.future.polling import DEFAULT_POLLING
from google.cloud import container_v1, lustre_v1
from google.protobuf import empty_pb2

from rl_lustre.gcp import _clients
from rl_lustre.testing import DEFAULT_LATENCY, FakeError, FakeGCP

PROJECT, ZONE = "my-project", "us-east1-b"
PARENT = f"projects/{PROJECT}/locations/{ZONE}"
FAST = DEFAULT_POLLING.with_delay(initial=0.01, maximum=0.05)


@pytest.fixture
def gcp() -> Iterator[FakeGCP]:
    with FakeGCP(latency={"lustre.create": 0.2, "lustre.delete": 0.05}, time_scale=0.5) as fake:
        fake.seed_network(PROJECT, "net")
        yield fake


def instance(**kw: object) -> lustre_v1.Instance:
    fields: dict[str, object] = {
        "capacity_gib": 18000,
        "per_unit_storage_throughput": 500,
        "filesystem": "lfs",
        "network": f"projects/{PROJECT}/global/networks/net",
    }
    fields.update(kw)
    return lustre_v1.Instance(**fields)


def test_lustre_lro_through_the_client_poller(gcp: FakeGCP) -> None:
    client = _clients.lustre()
    start = time.monotonic()
    op = client.create_instance(parent=PARENT, instance_id="one", instance=instance())
    assert client.get_instance(name=f"{PARENT}/instances/one").state == lustre_v1.Instance.State.CREATING
    created = op.result(timeout=10, polling=FAST)
    # latency 0.2 s × time scale 0.5
    assert 0.09 <= time.monotonic() - start < 2
    assert created.state == lustre_v1.Instance.State.ACTIVE
    assert created.mount_point == "10.90.1.4@tcp:/lfs"
    assert isinstance(op.metadata, lustre_v1.OperationMetadata)
    assert op.metadata.verb == "create"
    ops = client.list_operations({"name": PARENT}).operations
    assert [o.name for o in ops] == [op.operation.name]
    assert ops[0].done
    client.delete_operation({"name": op.operation.name})
    with pytest.raises(gexc.NotFound):
        client.get_operation({"name": op.operation.name})
    client.delete_instance(name=created.name).result(timeout=10, polling=FAST)
    assert list(client.list_instances(parent=PARENT)) == []


def test_lustre_validates_like_the_api(gcp: FakeGCP) -> None:
    client = _clients.lustre()
    with pytest.raises(gexc.InvalidArgument, match="capacity_gib"):
        client.create_instance(parent=PARENT, instance_id="odd", instance=instance(capacity_gib=20000), retry=None)
    with pytest.raises(gexc.InvalidArgument, match="instance_id"):
        client.create_instance(parent=PARENT, instance_id="Bad_Name", instance=instance(), retry=None)
    client.create_instance(parent=PARENT, instance_id="dup", instance=instance())
    with pytest.raises(gexc.AlreadyExists):
        client.create_instance(parent=PARENT, instance_id="dup", instance=instance(), retry=None)
    with pytest.raises(gexc.FailedPrecondition, match="not ACTIVE"):
        client.import_data(
            request={"name": f"{PARENT}/instances/dup", "gcs_path": {"uri": "gs://b/x"}, "lustre_path": {"path": "/x"}},
            retry=None,
        )


def test_cancelled_operation_reports_cancellation(gcp: FakeGCP) -> None:
    client = _clients.lustre()
    op = client.create_instance(parent=PARENT, instance_id="cancel-me", instance=instance())
    client.cancel_operation({"name": op.operation.name})
    with pytest.raises(gexc.GoogleAPICallError, match="cancelled"):
        op.result(timeout=5, polling=FAST)


def test_unimplemented_methods_fail_loudly(gcp: FakeGCP) -> None:
    with pytest.raises(gexc.MethodNotImplemented, match="ClusterManager/SetLabels"):
        _clients.cluster_manager().set_labels(
            request={
                "name": "projects/p/locations/l/clusters/c",
                "resource_labels": {"a": "b"},
                "label_fingerprint": "x",
            },
            retry=None,
        )
    channel = grpc.insecure_channel(gcp.grpc_address)
    call = channel.unary_unary("/no.such.Service/Method")
    with pytest.raises(grpc.RpcError) as info:
        call(b"")
    assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED
    assert "/no.such.Service/Method" in info.value.details()
    channel.close()
    assert [r.outcome for r in gcp.requests][-2:] == ["UNIMPLEMENTED"] * 2


def test_fail_call_on_the_nth_call(gcp: FakeGCP) -> None:
    gcp.faults.fail_call("lustre.GetInstance", grpc.StatusCode.INTERNAL, after=2, times=1, message="disk on fire")
    client = _clients.lustre()
    name = f"{PARENT}/instances/none"
    for _ in range(2):
        with pytest.raises(gexc.NotFound):
            client.get_instance(name=name, retry=None)
    with pytest.raises(gexc.InternalServerError, match="disk on fire"):
        client.get_instance(name=name, retry=None)
    with pytest.raises(gexc.NotFound):
        client.get_instance(name=name, retry=None)
    assert [r.outcome for r in gcp.requests if r.method == "lustre.GetInstance"] == [
        "NOT_FOUND",
        "NOT_FOUND",
        "INTERNAL",
        "NOT_FOUND",
    ]


def test_fail_operation_ends_the_lro_with_an_error(gcp: FakeGCP) -> None:
    gcp.faults.fail_operation("lustre.CreateInstance", grpc.StatusCode.RESOURCE_EXHAUSTED, message="no capacity")
    op = _clients.lustre().create_instance(parent=PARENT, instance_id="doomed", instance=instance())
    with pytest.raises(gexc.GoogleAPICallError, match="no capacity"):
        op.result(timeout=5, polling=FAST)
    assert gcp.resources()["lustre.instances"] == {}


def test_fault_and_latency_keys_are_checked() -> None:
    with pytest.raises(ValueError, match=r"lustre\.create"):
        FakeGCP(latency={"lustre.make": 1.0})
    with FakeGCP() as gcp:
        with pytest.raises(ValueError, match=r"lustre\.CreateInstance"):
            gcp.faults.fail_call("lustre.MakeInstance")
        with pytest.raises(ValueError, match="HTTP status"):
            gcp.faults.fail_operation("gke.CreateNodePool", code=8)
    assert "gke.create_node_pool" in DEFAULT_LATENCY


def test_gke_operations_and_lists(gcp: FakeGCP) -> None:
    gcp.seed_network(PROJECT, "gke-net")
    client = _clients.cluster_manager()
    parent = f"projects/{PROJECT}/locations/us-east1"
    op = client.create_cluster(
        parent=parent,
        cluster=container_v1.Cluster(
            name="c1",
            network="gke-net",
            subnetwork="gke-net",
            initial_node_count=1,
            ip_allocation_policy={
                "use_ip_aliases": True,
                "cluster_secondary_range_name": "pods",
                "services_secondary_range_name": "services",
            },
        ),
    )
    assert op.operation_type == container_v1.Operation.Type.CREATE_CLUSTER
    assert op.status != container_v1.Operation.Status.DONE
    gcp.settle()
    done = client.get_operation(name=f"{parent}/operations/{op.name}")
    assert done.status == container_v1.Operation.Status.DONE
    assert not done.error.code
    assert [c.name for c in client.list_clusters(parent=f"projects/{PROJECT}/locations/-").clusters] == ["c1"]
    assert [o.name for o in client.list_operations(parent=parent).operations] == [op.name]
    with pytest.raises(gexc.InvalidArgument, match="secondary range"):
        client.create_cluster(
            parent=parent,
            cluster=container_v1.Cluster(
                name="c2",
                network="gke-net",
                subnetwork="gke-net",
                initial_node_count=1,
                ip_allocation_policy={"use_ip_aliases": True, "cluster_secondary_range_name": "nope"},
            ),
            retry=None,
        )
    assert list(client.list_node_pools(parent=f"{parent}/clusters/c1").node_pools) == []


def test_extra_grpc_methods_can_be_served(gcp: FakeGCP) -> None:
    seen = []

    def ping(request: empty_pb2.Empty) -> empty_pb2.Empty:
        seen.append(request)
        if len(seen) > 1:
            raise FakeError(grpc.StatusCode.FAILED_PRECONDITION, "only once")
        return empty_pb2.Empty()

    gcp.add_grpc_method("test.v1.Pinger", "Ping", ping, empty_pb2.Empty, empty_pb2.Empty)
    channel = grpc.insecure_channel(gcp.grpc_address)
    call = channel.unary_unary(
        "/test.v1.Pinger/Ping",
        request_serializer=empty_pb2.Empty.SerializeToString,
        response_deserializer=empty_pb2.Empty.FromString,
    )
    assert call(empty_pb2.Empty()) == empty_pb2.Empty()
    with pytest.raises(grpc.RpcError) as info:
        call(empty_pb2.Empty())
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    channel.close()
    assert gcp.request_counts("pinger.") == {"pinger.Ping": 2}
