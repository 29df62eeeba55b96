"""Compute networking and the Service Networking connection, through the real
``google-cloud-compute`` REST clients and plain REST, against the HTTP fake."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator

import pytest
from google.cloud import compute_v1
from helpers.specs import GKE, PROJECT

from rl_lustre import Cluster
from rl_lustre.errors import GCPError, OperationFailedError, OwnershipError, WaitTimeoutError
from rl_lustre.gcp import _clients
from rl_lustre.gcp.compute import (
    Firewalls,
    GlobalAddresses,
    Networks,
    Projects,
    Subnetworks,
    cidr_of,
    firewall_path,
    firewall_request,
    network_path,
    network_request,
    psa_range_path,
    psa_range_request,
    subnetwork_path,
    subnetwork_request,
)
from rl_lustre.gcp.lustre import LustreInstances, instance_request
from rl_lustre.gcp.servicenetworking import PsaConnections, connection_name
from rl_lustre.testing import FAST_BACKOFF, FAST_RETRY, FakeGCP, project_number

CLUSTER = Cluster(**GKE)
PLAN = CLUSTER.plan()
GLOBAL, REGIONAL = f"projects/{PROJECT}/global", f"projects/{PROJECT}/regions/us-east1"
KW = {"backoff": FAST_BACKOFF, "retry": FAST_RETRY}


@pytest.fixture
def gcp() -> Iterator[FakeGCP]:
    with FakeGCP() as fake:
        yield fake


def build_network() -> str:
    """Network, subnet, PSA range, peering and firewall as up() makes them; the PSA block."""
    Networks(**KW).create(network_request(PLAN), parent=GLOBAL, deployment="demo")
    Subnetworks(**KW).create(subnetwork_request(PLAN), parent=REGIONAL, deployment="demo")
    psa = GlobalAddresses(**KW).create(psa_range_request(PLAN), parent=GLOBAL, deployment="demo")
    PsaConnections(**KW).create(PROJECT, "demo-net", "demo-psa")
    block = cidr_of(psa.resource)
    Firewalls(**KW).create(firewall_request(PLAN, block), parent=GLOBAL, deployment="demo")
    return block


def test_network_branch_is_created_with_ownership_in_descriptions(gcp: FakeGCP) -> None:
    block = build_network()
    net = ipaddress.ip_network(block)
    assert net.prefixlen == 22
    assert net.is_private
    # Our network: the plan's block, clear of the subnet's ranges.
    assert block == "10.90.0.0/22"
    sub = Subnetworks(**KW).get_or_none(subnetwork_path(PLAN))
    ranges = [sub.ip_cidr_range] + [r.ip_cidr_range for r in sub.secondary_ip_ranges]
    assert not any(net.overlaps(ipaddress.ip_network(r)) for r in ranges)
    assert [(r.range_name, r.ip_cidr_range) for r in sub.secondary_ip_ranges] == [
        ("pods", "10.4.0.0/14"),
        ("services", "10.0.32.0/20"),
    ]
    fw = Firewalls(**KW).get_or_none(firewall_path(PLAN))
    assert (fw.direction, list(fw.source_ranges)) == ("INGRESS", [block])
    assert [(a.I_p_protocol, list(a.ports)) for a in fw.allowed] == [("tcp", ["988"])]
    ours = {"managed-by": "rl-lustre", "rl-lustre-deployment": "demo"}
    found = gcp.resources()
    for kind, name in [
        ("compute.networks", network_path(PLAN)),
        ("compute.subnetworks", subnetwork_path(PLAN)),
        ("compute.globalAddresses", psa_range_path(PLAN)),
        ("compute.firewalls", firewall_path(PLAN)),
    ]:
        assert found[kind][name] == ours, kind
    assert list(found["servicenetworking.connections"]) == [connection_name(PROJECT, "demo-net")]
    # Regional resources are awaited through region operations, global ones through global operations.
    counts = gcp.request_counts("compute.")
    assert counts["compute.regionOperations.get"] >= 1
    assert counts["compute.globalOperations.get"] >= 3


def test_second_run_adopts_everything(gcp: FakeGCP) -> None:
    build_network()
    inserts = sum(n for m, n in gcp.request_counts().items() if m.endswith((".insert", ".create")))
    assert Networks(**KW).create(network_request(PLAN), parent=GLOBAL, deployment="demo").adopted
    assert Subnetworks(**KW).create(subnetwork_request(PLAN), parent=REGIONAL, deployment="demo").adopted
    assert GlobalAddresses(**KW).create(psa_range_request(PLAN), parent=GLOBAL, deployment="demo").adopted
    assert PsaConnections(**KW).create(PROJECT, "demo-net", "demo-psa").adopted
    assert Firewalls(**KW).create(firewall_request(PLAN, "10.90.0.0/22"), parent=GLOBAL, deployment="demo").adopted
    again = sum(n for m, n in gcp.request_counts().items() if m.endswith((".insert", ".create")))
    assert again == inserts == 5


def test_unlabelled_network_of_the_same_name_is_refused(gcp: FakeGCP) -> None:
    client = _clients.compute(compute_v1.NetworksClient)
    client.insert_unary(
        project=PROJECT,
        network_resource=compute_v1.Network(name="demo-net", description="made by hand", auto_create_subnetworks=False),
    )
    gcp.settle()
    with pytest.raises(OwnershipError, match="demo-net"):
        Networks(**KW).create(network_request(PLAN), parent=GLOBAL, deployment="demo")
    with pytest.raises(OwnershipError):
        Networks(**KW).delete(network_path(PLAN), deployment="demo")
    assert network_path(PLAN) in gcp.resources()["compute.networks"]
    assert gcp.request_counts()["compute.networks.delete"] == 0


def test_teardown_in_reverse_order_leaves_nothing(gcp: FakeGCP) -> None:
    build_network()
    # Out of order, the API refuses: the network is still in use.
    with pytest.raises(GCPError, match="already being used"):
        Networks(**KW).delete(network_path(PLAN), deployment="demo")
    assert Firewalls(**KW).delete(firewall_path(PLAN), deployment="demo")
    assert PsaConnections(**KW).delete(PROJECT, "demo-net", "demo-psa")
    assert GlobalAddresses(**KW).delete(psa_range_path(PLAN), deployment="demo")
    assert Subnetworks(**KW).delete(subnetwork_path(PLAN), deployment="demo")
    assert Networks(**KW).delete(network_path(PLAN), deployment="demo")
    assert gcp.leaked() == []
    # Deleting what is gone is fine.
    assert not Networks(**KW).delete(network_path(PLAN), deployment="demo")
    assert not PsaConnections(**KW).delete(PROJECT, "demo-net", "demo-psa")


def test_a_psa_block_that_overlaps_the_networks_ranges_is_refused(gcp: FakeGCP) -> None:
    from rl_lustre.errors import GCPError

    Networks(**KW).create(network_request(PLAN), parent=GLOBAL, deployment="demo")
    Subnetworks(**KW).create(subnetwork_request(PLAN), parent=REGIONAL, deployment="demo")
    clash = psa_range_request(PLAN)
    clash.address = "10.4.0.0"  # inside the pods range
    with pytest.raises(GCPError, match="conflicts with secondary range pods"):
        GlobalAddresses(**KW).create(clash, parent=GLOBAL, deployment="demo")
    GlobalAddresses(**KW).create(psa_range_request(PLAN), parent=GLOBAL, deployment="demo")


def test_connection_shared_with_other_services_keeps_their_ranges(gcp: FakeGCP) -> None:
    gcp.seed_network(PROJECT, "shared-net", psa_range="10.80.0.0/20")  # a user's, peered for Cloud SQL
    GlobalAddresses(**KW).create(
        compute_v1.Address(
            name="demo-psa",
            description="[managed-by=rl-lustre rl-lustre-deployment=demo]",
            network=f"{GLOBAL}/networks/shared-net",
            purpose="VPC_PEERING",
            address_type="INTERNAL",
            prefix_length=22,
        ),
        parent=GLOBAL,
        deployment="demo",
    )
    conns = PsaConnections(**KW)
    done = conns.create(PROJECT, "shared-net", "demo-psa")
    assert not done.adopted
    assert done.resource["reservedPeeringRanges"] == ["shared-net-psa", "demo-psa"]
    assert gcp.request_counts()["servicenetworking.connections.patch"] == 1
    assert conns.delete(PROJECT, "shared-net", "demo-psa")
    kept = conns.get_or_none(PROJECT, "shared-net")
    assert kept is not None
    assert kept["reservedPeeringRanges"] == ["shared-net-psa"]


def test_connection_cannot_go_while_lustre_uses_it(gcp: FakeGCP) -> None:
    build_network()
    assert CLUSTER.volume is not None
    LustreInstances(**KW).create(instance_request(CLUSTER.volume, deployment="demo"), deployment="demo")
    with pytest.raises(OperationFailedError, match="still using this connection"):
        PsaConnections(**KW).delete(PROJECT, "demo-net", "demo-psa")


def test_service_networking_wants_the_project_number(gcp: FakeGCP) -> None:
    assert Projects().number(PROJECT) == project_number(PROJECT)
    build_network()
    conn = PsaConnections(**KW).get_or_none(PROJECT, "demo-net")
    assert conn is not None
    assert conn["network"] == f"projects/{project_number(PROJECT)}/global/networks/demo-net"


def test_failed_insert_operation_is_an_operation_error(gcp: FakeGCP) -> None:
    gcp.faults.fail_operation("compute.networks.insert", code=400, message="Invalid network configuration")
    with pytest.raises(OperationFailedError, match="Invalid network configuration") as info:
        Networks(**KW).create(network_request(PLAN), parent=GLOBAL, deployment="demo")
    assert "Compute Engine API" in str(info.value)
    assert gcp.resources()["compute.networks"] == {}


def test_connection_wait_ready_sees_our_range(gcp: FakeGCP) -> None:
    build_network()
    conn = PsaConnections(**KW).wait_ready(PROJECT, "demo-net", "demo-psa", timeout=1)
    assert conn["peering"] == "servicenetworking-googleapis-com"
    with pytest.raises(WaitTimeoutError) as info:
        PsaConnections(**KW).wait_ready(PROJECT, "demo-net", "another-range", timeout=0.1)
    assert info.value.last_state == "ranges demo-psa"
