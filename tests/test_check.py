"""The online check before spending: read-only questions to the fakes, pass and fail,
on its own (``cluster.check()``, ``rl-lustre check``) and as the first thing ``up()`` does."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from click.testing import CliRunner
from helpers.specs import GKE

from rl_lustre import Capacity, Cluster, LustreVolume
from rl_lustre.check import quota_metric
from rl_lustre.cli._app import cli
from rl_lustre.errors import CapacityError, QuotaExceededError
from rl_lustre.testing import FakeGCP

SPEC = {**GKE, "name": "chk", "num_nodes": 2}
READ_ONLY = {
    "compute.zones.get",
    "compute.machineTypes.get",
    "compute.acceleratorTypes.get",
    "compute.regions.get",
    "lustre.ListLocations",
    "cloudquotas.GetQuotaInfo",
    "cloudquotas.ListQuotaInfos",
    "compute.reservations.aggregatedList",
    "compute.reservations.get",
    "compute.zones.list",
    "compute.machineTypes.aggregatedList",
    "compute.acceleratorTypes.aggregatedList",
}
FAMILY = "GPUS-PER-GPU-FAMILY-per-project-region"
PREEMPTIBLE = "PREEMPTIBLE-GPUS-PER-GPU-FAMILY-per-project-region"
ALL_REGIONS = "GPUS-ALL-REGIONS-per-project"
L4 = {**SPEC, "machine_type": "g2-standard-96"}


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeGCP]:
    with FakeGCP() as gcp:
        yield gcp


@pytest.fixture
def gcp(fake: FakeGCP) -> FakeGCP:
    fake.catalog.reset()
    fake.quotas.reset()
    fake.reservations.reset()
    fake.faults.clear()
    return fake


def test_a_deployment_the_project_can_get_passes_with_read_only_calls(gcp: FakeGCP) -> None:
    before = len(gcp.requests)
    report = Cluster(**SPEC).check()
    assert report.ok, str(report)
    assert [i.verdict for i in report.items] == ["ok"] * 9
    assert report.items[0].what == "zone us-east1-b exists"
    assert (
        f"{PREEMPTIBLE} [NVIDIA_B200, us-east1] covers 16 GPUs (2 nodes × 8) for spot in us-east1-b: limit 4096"
        in str(report)
    )
    assert f"{ALL_REGIONS} covers 16 GPUs: limit 4096" in str(report)
    asked = {r.method for r in gcp.requests[before:]}
    assert asked <= READ_ONLY
    assert {"cloudquotas.GetQuotaInfo", "cloudquotas.ListQuotaInfos", "compute.reservations.aggregatedList"} <= asked


def test_missing_machine_type_lustre_zone_and_quota_are_each_named_with_their_fix(gcp: FakeGCP) -> None:
    gcp.catalog.withdraw("us-east1-b", "a4-highgpu-8g")
    gcp.catalog.lustre_zones(["us-east1-c", "us-central1-a"])
    gcp.quotas.set_limit(PREEMPTIBLE, 8, region="us-east1", gpu_family="NVIDIA_B200")
    report = Cluster(**SPEC).check()
    assert not report.ok
    problems = {p.what: p for p in report.problems}
    assert len(problems) == 3
    machine = problems["zone us-east1-b offers machine type a4-highgpu-8g"]
    assert "404" in machine.detail
    lustre = problems["Managed Lustre runs in us-east1-b"]
    assert lustre.fix == "use a zone where it runs (us-east1-c in us-east1)"
    quota = next(p for p in report.problems if p.what.startswith(PREEMPTIBLE))
    assert quota.detail == "limit 8"
    assert quota.fix.startswith(f"raise {PREEMPTIBLE} (region=us-east1, gpu_family=NVIDIA_B200) to at least 16")
    assert (
        f"`gcloud quotas preferences create --service=compute.googleapis.com --project=my-project "
        f"--quota-id={PREEMPTIBLE} --preferred-value=16 --dimensions=region=us-east1,gpu_family=NVIDIA_B200`"
        in quota.fix
    )


def test_a4_quota_comes_from_cloud_quotas_where_compute_lists_no_b200_metric(gcp: FakeGCP) -> None:
    # Compute's region quotas list nothing for B200 (as for the newer families): not "unknown" any more.
    gcp.catalog.drop_quota("us-east1", "PREEMPTIBLE_NVIDIA_B200_GPUS")
    gcp.catalog.drop_quota("us-east1", "NVIDIA_B200_GPUS")
    gcp.quotas.set_limit(PREEMPTIBLE, 16, region="us-east1", gpu_family="NVIDIA_B200")
    gcp.quotas.set_limit(PREEMPTIBLE, 0, region="us-east4", gpu_family="NVIDIA_B200")
    report = Cluster(**SPEC).check()
    assert report.ok, str(report)
    assert not [i for i in report.items if i.verdict == "unknown"]
    # On demand reads GPUS-PER-GPU-FAMILY; GPUS-ALL-REGIONS on top of both.
    gcp.quotas.set_limit(FAMILY, 8, gpu_family="NVIDIA_B200")
    on_demand = Cluster(**{**SPEC, "spot": False}).check()
    assert [p.what for p in on_demand.problems] == [
        f"{FAMILY} [NVIDIA_B200, us-east1] covers 16 GPUs (2 nodes × 8) for on-demand in us-east1-b"
    ]
    gcp.quotas.set_limit(ALL_REGIONS, 12)
    (global_cap,) = Cluster(**SPEC).check().problems
    assert global_cap.what == f"{ALL_REGIONS} covers 16 GPUs"
    assert f"raise {ALL_REGIONS} to at least 16" in global_cap.fix
    # A project whose Cloud Quotas has no such quota: unknown, not a failure.
    gcp.quotas.drop(PREEMPTIBLE)
    gcp.quotas.drop(ALL_REGIONS)
    unknown = Cluster(**SPEC).check()
    assert unknown.ok
    assert [i.verdict for i in unknown.items if "GPUS" in i.what] == ["unknown", "unknown"]


def test_cloud_quotas_refused_is_unknown_and_says_how_to_enable_it(gcp: FakeGCP) -> None:
    gcp.faults.fail_call(
        "cloudquotas.GetQuotaInfo",
        grpc.StatusCode.PERMISSION_DENIED,
        times=2,
        message="Cloud Quotas API has not been used in project my-project (SERVICE_DISABLED)",
    )
    report = Cluster(**SPEC).check()
    assert report.ok
    family = next(i for i in report.items if i.what.startswith(PREEMPTIBLE))
    assert family.verdict == "unknown"
    assert "gcloud services enable cloudquotas.googleapis.com" in family.fix


def test_legacy_gpu_types_use_compute_region_quotas_and_spot_falls_back_to_on_demand(gcp: FakeGCP) -> None:
    gcp.catalog.drop_quota("us-east1", "PREEMPTIBLE_NVIDIA_L4_GPUS")
    gcp.catalog.set_quota("us-east1", "NVIDIA_L4_GPUS", limit=8)
    (problem,) = Cluster(**L4).check().problems
    assert problem.what.startswith("NVIDIA_L4_GPUS quota in us-east1 covers 16 GPUs")
    assert "raise NVIDIA_L4_GPUS in us-east1 to at least 16" in problem.fix
    assert Cluster(**{**L4, "spot": False}).check().problems[0].what.startswith("NVIDIA_L4_GPUS")
    gcp.catalog.drop_quota("us-east1", "NVIDIA_L4_GPUS")
    unknown = Cluster(**L4).check()
    assert unknown.ok
    assert next(i for i in unknown.items if "L4" in i.what).verdict == "unknown"


def test_a_reservation_is_looked_up_instead_of_the_gpu_quota(gcp: FakeGCP) -> None:
    gcp.quotas.set_limit(FAMILY, 0)
    reserved = {**SPEC, "spot": False, "reservation": "my-a4-reservation"}
    missing = Cluster(**reserved).check()
    assert [p.what for p in missing.problems] == ["reservation my-a4-reservation in us-east1-b holds 2 × a4-highgpu-8g"]
    assert (
        "there is no reservation my-a4-reservation in projects/my-project/zones/us-east1-b"
        in missing.problems[0].detail
    )
    gcp.reservations.add("my-project", "us-east1-b", "my-a4-reservation", "a4-highgpu-8g", count=4, in_use=3)
    short = Cluster(**reserved).check()
    assert short.problems[0].detail == "1 of 4 free"
    assert "--vm-count=5" in short.problems[0].fix
    gcp.reservations.add("my-project", "us-east1-b", "my-a4-reservation", "a4-highgpu-8g", count=4, in_use=1)
    gcp.reservations.add("my-project", "us-east1-c", "elsewhere", "a4-highgpu-8g", count=2)
    ok = Cluster(**reserved).check()
    assert ok.ok, str(ok)
    assert not any(i.what.startswith(FAMILY) for i in ok.items)  # no GPU quota asked for a reservation
    visible = next(i for i in ok.items if i.what.startswith("reservations of a4-highgpu-8g"))
    assert visible.detail == "my-a4-reservation in us-east1-b: 3 of 4 free"  # the candidate zones only


def test_lustre_capacity_quota_per_zone_and_tier(gcp: FakeGCP) -> None:
    from rl_lustre.testing._cloudquotas import LUSTRE_CAPACITY_QUOTA

    volume = LustreVolume(name="v", capacity_gib=36000, throughput_mbps_per_tib=500)
    gcp.quotas.set_limit(LUSTRE_CAPACITY_QUOTA, 18000, zone="us-east1-b", throughput="500")
    gcp.quotas.set_limit(LUSTRE_CAPACITY_QUOTA, 72000, zone="us-east1-b", throughput="1000")
    (problem,) = Cluster(**SPEC, volume=volume).check().problems
    assert problem.what == "Managed Lustre capacity quota in us-east1-b (500 MB/s per TiB) covers 36000 GiB"
    assert "--service=lustre.googleapis.com" in problem.fix
    assert "zone=us-east1-b,throughput=500" in problem.fix
    faster = LustreVolume(name="v", capacity_gib=36000, throughput_mbps_per_tib=1000)
    assert Cluster(**SPEC, volume=faster).check().ok


def test_an_existing_volume_needs_no_lustre_location(gcp: FakeGCP) -> None:
    gcp.catalog.lustre_zones([])
    volume = LustreVolume(name="kept", capacity_gib=18000, existing=True)
    assert Cluster(**SPEC, volume=volume).check().ok
    assert not Cluster(**SPEC).check().ok


def test_up_checks_first_and_creates_nothing_when_the_check_fails(gcp: FakeGCP) -> None:
    gcp.quotas.set_limit(PREEMPTIBLE, 8, region="us-east1", gpu_family="NVIDIA_B200")
    before = len(gcp.requests)
    with pytest.raises(CapacityError, match="nothing was created") as caught:
        Cluster(**SPEC).up()
    assert isinstance(caught.value, QuotaExceededError)
    assert f"raise {PREEMPTIBLE} (region=us-east1, gpu_family=NVIDIA_B200) to at least 16" in str(caught.value)
    assert not caught.value.report.ok
    assert {r.method for r in gcp.requests[before:]} <= READ_ONLY
    assert gcp.leaked() == []


def test_rl_lustre_check_prints_the_report_and_exits_7_on_a_problem(gcp: FakeGCP, tmp_path: Path) -> None:
    script = tmp_path / "deploy.py"
    script.write_text(f"from rl_lustre import Cluster\nc = Cluster(**{SPEC!r})\n")
    ok = CliRunner().invoke(cli, ["check", f"{script}:c"], catch_exceptions=False)
    assert ok.exit_code == 0
    assert ok.stdout.startswith("check of 'chk': ok")
    gcp.catalog.withdraw("us-east1-b", "nvidia-b200")
    bad = CliRunner().invoke(cli, ["check", f"{script}:c", "--json"], catch_exceptions=False)
    assert bad.exit_code == 7
    data = json.loads(bad.stdout)
    assert data["ok"] is False
    assert [i["what"] for i in data["items"] if i["verdict"] == "problem"] == [
        "zone us-east1-b offers GPU type nvidia-b200"
    ]


def test_quota_metric_names() -> None:
    assert quota_metric("nvidia-b200", spot=True) == "PREEMPTIBLE_NVIDIA_B200_GPUS"
    assert quota_metric("nvidia-l4", spot=False) == "NVIDIA_L4_GPUS"
    assert quota_metric("nvidia-tesla-a100", spot=True) == "PREEMPTIBLE_NVIDIA_A100_GPUS"


def test_a_zone_that_does_not_exist_is_refused_offline_naming_the_real_ones() -> None:
    from rl_lustre.errors import ConfigError

    with pytest.raises(ConfigError) as refused:
        Cluster(**{**SPEC, "zone": "us-east1-a"})
    assert refused.value.field == "zone"
    assert "is not a zone of region us-east1, whose zones are us-east1-b, us-east1-c, us-east1-d" in str(refused.value)
    assert "RL_LUSTRE_EXTRA_ZONES=us-east1-a" in str(refused.value)
    with pytest.raises(ConfigError, match="did you mean 'us-east1'"):
        LustreVolume(name="v", zone="us-eats1-b")
    with pytest.raises(ConfigError, match="not a Compute Engine region"):
        Cluster(**{**SPEC, "region": "mars-north1", "zone": "mars-north1-a"})


def test_a_zone_newer_than_the_list_works_when_named_and_the_server_has_it(
    gcp: FakeGCP, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RL_LUSTRE_EXTRA_ZONES", "us-east1-e")
    newer = Cluster(**{**SPEC, "zone": "us-east1-e"})  # accepted offline: the user named it
    gcp.catalog.lustre_zones(["us-east1-e"])
    # The server does not have it (yet): the check says so first, and up() creates nothing.
    report = newer.check()
    assert [(p.what, p.detail) for p in report.problems] == [
        ("zone us-east1-e exists", "Compute Engine has no such zone (404)")
    ]
    assert report.problems[0].fix.startswith("use a zone of us-east1: us-east1-b, us-east1-c, us-east1-d")
    before = len(gcp.requests)
    with pytest.raises(CapacityError):
        newer.up()
    assert {r.method for r in gcp.requests[before:]} <= READ_ONLY
    # Once Compute has it, it is a zone like any other.
    gcp.catalog.add_zone("us-east1-e")
    assert newer.check().ok, str(newer.check())


def test_the_server_has_the_last_word_over_a_zone_rl_lustre_lists(gcp: FakeGCP) -> None:
    gcp.catalog.retire_zone("us-east1-d")
    report = Cluster(**{**SPEC, "zone": "us-east1-d"}).check()
    assert [p.what for p in report.problems] == ["zone us-east1-d exists"]
    # The zone's own questions are not asked of a zone that does not exist; the region's quota is.
    assert not any("offers" in i.what or "Lustre" in i.what for i in report.items)
    assert any(i.what.startswith(PREEMPTIBLE) for i in report.items)


def test_quota_per_capacity_kind_of_the_policy_and_a_short_lane_is_not_a_failure(gcp: FakeGCP) -> None:
    policy = {**SPEC, "capacity": ("spot", "flex-start", "on-demand")}
    gcp.quotas.set_limit(PREEMPTIBLE, 0, region="us-east1", gpu_family="NVIDIA_B200")
    report = Cluster(**policy).check()
    assert report.ok, str(report)  # on-demand still can: up() tries it after the others
    by_id = {i.what.split(" ")[0]: i for i in report.items if "GPUS" in i.what}
    assert by_id[PREEMPTIBLE].what.endswith("for spot, flex-start in us-east1-b")  # flex-start: preemptible quota
    assert by_id[PREEMPTIBLE].verdict == "unknown"
    assert "up() has other lanes to try" in by_id[PREEMPTIBLE].detail
    assert by_id[PREEMPTIBLE].fix.startswith(f"raise {PREEMPTIBLE}")
    assert by_id[FAMILY].verdict == "ok"
    assert by_id[FAMILY].what.endswith("for on-demand in us-east1-b")
    # Every lane short: a problem, each named with its quota.
    gcp.quotas.set_limit(FAMILY, 8, region="us-east1", gpu_family="NVIDIA_B200")
    assert sorted(p.what.split(" ")[0] for p in Cluster(**policy).check().problems) == [FAMILY, PREEMPTIBLE]


def test_region_policy_checks_every_candidate_zone_and_its_reservations(gcp: FakeGCP) -> None:
    gcp.catalog.withdraw("us-east1-d", "nvidia-b200")
    gcp.reservations.add("my-project", "us-east1-c", "a4-c", "a4-highgpu-8g", count=2)
    gcp.reservations.add("my-project", "us-east1-d", "a4-d", "a4-highgpu-8g", count=2)
    gcp.reservations.add("my-project", "us-east1-b", "h200", "a3-ultragpu-8g", count=2)
    report = Cluster(**SPEC, fabric="tcp", capacity_zones="region").check()
    assert report.ok, str(report)
    zones = next(i for i in report.items if i.what.startswith("zones of us-east1 offering"))
    assert zones.detail == "candidates us-east1-b, us-east1-c; us-east1-d lacks the GPU type"
    visible = next(i for i in report.items if i.what.startswith("reservations of a4-highgpu-8g"))
    assert visible.what == "reservations of a4-highgpu-8g in us-east1-b, us-east1-c"
    assert visible.detail == "a4-c in us-east1-c: 2 of 2 free"


def test_a_reservation_shared_from_another_project_is_looked_up_there(gcp: FakeGCP) -> None:
    gcp.reservations.add("other-project", "us-east1-b", "shared", "a4-highgpu-8g", count=2, shared_with=["my-project"])
    spec = {**SPEC, "capacity": (Capacity("reservation", reservation="projects/other-project/reservations/shared"),)}
    report = Cluster(**spec).check()
    assert report.ok, str(report)
    assert "reservation projects/other-project/reservations/shared in us-east1-b holds 2 × a4-highgpu-8g" in str(report)
    missing = {
        **SPEC,
        "capacity": (Capacity("reservation", reservation="projects/other-project/reservations/gone"), "spot"),
    }
    # The reservation lane fails, Spot may pass: unknown, not a problem.
    assert Cluster(**missing).check().ok


def test_gpu_quota_per_kind_names_every_candidate_zone_it_covers(gcp: FakeGCP) -> None:
    # GPU quotas are regional: one item per kind of quota, for every candidate zone of the lanes.
    c = Cluster(**SPEC, fabric="tcp", capacity=("spot", "on-demand"), capacity_zones=("us-east1-b", "us-east1-c"))
    gcp.quotas.set_limit(FAMILY, 8, region="us-east1", gpu_family="NVIDIA_B200")
    items = {i.what.split(" ")[0]: i for i in c.check().items if "GPUS" in i.what}
    assert items[PREEMPTIBLE].what.endswith("for spot in us-east1-b, us-east1-c")
    assert items[PREEMPTIBLE].verdict == "ok"
    assert items[FAMILY].what.endswith("for on-demand in us-east1-b, us-east1-c")
    assert items[FAMILY].verdict == "unknown"
    assert items[FAMILY].fix.startswith(f"raise {FAMILY}")
