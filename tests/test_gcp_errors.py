"""Google API errors become rl_lustre errors in one place: retries, quota and stock-out
advice, roles, failed operations; nothing from google.* reaches the caller."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest
from google.api_core import exceptions as gexc
from helpers.polling import giving_up_after

from rl_lustre import Cluster, LustreVolume
from rl_lustre.errors import (
    GCPError,
    NotFoundError,
    OperationFailedError,
    PermissionDeniedError,
    QuotaExceededError,
    RLLustreError,
)
from rl_lustre.gcp import _clients
from rl_lustre.gcp._errors import (
    COMPUTE,
    CONTAINER,
    LUSTRE,
    Call,
    RetryPolicy,
    call,
    is_transient,
    operation_error,
    translate,
)
from rl_lustre.gcp.compute import Firewalls, Networks, firewall_request, network_request
from rl_lustre.gcp.container import GkeNodePools
from rl_lustre.gcp.lustre import LustreInstances
from rl_lustre.gcp.servicenetworking import PsaConnections
from rl_lustre.testing import FAST_BACKOFF, FAST_RETRY, FakeGCP

PROJECT, ZONE = "my-project", "us-east1-b"
NAME = f"projects/{PROJECT}/locations/{ZONE}/instances/lab-lustre"
PLAN = Cluster(name="demo", project=PROJECT, region="us-east1", zone=ZONE).plan()


@pytest.fixture
def gcp() -> Iterator[FakeGCP]:
    with FakeGCP(latency={"lustre.create": 0.03}) as fake:
        fake.seed_network(PROJECT, "lab-net")
        yield fake


def lustre() -> LustreInstances:
    return LustreInstances(backoff=FAST_BACKOFF, retry=FAST_RETRY)


def vol() -> LustreVolume:
    return LustreVolume(name="lab-lustre", project=PROJECT, zone=ZONE, network="lab-net")


def test_unavailable_is_retried_then_succeeds(gcp: FakeGCP) -> None:
    gcp.faults.fail_call("lustre.CreateInstance", code=grpc.StatusCode.UNAVAILABLE, times=2)
    gcp.faults.fail_call("longrunning.GetOperation", code=grpc.StatusCode.DEADLINE_EXCEEDED, times=1)
    v = vol().create(api=lustre())
    assert v.state == "ACTIVE"
    outcomes = [r.outcome for r in gcp.requests if r.method == "lustre.CreateInstance"]
    assert outcomes == ["UNAVAILABLE", "UNAVAILABLE", "ok"]
    assert "DEADLINE_EXCEEDED" in [r.outcome for r in gcp.requests if r.method == "longrunning.GetOperation"]


def test_lasting_unavailability_gives_up_with_our_error(gcp: FakeGCP) -> None:
    gcp.faults.fail_call("lustre.GetInstance", code=grpc.StatusCode.UNAVAILABLE, times=100)
    api = LustreInstances(backoff=FAST_BACKOFF, retry=giving_up_after(3))
    with pytest.raises(GCPError, match="after 3 attempt") as info:
        api.get_or_none(NAME)
    assert isinstance(info.value.__cause__, gexc.ServiceUnavailable)
    assert gcp.request_counts()["lustre.GetInstance"] == 3


def test_rate_limits_are_retried_over_rest(gcp: FakeGCP) -> None:
    gcp.faults.rate_limit("compute.networks.*", times=2)
    done = Networks(backoff=FAST_BACKOFF, retry=FAST_RETRY).create(
        network_request(PLAN), parent=f"projects/{PROJECT}/global", deployment="demo"
    )
    assert not done.adopted
    # Two 429s, then the get that finds no network, then the insert.
    assert [(r.method, r.outcome) for r in gcp.requests if r.method.startswith("compute.networks.")] == [
        ("compute.networks.get", "RESOURCE_EXHAUSTED"),
        ("compute.networks.get", "RESOURCE_EXHAUSTED"),
        ("compute.networks.get", "NOT_FOUND"),
        ("compute.networks.insert", "ok"),
        ("compute.networks.get", "ok"),
    ]


def test_endless_rate_limit_is_a_quota_error(gcp: FakeGCP) -> None:
    gcp.faults.rate_limit("servicenetworking.connections.list", times=100)
    conns = PsaConnections(backoff=FAST_BACKOFF, retry=giving_up_after(2))
    with pytest.raises(QuotaExceededError, match="rate-limiting"):
        conns.get_or_none(PROJECT, "lab-net")


@pytest.mark.parametrize(
    ("method", "role", "run"),
    [
        ("lustre.CreateInstance", "roles/lustre.admin", lambda: vol().create(api=lustre())),
        (
            "gke.GetNodePool",
            "roles/container.admin",
            lambda: GkeNodePools(retry=FAST_RETRY).get_or_none(
                f"projects/{PROJECT}/locations/us-east1/clusters/demo/nodePools/gpu-pool"
            ),
        ),
        (
            "compute.networks.get",
            "roles/compute.networkAdmin",
            lambda: Networks(retry=FAST_RETRY).get_or_none(f"projects/{PROJECT}/global/networks/demo-net"),
        ),
        (
            "compute.firewalls.insert",
            "roles/compute.securityAdmin",
            lambda: Firewalls(retry=FAST_RETRY).create(
                firewall_request(PLAN, "10.90.0.0/22"), parent=f"projects/{PROJECT}/global", deployment="demo"
            ),
        ),
        (
            "servicenetworking.connections.list",
            "roles/servicenetworking.networksAdmin",
            lambda: PsaConnections(retry=FAST_RETRY).get_or_none(PROJECT, "lab-net"),
        ),
    ],
    ids=["lustre", "gke", "compute", "firewall", "servicenetworking"],
)
def test_permission_denied_names_the_api_and_the_role(  # type: ignore[no-untyped-def]
    gcp: FakeGCP, method: str, role: str, run
) -> None:
    gcp.faults.fail_call(
        method, code=grpc.StatusCode.PERMISSION_DENIED, message="The caller does not have permission", times=10
    )
    if method == "compute.firewalls.insert":
        Networks(retry=FAST_RETRY, backoff=FAST_BACKOFF).create(
            network_request(PLAN), parent=f"projects/{PROJECT}/global", deployment="demo"
        )
    with pytest.raises(PermissionDeniedError) as info:
        run()
    text = str(info.value)
    assert role in text
    assert PROJECT in text
    assert "googleapis.com" in text
    assert isinstance(info.value, PermissionError)
    assert [r.outcome for r in gcp.requests if r.method == method] == ["PERMISSION_DENIED"]  # not retried


def test_disabled_api_says_to_enable_it() -> None:
    exc = gexc.PermissionDenied("Cloud Lustre API has not been used in project 123 before or it is disabled.")
    err = translate(exc, Call(LUSTRE, "create", f"Lustre instance {NAME}"))
    assert isinstance(err, PermissionDeniedError)
    assert "enable lustre.googleapis.com" in str(err)


def test_quota_at_call_time_is_not_retried_and_gives_advice(gcp: FakeGCP) -> None:
    gcp.faults.fail_call(
        "lustre.CreateInstance",
        code=grpc.StatusCode.RESOURCE_EXHAUSTED,
        times=10,
        message="Quota 'lustre_capacity_gib' exceeded. Limit: 9000 in zone us-east1-b.",
    )
    with pytest.raises(QuotaExceededError) as info:
        vol().create(api=lustre())
    text = str(info.value)
    assert "us-east1-b" in text
    assert "lab-lustre" in text
    assert "another zone" in text
    assert gcp.request_counts()["lustre.CreateInstance"] == 1


def test_failed_operation_is_operation_failed_error(gcp: FakeGCP) -> None:
    gcp.faults.fail_operation("lustre.CreateInstance", message="Internal error while provisioning storage")
    with pytest.raises(OperationFailedError, match="provisioning storage") as info:
        vol().create(api=lustre())
    assert not isinstance(info.value, QuotaExceededError)
    assert gcp.resources()["lustre.instances"] == {}


def test_not_found_is_lookup_error(gcp: FakeGCP) -> None:
    assert lustre().get_or_none(NAME) is None
    with pytest.raises(NotFoundError) as info:
        lustre().wait_ready(NAME, timeout=1)
    assert isinstance(info.value, LookupError)


@pytest.mark.parametrize("code", [c for c in grpc.StatusCode if c not in (grpc.StatusCode.OK,)], ids=lambda c: c.name)
def test_no_google_exception_escapes(gcp: FakeGCP, code: grpc.StatusCode) -> None:
    gcp.faults.fail_call("lustre.GetInstance", code=code, times=10)
    api = LustreInstances(retry=giving_up_after(2))
    if code == grpc.StatusCode.NOT_FOUND:
        assert api.get_or_none(NAME) is None
        return
    with pytest.raises(RLLustreError) as info:
        api.get_or_none(NAME)
    assert not type(info.value).__module__.startswith(("google", "grpc"))
    assert info.value.__cause__ is not None
    assert type(info.value.__cause__).__module__.startswith("google")


def test_unimplemented_route_is_our_error(gcp: FakeGCP) -> None:
    session, base = _clients.http_session("servicenetworking", "unused")

    def get() -> None:
        session.get(f"{base}/v1/services/servicenetworking.googleapis.com/dnsZones").raise_for_status()

    with pytest.raises(GCPError, match="does not implement GET /v1/services") as info:
        call(Call(COMPUTE, "list", "DNS zones"), get)
    assert type(info.value.__cause__).__module__.startswith("requests")


def test_transient_classification() -> None:
    assert is_transient(gexc.ServiceUnavailable("down"))
    assert is_transient(gexc.DeadlineExceeded("slow"))
    assert is_transient(gexc.TooManyRequests("Too many requests"))
    # Google words rate limits as quotas; per-minute limits are still worth retrying.
    assert is_transient(
        gexc.TooManyRequests(
            "Quota exceeded for quota metric 'Queries' and limit 'Queries per minute' "
            "of service 'compute.googleapis.com'"
        )
    )
    assert is_transient(gexc.FailedPrecondition("Cluster is running incompatible operation operation-1"))
    assert is_transient(gexc.BadRequest("The resource 'projects/p/global/networks/n' is not ready"))
    assert not is_transient(gexc.BadRequest("Invalid value for field 'resource.name'"))
    assert not is_transient(gexc.ResourceExhausted("Quota 'NVIDIA_B200_GPUS' exceeded. Limit: 0.0 in region us-east1."))
    assert not is_transient(gexc.ResourceExhausted("ZONE_RESOURCE_POOL_EXHAUSTED"))
    assert not is_transient(gexc.PermissionDenied("no"))
    assert not is_transient(ValueError("a bug, not a remote failure"))


def test_stockout_in_an_operation_names_zone_and_options() -> None:
    err = operation_error(
        Call(CONTAINER, "create", "GKE node pool gpu-pool", zone="us-central1-a"),
        "GCE_STOCKOUT: a4-highgpu-8g is not available",
        code=8,
    )
    assert isinstance(err, QuotaExceededError)
    for words in ("us-central1-a", "gpu-pool", "another zone", "num_nodes", "reservation", "spot=False"):
        assert words in str(err)
    plain = operation_error(Call(CONTAINER, "create", "GKE cluster demo"), "boom", code=13)
    assert type(plain) is OperationFailedError
    assert "boom" in str(plain)
    assert "13" in str(plain)


def test_missing_credentials_explain_how_to_log_in(  # type: ignore[no-untyped-def]
    monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    monkeypatch.delenv(_clients.GRPC_EMULATOR_ENV, raising=False)
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "missing.json"))
    with pytest.raises(GCPError, match="application-default login") as info:
        _clients.credentials()
    assert type(info.value.__cause__).__module__.startswith("google.auth")


def test_busy_is_retried_until_the_busy_timeout() -> None:
    tries = []

    def busy() -> None:
        tries.append(1)
        raise gexc.FailedPrecondition("Cluster is running incompatible operation operation-7")

    policy = RetryPolicy(attempts=2, initial=0.001, maximum=0.005, busy_timeout=0.1)
    with pytest.raises(GCPError, match="another operation is still running") as info:
        call(Call(CONTAINER, "create", "GKE node pool gpu-pool"), busy, policy=policy)
    assert len(tries) > 2
    assert isinstance(info.value.__cause__, gexc.FailedPrecondition)
