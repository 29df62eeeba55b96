"""The capacity policy on the spec: its lanes, and each kind's node-pool request as the
google-cloud-container protos carry it (offline)."""

from __future__ import annotations

import attrs
import pytest
from google.cloud import container_v1
from helpers import specs

from rl_lustre import Capacity, Cluster
from rl_lustre.errors import ConfigError
from rl_lustre.gcp.container_requests import node_pool_request
from rl_lustre.plan.capacity import capacity_lanes
from rl_lustre.plan.nodepools import gpu_pool

GKE = {**specs.GKE, "fabric": "tcp", "preload_image": False}


def _requests(cluster: Cluster) -> list[container_v1.NodePool]:
    plan = cluster.plan()
    return [
        node_pool_request(plan, "gpu-pool", node=gpu_pool(cluster, {"action": "create"}, lane))
        for lane in capacity_lanes(cluster)
    ]


def _set_fields(msg: object) -> set[str]:
    """The proto fields the request sets, as the wire sees them (unknown names cannot be set)."""
    pb = type(msg).pb(msg)  # type: ignore[attr-defined]
    return {f.name for f, _ in pb.ListFields()}


def test_legacy_fields_map_to_one_kind() -> None:
    assert [c.kind for c in Cluster(**GKE).capacity] == ["spot"]
    assert [c.kind for c in Cluster(**GKE, spot=False).capacity] == ["on-demand"]
    res = Cluster(**GKE, reservation="projects/other-proj/reservations/r1")
    assert [(c.kind, c.reservation, c.shared) for c in res.capacity] == [
        ("reservation", "projects/other-proj/reservations/r1", True)
    ]
    assert res.spot is False
    # Derived again by attrs.evolve from what was given.
    assert [c.kind for c in attrs.evolve(res, reservation=None).capacity] == ["spot"]
    assert Cluster(**GKE, capacity=("flex-start", "spot")).spot is False


def test_on_demand_only_when_listed() -> None:
    c = Cluster(**GKE, capacity=("spot", "flex-start"), capacity_zones=("us-east1-b", "us-east1-c", "us-east1-d"))
    assert "on-demand" not in {lane.kind for lane in capacity_lanes(c)}
    assert [(la.kind, la.zone) for la in capacity_lanes(c)][:4] == [
        ("spot", "us-east1-b"),
        ("spot", "us-east1-c"),
        ("spot", "us-east1-d"),
        ("flex-start", "us-east1-b"),
    ]


def test_capacity_options_are_checked() -> None:
    with pytest.raises(ConfigError, match=r"max_run_duration=864000.*7 days"):
        Capacity("flex-start", max_run_duration=10 * 86400)
    with pytest.raises(ConfigError, match="for kind 'reservation' only"):
        Capacity("spot", reservation="r")
    with pytest.raises(ConfigError, match=r"reservation name"):
        Capacity("reservation", reservation="Projects/x")
    with pytest.raises(ConfigError, match="is for GKE clusters"):
        Cluster.local("x", volume_dir="/tmp/x", capacity=("spot",))


def test_each_kind_gets_googles_node_pool_settings() -> None:
    c = Cluster(
        **GKE,
        num_nodes=8,
        reservation="projects/other-proj/reservations/r1",
        capacity=(
            "reservation",
            "spot",
            "flex-start",
            Capacity("flex-start", queued=False, max_run_duration=86400),
            "on-demand",
        ),
    )
    resv, spot, flex_of_queued, flex, on_demand = _requests(c)
    lanes = capacity_lanes(c)
    queued = node_pool_request(c.plan(), "gpu-pool", node=gpu_pool(c, {"action": "create"}, lanes[2], queued=True))
    affinity = container_v1.ReservationAffinity.Type
    auto = container_v1.NodePoolAutoscaling.LocationPolicy.ANY
    # Reservation: SPECIFIC with the key and the shared reservation's path; its nodes held.
    assert resv.config.reservation_affinity.consume_reservation_type == affinity.SPECIFIC_RESERVATION
    assert resv.config.reservation_affinity.key == "compute.googleapis.com/reservation-name"
    assert list(resv.config.reservation_affinity.values) == ["projects/other-proj/reservations/r1"]
    assert not resv.config.spot
    assert resv.initial_node_count == 8
    assert "autoscaling" not in _set_fields(resv)
    # Spot and on-demand: from 0 to num_nodes, the autoscaler's to fill for the workers.
    assert spot.config.spot
    assert spot.config.reservation_affinity.consume_reservation_type == affinity.NO_RESERVATION
    assert not on_demand.config.spot
    assert not on_demand.config.flex_start
    for pool in (spot, on_demand):
        assert pool.initial_node_count == 0
        assert (pool.autoscaling.enabled, pool.autoscaling.total_min_node_count) == (True, 0)
        assert (pool.autoscaling.total_max_node_count, pool.autoscaling.location_policy) == (8, auto)
        assert pool.management.auto_repair is True
    # Flex-start: from 0, autoscaling ANY, no auto-repair, no reservation, its max_run_duration;
    # a queued kind's rule is the autoscaler's flex-start too, with a queued pool beside it.
    for pool in (flex_of_queued, flex, queued):
        assert pool.config.flex_start
        assert not pool.config.spot
        assert pool.initial_node_count == 0
        assert pool.autoscaling.enabled
        assert pool.autoscaling.total_min_node_count == 0
        assert pool.autoscaling.total_max_node_count == 8
        assert pool.autoscaling.location_policy == auto
        assert pool.management.auto_repair is False
        assert pool.config.reservation_affinity.consume_reservation_type == affinity.NO_RESERVATION
        assert {"flex_start", "reservation_affinity"} <= _set_fields(pool.config)
        assert {"autoscaling", "management"} <= _set_fields(pool)
    assert queued.name == "gpu-flex-b-q"
    assert queued.queued_provisioning.enabled
    assert "queued_provisioning" in _set_fields(queued)
    assert "max_run_duration" not in _set_fields(queued.config)
    assert not flex_of_queued.queued_provisioning.enabled
    assert flex_of_queued.config.max_run_duration.total_seconds() == 7 * 86400
    assert not flex.queued_provisioning.enabled
    assert flex.config.max_run_duration.total_seconds() == 86400
    # Every pool carries the same GPU node settings (GPUs, taint, gVNIC), and joins the class
    # by its label and taint, with the label of its kind.
    kinds = ["reservation", "spot", "flex-start", "flex-start", "on-demand", "flex-start"]
    for pool, kind in zip((resv, spot, flex_of_queued, flex, on_demand, queued), kinds, strict=True):
        assert pool.config.accelerators[0].accelerator_count == 8
        assert pool.config.gvnic.enabled
        assert [(t.key, t.value) for t in pool.config.taints] == [
            ("nvidia.com/gpu", "present"),
            ("cloud.google.com/compute-class", "demo-gpus"),
        ]
        assert dict(pool.config.labels) == {"cloud.google.com/compute-class": "demo-gpus", "rl-lustre/capacity": kind}
    assert len({p.name for p in (resv, spot, flex_of_queued, flex, on_demand, queued)}) == 6


def test_fallback_pools_get_the_preload_disk() -> None:
    c = Cluster(
        **{**GKE, "preload_image": True}, capacity=("spot", "flex-start"), capacity_zones=("us-east1-b", "us-east1-c")
    )
    plan = c.plan()
    for lane in capacity_lanes(c):
        req = node_pool_request(
            plan,
            "gpu-pool",
            node=gpu_pool(c, {"action": "create"}, lane),
            preload_image="projects/my-project/global/images/rlp-x",
        )
        assert [d.disk_image for d in req.config.secondary_boot_disks] == ["projects/my-project/global/images/rlp-x"]
        assert list(req.locations) == [lane.zone]


def test_plan_shows_the_policy() -> None:
    c = Cluster(**GKE, capacity=("spot", "flex-start"), capacity_zones="region")
    plan = c.plan()
    gpu = plan.get("gpu-pool").settings
    assert list(gpu["pools"][:2]) == [
        "gpu-pool: spot in us-east1-b, 0 to 8 nodes (rule 0)",
        "gpu-flex-b: flex-start (queued, 7d) in us-east1-b, 0 to 8 nodes (rule 1); at up() all at once through "
        "a ProvisioningRequest on gpu-flex-b-q",
    ]
    assert "region's other zones" in gpu["pools"][2]
    assert "ComputeClass demo-gpus" in gpu["capacity_policy"]["decided_by"]
    cc = plan.get("compute-class").settings
    assert list(cc["priorities"]) == [
        "gpu-pool: spot in us-east1-b",
        "gpu-flex-b: flex-start (queued, 7d) in us-east1-b",
    ]
    assert cc["when_unsatisfiable"].startswith("DoNotScaleUp")
    assert cc["active_migration"].startswith("off")
    assert "ProvisioningRequest" in cc["queued_flex_start"]
    assert "added at up()" in cc["zones"]
    text = " ".join(str(plan).split())
    assert "cloud.google.com/v1/ComputeClass" in text
    assert "pools: [gpu-pool: spot in us-east1-b" in text


@pytest.mark.parametrize("zones", ["region", ("us-east1-b", "us-east1-c")])
def test_an_rdma_gpu_pool_may_not_move_zones_refused_offline(zones: object) -> None:
    # The RoCE VPC is bound to the home zone's network profile: a lane elsewhere could not
    # attach its RDMA NICs, so the spec refuses it before anything is asked of Google Cloud.
    rdma = {**GKE, "fabric": "rdma", "machine_type": "a4-highgpu-8g"}
    with pytest.raises(ConfigError) as err:
        Cluster(**rdma, capacity_zones=zones)
    assert (err.value.field, err.value.value) == ("capacity_zones", zones)
    assert "'us-east1-b-vpc-roce'" in str(err.value)
    assert "fabric='tcp'" in str(err.value)
    with pytest.raises(ConfigError):  # evolving a valid spec into it is refused too
        attrs.evolve(Cluster(**rdma), capacity_zones=zones)
    assert Cluster(**rdma, capacity_zones=("us-east1-b",)).fabric == "rdma"  # the home zone only: fine
    assert (
        len(capacity_lanes(Cluster(**GKE, capacity_zones=zones if zones != "region" else ("us-east1-b", "us-east1-c"))))
        == 2
    )
