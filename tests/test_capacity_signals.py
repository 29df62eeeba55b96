"""Capacity signals: the texts Google Cloud and Kubernetes give for a stock-out, a quota,
a reservation or a ProvisioningRequest, and what each becomes."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from rl_lustre.errors import QuotaExceededError, StockoutError
from rl_lustre.gcp._errors import CONTAINER, Call, operation_error, translate
from rl_lustre.gcp.stockouts import classify_gcp
from rl_lustre.kube import capacity_signals
from rl_lustre.kube.capacity_signals import Signal, classify_event, provisioning_request_state

# (code, message, kind, scope, zone, zones_available): texts as Google gives them (sources
# in rl_lustre.gcp.stockouts).
GCP_TEXTS = [
    (
        "",
        "Google Compute Engine: Not all instances running in IGM after 14.691006793s. Expected 1, running 0, "
        "transitioning 1. Current errors: [GCE_STOCKOUT]: Instance 'gke-c-gpu-pool-1' creation failed: The zone "
        "'projects/p/zones/us-east1-b' does not have enough resources available to fulfill the request.  Try a "
        "different zone, or try again later.",
        "stockout",
        "zone",
        "us-east1-b",
        (),
    ),
    (
        "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS",
        "The zone 'projects/p/zones/us-central1-b' does not have enough resources available to fulfill the request. "
        "'(resource type:compute)'. a4-highgpu-8g is currently unavailable in the us-central1-b zone. Consider trying "
        "your request in the us-central1-a, us-central1-f zone(s), which currently has capacity",
        "stockout",
        "zone",
        "us-central1-b",
        ("us-central1-a", "us-central1-f"),
    ),
    (
        "ZONE_RESOURCE_POOL_EXHAUSTED",
        "The zone 'projects/p/zones/us-east1-c' does not have enough resources",
        "stockout",
        "zone",
        "us-east1-c",
        (),
    ),
    ("GCE_STOCKOUT", "Google Compute Engine resources are temporarily unavailable", "stockout", "zone", None, ()),
    (
        "QUOTA_EXCEEDED",
        "Quota 'GPUS_ALL_REGIONS' exceeded. Limit: 0.0 globally. metric name = "
        "compute.googleapis.com/gpus_all_regions, limit name = GPUS-ALL-REGIONS-per-project",
        "quota",
        "global",
        None,
        (),
    ),
    (
        "QUOTA_EXCEEDED",
        "Quota 'PREEMPTIBLE_NVIDIA_B200_GPUS' exceeded. Limit: 0.0 in region us-east1.",
        "quota",
        "region",
        None,
        (),
    ),
    ("GCE_QUOTA_EXCEEDED", "Insufficient quota to satisfy the request", "quota", "region", None, ()),
    (
        "CONDITION_NOT_MET",
        "Specified reservation 'projects/p/reservations/r1' does not have available resources for the request.",
        "reservation",
        "lane",
        None,
        (),
    ),
    ("INVALID_FIELD_VALUE", "it requires reservation to be in READY state", "reservation", "lane", None, ()),
]


@pytest.mark.parametrize(("code", "message", "kind", "scope", "zone", "available"), GCP_TEXTS)
def test_gcp_texts_classify(
    code: str, message: str, kind: str, scope: str, zone: str | None, available: tuple[str, ...]
) -> None:
    signal = classify_gcp(code, message, source="test")
    assert signal is not None
    assert (signal.kind, signal.scope, signal.zone, signal.zones_available) == (kind, scope, zone, available)
    assert signal.message == message


def test_other_gcp_failures_are_no_capacity_signal() -> None:
    assert classify_gcp("INTERNAL", "An internal error has occurred") is None
    assert classify_gcp("INVALID_ARGUMENT", "Node pool needs a machine type") is None


def test_operation_error_is_a_stockout_with_its_signal() -> None:
    call = Call(CONTAINER, "create", "GKE node pool p", zone="us-east1-b")
    err = operation_error(call, GCP_TEXTS[0][1], code=8)
    assert isinstance(err, StockoutError)
    assert isinstance(err, QuotaExceededError)
    assert err.signal.kind == "stockout"
    assert err.signal.zone == "us-east1-b"
    quota = operation_error(call, GCP_TEXTS[5][1])
    assert type(quota) is QuotaExceededError
    assert quota.signal.kind == "quota"


def test_translate_gives_a_stockout_error() -> None:
    from google.api_core import exceptions

    err = translate(
        exceptions.ServiceUnavailable("ZONE_RESOURCE_POOL_EXHAUSTED in us-east1-b"),
        Call(CONTAINER, "create", "pool", zone="us-east1-b"),
    )
    assert isinstance(err, StockoutError)
    assert err.signal.zone == "us-east1-b"


# Events the cluster autoscaler puts on pending pods (GKE), and what they mean.
EVENTS = [
    (
        "FailedScaleUp",
        "Node scale up in zones us-central1-b associated with this pod failed: GCE out of resources. "
        "Pod is at risk of not being scheduled.",
        "stockout",
        "zone",
        "us-central1-b",
    ),
    (
        "FailedScaleUp",
        "Node scale up in zones us-east1-b associated with this pod failed: GCE quota exceeded. Pod is "
        "at risk of not being scheduled.",
        "quota",
        "region",
        "us-east1-b",
    ),
    ("NotTriggerScaleUp", "pod didn't trigger scale-up: 2 in backoff after failed scale-up", "backoff", "lane", None),
    ("NotTriggerScaleUp", "pod didn't trigger scale-up: 1 max node group size reached", "misconfigured", "lane", None),
]


@pytest.mark.parametrize(("reason", "message", "kind", "scope", "zone"), EVENTS)
def test_events_classify(reason: str, message: str, kind: str, scope: str, zone: str | None) -> None:
    signal = classify_event(reason, message, at=5.0)
    assert signal is not None
    assert (signal.kind, signal.scope, signal.zone, signal.at) == (kind, scope, zone, 5.0)


@pytest.mark.parametrize("reason", ["TriggeredScaleUp", "Scheduled", "FailedScheduling", "Pulled"])
def test_other_events_are_no_signal(reason: str) -> None:
    text = (
        "pod triggered scale-up: [{https://www.googleapis.com/compute/v1/projects/p/zones/us-east1-b/"
        "instanceGroups/gke-c-gpu-pool-grp 0->1 (max: 8)}]"
    )
    assert classify_event(reason, text) is None


def _pr(*conditions: dict[str, str]) -> dict[str, object]:
    return {"metadata": {"name": "demo-flex-b-1"}, "status": {"conditions": list(conditions)}}


def test_provisioning_request_states() -> None:
    assert provisioning_request_state({"metadata": {"name": "x"}})[0] == "pending"
    state, signal, message = provisioning_request_state(
        _pr(
            {"type": "Accepted", "status": "True"},
            {"type": "Provisioned", "status": "False", "message": "Waiting for resources. Currently ETA is 12:40"},
        )
    )
    assert (state, signal, message) == ("accepted", None, "Waiting for resources. Currently ETA is 12:40")
    assert provisioning_request_state(_pr({"type": "Provisioned", "status": "True"}))[0] == "provisioned"
    for kind, state_name, signal_kind in (
        ("Failed", "failed", "stockout"),
        ("CapacityRevoked", "revoked", "revoked"),
        ("BookingExpired", "expired", "expired"),
    ):
        state, signal, _ = provisioning_request_state(
            _pr(
                {"type": "Provisioned", "status": "True"},
                {"type": kind, "status": "True", "reason": "R", "message": "m"},
            )
        )
        assert state == state_name
        assert signal is not None
        assert signal.kind == signal_kind
        assert signal.source == "ProvisioningRequest demo-flex-b-1"
    # A condition that is False does not count.
    assert provisioning_request_state(_pr({"type": "Failed", "status": "False"}))[0] == "pending"


def test_signal_round_trips_and_rejects_unknown_kinds() -> None:
    s = Signal("stockout", "zone", "pod event", "FailedScaleUp", "m", zone="us-east1-b", zones_available=("a",), at=1.0)
    assert Signal.from_dict(s.to_dict()) == s
    assert s.waiting_helps
    assert not Signal("quota", "region", "x", "y", "z").waiting_helps
    with pytest.raises(ValueError, match="kind"):
        Signal("bad", "zone", "x", "y", "z")


def test_kubernetes_side_is_standard_library_only() -> None:
    # Shipped to the cluster with the supervisor: no third-party or rl_lustre import.
    tree = ast.parse(Path(capacity_signals.__file__).read_text())
    imported = {
        alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names
    }
    imported |= {
        (node.module or "").split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.level == 0
    }
    assert imported <= set(sys.stdlib_module_names) | {"__future__"}
    assert not any(isinstance(node, ast.ImportFrom) and node.level for node in ast.walk(tree))
