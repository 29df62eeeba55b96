"""The HTTP fake: Compute and Service Networking routes, their validation and operations,
loud 501s, and the views tests use to count leaks and requests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import requests
from google.api_core import exceptions as gexc
from google.cloud import compute_v1

from rl_lustre.gcp import _clients
from rl_lustre.testing import FakeGCP, project_number

PROJECT = "my-project"


@pytest.fixture
def gcp() -> Iterator[FakeGCP]:
    with FakeGCP(latency={"compute.create_network": 0.05}) as fake:
        yield fake


def test_unknown_routes_answer_501_naming_the_route(gcp: FakeGCP) -> None:
    r = requests.post(f"{gcp.rest_url}/compute/v1/projects/{PROJECT}/global/routers", json={}, timeout=5)
    assert r.status_code == 501
    assert r.json()["error"]["status"] == "UNIMPLEMENTED"
    assert "POST /compute/v1/projects/my-project/global/routers" in r.json()["error"]["message"]
    networks = _clients.compute(compute_v1.NetworksClient)
    with pytest.raises(gexc.MethodNotImplemented, match="addPeering"):
        networks.add_peering_unary(
            project=PROJECT,
            network="n",
            networks_add_peering_request_resource=compute_v1.NetworksAddPeeringRequest(),
            retry=None,
        )
    assert gcp.requests[-1].outcome == "UNIMPLEMENTED"


def test_compute_operation_goes_running_to_done(gcp: FakeGCP) -> None:
    networks = _clients.compute(compute_v1.NetworksClient)
    ops = _clients.compute(compute_v1.GlobalOperationsClient)
    op = networks.insert_unary(
        project=PROJECT, network_resource=compute_v1.Network(name="n1", auto_create_subnetworks=False)
    )
    assert op.status == compute_v1.Operation.Status.RUNNING
    with pytest.raises(gexc.NotFound):  # the network appears when the operation is done
        networks.get(project=PROJECT, network="n1", retry=None)
    with pytest.raises(gexc.Conflict):
        networks.insert_unary(project=PROJECT, network_resource=compute_v1.Network(name="n1"), retry=None)
    gcp.settle()
    done = ops.get(project=PROJECT, operation=op.name)
    assert done.status == compute_v1.Operation.Status.DONE
    assert done.progress == 100
    assert not done.error.errors
    assert networks.get(project=PROJECT, network="n1").self_link.endswith("/projects/my-project/global/networks/n1")


def test_compute_validates_requests(gcp: FakeGCP) -> None:
    subnets = _clients.compute(compute_v1.SubnetworksClient)
    with pytest.raises(gexc.NotFound, match="networks/absent"):
        subnets.insert_unary(
            project=PROJECT,
            region="us-east1",
            subnetwork_resource=compute_v1.Subnetwork(
                name="s", network=f"projects/{PROJECT}/global/networks/absent", ip_cidr_range="10.0.0.0/24"
            ),
            retry=None,
        )
    gcp.seed_network(PROJECT, "net", psa_range=None)
    with pytest.raises(gexc.BadRequest, match="overlaps"):
        subnets.insert_unary(
            project=PROJECT,
            region="us-east1",
            subnetwork_resource=compute_v1.Subnetwork(
                name="s",
                network=f"projects/{PROJECT}/global/networks/net",
                ip_cidr_range="10.0.0.0/16",
                secondary_ip_ranges=[
                    compute_v1.SubnetworkSecondaryRange(range_name="pods", ip_cidr_range="10.0.8.0/21")
                ],
            ),
            retry=None,
        )
    with pytest.raises(gexc.BadRequest, match="name"):
        _clients.compute(compute_v1.FirewallsClient).insert_unary(
            project=PROJECT, firewall_resource=compute_v1.Firewall(name="Bad Name"), retry=None
        )


def test_service_networking_checks_network_and_ranges(gcp: FakeGCP) -> None:
    gcp.seed_network(PROJECT, "net", psa_range=None)
    url = f"{gcp.rest_url}/v1/services/servicenetworking.googleapis.com/connections"
    by_id = requests.post(
        url, json={"network": f"projects/{PROJECT}/global/networks/net", "reservedPeeringRanges": ["r"]}, timeout=5
    )
    assert by_id.status_code == 400
    assert "number" in by_id.json()["error"]["message"]
    ref = f"projects/{project_number(PROJECT)}/global/networks/net"
    no_range = requests.post(url, json={"network": ref, "reservedPeeringRanges": ["r"]}, timeout=5)
    assert no_range.status_code == 400
    assert "'r' not found" in no_range.json()["error"]["message"]
    assert requests.get(url, params={"network": ref}, timeout=5).json() == {}


def test_views_for_leaks_and_request_counts(gcp: FakeGCP) -> None:
    gcp.seed_network(PROJECT, "users-net")
    gcp.seed_network(PROJECT, "demo-net", deployment="demo")
    gcp.seed_network(PROJECT, "other-net", deployment="other")
    found = gcp.resources()
    assert found["compute.networks"][f"projects/{PROJECT}/global/networks/users-net"] == {}
    assert (
        found["servicenetworking.connections"][
            f"projects/{PROJECT}/global/networks/demo-net/peerings/servicenetworking-googleapis-com"
        ]["rl-lustre-deployment"]
        == "demo"
    )
    demo = gcp.leaked("demo")
    assert len(demo) == 4
    assert all("demo-net" in x for x in demo)
    assert len(gcp.leaked()) == 8
    _clients.compute(compute_v1.NetworksClient).get(project=PROJECT, network="users-net")
    [record] = gcp.requests
    assert (record.method, record.outcome) == ("compute.networks.get", "ok")
    assert record.target == f"/compute/v1/projects/{PROJECT}/global/networks/users-net"
    assert gcp.request_counts("compute.") == {"compute.networks.get": 1}
