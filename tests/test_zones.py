"""Zone discovery: the zones of a region offering the machine type, its GPU and Managed
Lustre, asked of the fakes' Compute and Lustre APIs (never a list of ours)."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace

import pytest

from rl_lustre.errors import PermissionDeniedError
from rl_lustre.gcp.zones import ZoneOffer, capacity_zones, region_zones
from rl_lustre.testing import FakeGCP


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeGCP]:
    with FakeGCP() as gcp:
        yield gcp


@pytest.fixture
def gcp(fake: FakeGCP) -> FakeGCP:
    fake.catalog.reset()
    fake.faults.clear()
    return fake


def spec(mode: object = "region", **over: object) -> SimpleNamespace:
    # The fields zone discovery reads (capacity_zones is the capacity policy's field).
    return SimpleNamespace(
        **{
            "project": "my-project",
            "region": "us-east1",
            "zone": "us-east1-c",
            "machine_type": "a4-highgpu-8g",
            "accelerator_type": "nvidia-b200",
            "capacity_zones": mode,
            **over,
        }
    )


def test_every_zone_of_the_region_with_what_it_offers_in_four_calls(gcp: FakeGCP) -> None:
    gcp.catalog.withdraw("us-east1-b", "nvidia-b200")
    gcp.catalog.lustre_zones(["us-east1-b", "us-east1-c"])
    gcp.catalog.add_zone("us-east1-e")  # newer than rl_lustre's list: found all the same
    before = len(gcp.requests)
    offers = region_zones(spec())  # type: ignore[arg-type]
    assert offers == (
        ZoneOffer("us-east1-b", True, False, True),
        ZoneOffer("us-east1-c", True, True, True),
        ZoneOffer("us-east1-d", True, True, False),
        ZoneOffer("us-east1-e", True, True, False),
    )
    assert [o.zone for o in offers if o.usable] == ["us-east1-c"]
    assert offers[0].missing() == ["the GPU type"]
    assert sorted(r.method for r in gcp.requests[before:]) == [
        "compute.acceleratorTypes.aggregatedList",
        "compute.machineTypes.aggregatedList",
        "compute.zones.list",
        "lustre.ListLocations",
    ]


def test_capacity_zones_home_zone_first_then_the_usable_ones_in_name_order(gcp: FakeGCP) -> None:
    before = len(gcp.requests)
    assert capacity_zones(spec("zone")) == ("us-east1-c",)  # type: ignore[arg-type]
    assert len(gcp.requests) == before  # the default asks nothing
    assert capacity_zones(spec()) == ("us-east1-c", "us-east1-b", "us-east1-d")  # type: ignore[arg-type]
    gcp.catalog.withdraw("us-east1-d", "a4-highgpu-8g")
    assert capacity_zones(spec()) == ("us-east1-c", "us-east1-b")  # type: ignore[arg-type]
    # The home zone stays first even when it lacks something: up() reports it there.
    gcp.catalog.lustre_zones(["us-east1-b"])
    assert capacity_zones(spec()) == ("us-east1-c", "us-east1-b")  # type: ignore[arg-type]
    # An explicit tuple: those of its zones that are usable.
    gcp.catalog.reset()
    assert capacity_zones(spec(("us-east1-c", "us-east1-d"))) == ("us-east1-c", "us-east1-d")  # type: ignore[arg-type]
    gcp.catalog.withdraw("us-east1-d", "nvidia-b200")
    assert capacity_zones(spec(("us-east1-c", "us-east1-d"))) == ("us-east1-c",)  # type: ignore[arg-type]


def test_a_machine_without_gpus_needs_no_accelerator_and_errors_are_ours(gcp: FakeGCP) -> None:
    cpu = spec(machine_type="n2-highmem-16", accelerator_type=None)
    assert all(o.accelerator for o in region_zones(cpu))  # type: ignore[arg-type]
    gcp.faults.fail_call("compute.zones.list", 403, message="Required 'compute.zones.list' permission")
    with pytest.raises(PermissionDeniedError, match=r"roles/compute\.viewer"):
        region_zones(spec())  # type: ignore[arg-type]
