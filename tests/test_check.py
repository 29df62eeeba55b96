"""The online check before spending: read-only questions to the fakes, pass and fail,
on its own (``cluster.check()``, ``rl-lustre check``) and as the first thing ``up()`` does."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from rl_lustre import Cluster, LustreVolume
from rl_lustre.check import quota_metric
from rl_lustre.cli._app import cli
from rl_lustre.errors import CapacityError, QuotaExceededError
from rl_lustre.testing import FakeGCP

SPEC = {"name": "chk", "project": "my-project", "region": "us-east1", "zone": "us-east1-b", "num_nodes": 2}
READ_ONLY = {"compute.zones.get", "compute.machineTypes.get", "compute.acceleratorTypes.get", "compute.regions.get",
             "lustre.ListLocations"}


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeGCP]:
    with FakeGCP() as gcp:
        yield gcp


@pytest.fixture
def gcp(fake: FakeGCP) -> FakeGCP:
    fake.catalog.reset()
    return fake


def test_a_deployment_the_project_can_get_passes_with_read_only_calls(gcp: FakeGCP) -> None:
    before = len(gcp.requests)
    report = Cluster(**SPEC).check()
    assert report.ok, str(report)
    assert [i.verdict for i in report.items] == ["ok"] * 6
    assert report.items[0].what == "zone us-east1-b exists"
    assert "PREEMPTIBLE_NVIDIA_B200_GPUS quota in us-east1 covers 16 GPUs (2 nodes × 8)" in str(report)
    asked = {r.method for r in gcp.requests[before:]}
    assert asked == READ_ONLY


def test_missing_machine_type_lustre_zone_and_quota_are_each_named_with_their_fix(gcp: FakeGCP) -> None:
    gcp.catalog.withdraw("us-east1-b", "a4-highgpu-8g")
    gcp.catalog.lustre_zones(["us-east1-c", "us-central1-a"])
    gcp.catalog.set_quota("us-east1", "PREEMPTIBLE_NVIDIA_B200_GPUS", limit=16, usage=8)
    report = Cluster(**SPEC).check()
    assert not report.ok
    problems = {p.what: p for p in report.problems}
    assert len(problems) == 3
    machine = problems["zone us-east1-b offers machine type a4-highgpu-8g"]
    assert "404" in machine.detail
    lustre = problems["Managed Lustre runs in us-east1-b"]
    assert lustre.fix == "use a zone where it runs (us-east1-c in us-east1)"
    quota = next(p for p in report.problems if p.what.startswith("PREEMPTIBLE_NVIDIA_B200_GPUS"))
    assert quota.detail == "limit 16, 8 in use: 8 free"
    assert quota.fix.startswith("raise PREEMPTIBLE_NVIDIA_B200_GPUS in us-east1 to at least 24")


def test_spot_without_preemptible_quota_counts_against_on_demand_and_names_it(gcp: FakeGCP) -> None:
    gcp.catalog.drop_quota("us-east1", "PREEMPTIBLE_NVIDIA_B200_GPUS")
    gcp.catalog.set_quota("us-east1", "NVIDIA_B200_GPUS", limit=8)
    (problem,) = Cluster(**SPEC).check().problems
    assert problem.what.startswith("NVIDIA_B200_GPUS quota in us-east1 covers 16 GPUs")
    assert "raise NVIDIA_B200_GPUS in us-east1 to at least 16" in problem.fix
    # On demand asks NVIDIA_B200_GPUS; with a reservation the quota is not asked at all.
    assert Cluster(**{**SPEC, "spot": False}).check().problems[0].what.startswith("NVIDIA_B200_GPUS")
    reserved = Cluster(**{**SPEC, "spot": False, "reservation": "my-a4-reservation"}).check()
    assert reserved.ok
    # A region that lists no quota for the GPU family: unknown, not a failure.
    gcp.catalog.drop_quota("us-east1", "NVIDIA_B200_GPUS")
    unknown = Cluster(**SPEC).check()
    assert unknown.ok
    assert unknown.items[-1].verdict == "unknown"


def test_an_existing_volume_needs_no_lustre_location(gcp: FakeGCP) -> None:
    gcp.catalog.lustre_zones([])
    volume = LustreVolume(name="kept", capacity_gib=18000, existing=True)
    assert Cluster(**SPEC, volume=volume).check().ok
    assert not Cluster(**SPEC).check().ok


def test_up_checks_first_and_creates_nothing_when_the_check_fails(gcp: FakeGCP) -> None:
    gcp.catalog.set_quota("us-east1", "PREEMPTIBLE_NVIDIA_B200_GPUS", limit=8)
    before = len(gcp.requests)
    with pytest.raises(CapacityError, match="nothing was created") as caught:
        Cluster(**SPEC).up()
    assert isinstance(caught.value, QuotaExceededError)
    assert "raise PREEMPTIBLE_NVIDIA_B200_GPUS in us-east1 to at least 16" in str(caught.value)
    assert not caught.value.report.ok
    assert {r.method for r in gcp.requests[before:]} <= READ_ONLY
    assert gcp.leaked() == []


def test_rl_lustre_check_prints_the_report_and_exits_7_on_a_problem(gcp: FakeGCP, tmp_path: Path) -> None:
    script = tmp_path / "deploy.py"
    script.write_text("from rl_lustre import Cluster\n"
                      f"c = Cluster(**{SPEC!r})\n")
    ok = CliRunner().invoke(cli, ["check", f"{script}:c"], catch_exceptions=False)
    assert ok.exit_code == 0
    assert ok.stdout.startswith("check of 'chk': ok")
    gcp.catalog.withdraw("us-east1-b", "nvidia-b200")
    bad = CliRunner().invoke(cli, ["check", f"{script}:c", "--json"], catch_exceptions=False)
    assert bad.exit_code == 7
    data = json.loads(bad.stdout)
    assert data["ok"] is False
    assert [i["what"] for i in data["items"] if i["verdict"] == "problem"] == ["zone us-east1-b offers GPU type nvidia-b200"]


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
        gcp: FakeGCP, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RL_LUSTRE_EXTRA_ZONES", "us-east1-e")
    newer = Cluster(**{**SPEC, "zone": "us-east1-e"})   # accepted offline: the user named it
    gcp.catalog.lustre_zones(["us-east1-e"])
    # The server does not have it (yet): the check says so first, and up() creates nothing.
    report = newer.check()
    assert [(p.what, p.detail) for p in report.problems] == [
        ("zone us-east1-e exists", "Compute Engine has no such zone (404)")]
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
    assert any("quota" in i.what for i in report.items)
