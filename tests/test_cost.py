"""Hourly cost of a plan, from the dated price table, with the user's overrides."""

from __future__ import annotations

import json
from pathlib import Path

import attrs
import pytest
from helpers.specs import GKE

from rl_lustre import Cluster, LustreVolume
from rl_lustre.catalog import PRICES, MachinePrice
from rl_lustre.errors import ConfigError
from rl_lustre.prices import Prices
from rl_lustre.ray.jobs import JobInfo
from rl_lustre.run import Run

BASE = Cluster(**GKE)


def test_every_priced_resource_of_the_plan_and_the_total() -> None:
    cost = BASE.plan().cost()
    a4 = PRICES.machines["a4-highgpu-8g"]
    assert [i.key for i in cost.items] == [
        "gpu-pool",
        "cpu-pool",
        "lustre",
        "gke-cluster",
        "node-sa",
        "preload-image",
        "secondary-disks",
    ]
    assert cost.get("node-sa").usd_per_hour == 0
    assert cost.get("gpu-pool").usd_per_hour == pytest.approx(8 * a4.spot)
    assert cost.get("cpu-pool").usd_per_hour == pytest.approx(PRICES.machines["n2-highmem-16"].on_demand)
    # The default volume: what size_lustre picks for the default job (9,000 GiB at 1000 MB/s/TiB).
    assert cost.get("lustre").usd_per_hour == pytest.approx(9_000 * PRICES.lustre_gib_month[1000] / 730)
    assert cost.get("gke-cluster").usd_per_hour == pytest.approx(0.10)
    assert cost.total_usd_per_hour == pytest.approx(sum(i.usd_per_hour or 0 for i in cost.items))
    assert cost.complete
    assert cost.prices_as_of == PRICES.as_of
    assert set(cost.sources) >= {"gpu_machines", "spot", "lustre", "gke"}

    on_demand = attrs.evolve(BASE, spot=False).plan().cost()
    assert on_demand.get("gpu-pool").usd_per_hour == pytest.approx(8 * a4.on_demand)
    reserved = attrs.evolve(BASE, spot=False, reservation="my-res").plan().cost()
    # A reservation without a committed use discount bills at the on-demand rate...
    assert reserved.get("gpu-pool").usd_per_hour == pytest.approx(8 * a4.on_demand)
    # ...unless the user says what it costs them.
    mine = Prices(machines={"a4-highgpu-8g": MachinePrice(on_demand=a4.on_demand, spot=a4.spot, reserved=50.0)})
    assert attrs.evolve(BASE, spot=False, reservation="my-res").plan().cost(mine).get(
        "gpu-pool"
    ).usd_per_hour == pytest.approx(400.0)


def test_lustre_is_priced_by_tier_and_capacity_and_a_volume_you_own_is_not_counted() -> None:
    big = attrs.evolve(BASE, volume=LustreVolume(name="v", capacity_gib=72_000, throughput_mbps_per_tib=125))
    assert big.plan().cost().get("lustre").usd_per_hour == pytest.approx(72_000 * PRICES.lustre_gib_month[125] / 730)
    yours = attrs.evolve(BASE, volume=LustreVolume(name="v", existing=True, capacity_gib=18_000))
    cost = yours.plan().cost()
    assert cost.get("lustre").counted is False
    assert cost.total_usd_per_hour == pytest.approx(
        sum(
            cost.get(k).usd_per_hour
            for k in ("gpu-pool", "cpu-pool", "gke-cluster", "preload-image", "secondary-disks")
        )
    )
    assert "(yours, not counted)" in str(cost)


def test_the_preload_image_is_priced_per_month_it_is_kept_and_the_nodes_secondary_disks_per_hour() -> None:
    cost = BASE.plan().cost()
    image = cost.get("preload-image")
    # The image is made from the builder's 250 GB data disk: that bounds what is stored.
    assert (image.quantity, image.unit) == (250, "GiB")
    assert image.usd_per_hour * 730 == pytest.approx(250 * PRICES.image_gib_month)
    assert "kept after down(): at most $12.50/month" in image.note
    # Building it once: the n2-standard-8 and its pd-ssd for ~16 minutes.
    assert "built once (about $0.12)" in image.note
    disks = cost.get("secondary-disks")
    # Each A4 node gets a copy, of its boot disk type (A4 boots only from Hyperdisk).
    assert disks.description == "8 × 250 GiB hyperdisk-balanced secondary boot disks"
    assert disks.usd_per_hour == pytest.approx(8 * 250 * PRICES.disk_gib_month["hyperdisk-balanced"] / 730)
    assert any("$12.50/month" in n and "gc --preload-images" in n for n in cost.notes)
    # Off: neither; your own image: its storage is yours, not priced.
    off = attrs.evolve(BASE, preload_image=False).plan().cost()
    assert {"preload-image", "secondary-disks"}.isdisjoint(i.key for i in off.items)
    yours = attrs.evolve(BASE, preload_image="global/images/team-nemo").plan().cost()
    assert {"preload-image", "secondary-disks"}.isdisjoint(i.key for i in yours.items)
    assert any("your preload image projects/my-project/global/images/team-nemo" in n for n in yours.notes)


def test_discounts_and_a_region_without_recorded_prices() -> None:
    list_price = BASE.plan().cost()
    cheaper = BASE.plan().cost(Prices(spot_discount=0.5, compute_discount=0.2, lustre_discount=0.1))
    assert cheaper.get("gpu-pool").usd_per_hour == pytest.approx(list_price.get("gpu-pool").usd_per_hour * 0.5)
    assert cheaper.get("cpu-pool").usd_per_hour == pytest.approx(list_price.get("cpu-pool").usd_per_hour * 0.8)
    assert cheaper.get("lustre").usd_per_hour == pytest.approx(list_price.get("lustre").usd_per_hour * 0.9)

    europe = Cluster(**{**GKE, "region": "europe-west4", "zone": "europe-west4-b"}).plan().cost()
    assert europe.get("gpu-pool").note == "no price recorded for europe-west4; us-central1's list price used"


def test_an_unknown_machine_type_makes_the_estimate_incomplete_not_wrong() -> None:
    odd = Cluster(
        **GKE,
        machine_type="x9-gpu-8g",
        accelerator_type="nvidia-l4",
        gpus_per_node=8,
    )
    cost = odd.plan().cost()
    assert cost.get("gpu-pool").usd_per_hour is None
    assert not cost.complete
    assert "incomplete" in str(cost)
    assert cost.total_usd_per_hour == pytest.approx(
        sum(cost.get(k).usd_per_hour for k in ("cpu-pool", "lustre", "gke-cluster", "preload-image", "secondary-disks"))
    )


def test_str_and_to_dict_of_the_plan_show_the_cost() -> None:
    plan = BASE.plan()
    text = str(plan)
    assert f"Cost: ${plan.cost().total_usd_per_hour:,.2f}/hour" in text
    assert "8 × a4-highgpu-8g, Spot" in text
    data = json.loads(json.dumps(plan.to_dict()))
    assert data["cost"]["total_usd_per_hour"] == pytest.approx(plan.cost().total_usd_per_hour, abs=1e-3)
    assert Cluster.local("x", volume_dir="/tmp/v").plan().cost().total_usd_per_hour == 0


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"compute_discount": 1.0}, "compute_discount"),
        ({"spot_discount": -0.1}, "spot_discount"),
        ({"machines": {"a4-highgpu-8g": MachinePrice(on_demand=-1, spot=1)}}, "machines['a4-highgpu-8g']"),
        ({"lustre_gib_month": {500: float("nan")}}, "lustre_gib_month[500]"),
    ],
)
def test_bad_prices_are_config_errors(kwargs: dict, field: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(ConfigError) as info:
        Prices(**kwargs)
    assert info.value.field == field


def test_prices_from_a_file(tmp_path: Path) -> None:
    path = tmp_path / "prices.json"
    path.write_text(
        json.dumps(
            {
                "compute_discount": 0.25,
                "machines": {"a4-highgpu-8g": {"on_demand": 80, "spot": 30}},
                "lustre_gib_month": {"1000": 0.73},
            }
        )
    )
    prices = Prices.from_file(path)
    cost = BASE.plan().cost(prices)
    assert cost.get("gpu-pool").usd_per_hour == pytest.approx(240.0)
    assert cost.get("lustre").usd_per_hour == pytest.approx(9_000 * 0.73 / 730)
    path.write_text(json.dumps({"discount": 0.2}))
    with pytest.raises(ConfigError, match=r"Prices\.discount=0\.2: is not a price field"):
        Prices.from_file(path)
    with pytest.raises(ConfigError, match="must be a readable JSON file"):
        Prices.from_file(tmp_path / "missing.json")


class _Jobs:
    """The one call cost_so_far makes: the Jobs API's record of the job."""

    def __init__(self, info: JobInfo) -> None:
        self.record = info

    def info(self, job_id: str) -> JobInfo:
        return self.record


def test_a_run_reports_the_deployments_cost_while_it_ran() -> None:
    jobs = _Jobs(JobInfo("j", "SUCCEEDED", start_time=1000.0, end_time=1000.0 + 5400))
    run = Run(jobs, "j", usd_per_hour=lambda: 100.0)  # type: ignore[arg-type]
    assert run.cost_so_far() == pytest.approx(150.0)
    jobs.record = JobInfo("j", "PENDING")
    assert run.cost_so_far() == 0.0
    assert Run(jobs, "j").cost_so_far() is None  # type: ignore[arg-type]


def test_flex_start_is_priced_at_its_own_dated_rate_or_says_it_is_not_recorded() -> None:
    from rl_lustre.catalog import FLEX_START_AS_OF
    from rl_lustre.cost import lane_item

    assert FLEX_START_AS_OF
    assert "flex_start" in PRICES.sources
    flex = attrs.evolve(BASE, capacity=("flex-start", "spot"))
    cost = flex.plan().cost()
    gpu = cost.get("gpu-pool")
    a4 = PRICES.machines["a4-highgpu-8g"]
    assert a4.flex_start is not None
    assert a4.spot < a4.flex_start < a4.on_demand
    assert gpu.usd_per_hour == pytest.approx(BASE.num_nodes * a4.flex_start)
    assert gpu.description.endswith("flex-start")
    assert gpu.note == ""
    # Each lane of a policy, priced for plan(): Spot < flex-start < on-demand for A4.
    rates = [lane_item(BASE, p).usd_per_hour for p in ("Spot", "flex-start", "on-demand")]
    assert rates == sorted(rates)
    # A machine without a recorded flex-start rate: the on-demand rate, and the line says so.
    h100 = lane_item(attrs.evolve(BASE, machine_type="a3-highgpu-8g"), "flex-start")
    assert h100.unit_usd_per_hour == pytest.approx(PRICES.machines["a3-highgpu-8g"].on_demand)
    assert h100.note.startswith("no flex-start rate recorded")
    # The user's own rate wins, and is validated.
    mine = Prices(machines={"a3-highgpu-8g": MachinePrice(on_demand=80, spot=20, flex_start=40)})
    assert (
        lane_item(attrs.evolve(BASE, machine_type="a3-highgpu-8g"), "flex-start", prices=mine).unit_usd_per_hour == 40
    )
    with pytest.raises(ConfigError, match="finite price"):
        Prices(machines={"a4-highgpu-8g": MachinePrice(on_demand=80, spot=20, flex_start=-1)})
