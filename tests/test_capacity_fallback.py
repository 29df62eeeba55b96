"""up() on the fakes when GPUs are not there: the capacity policy's lanes in order, what is
kept when none delivers, and nothing of a failed lane left behind."""

from __future__ import annotations

import logging
import shlex

import grpc
import pytest
from helpers.specs import SMALL

from rl_lustre import Cluster
from rl_lustre.backends.gke import GKEBackend
from rl_lustre.errors import ConfigError, NoCapacityError, ProvisioningError
from rl_lustre.testing import FAST_BACKOFF, FAST_RETRY, FakeGCP


def spec(**kw: object) -> Cluster:
    return Cluster(**{**SMALL, **kw})  # type: ignore[arg-type]


def backend(cluster: Cluster, **kw: object) -> GKEBackend:
    return GKEBackend(cluster, gcp_only=True, backoff=FAST_BACKOFF, retry=FAST_RETRY, **kw)  # type: ignore[arg-type]


def pools(gcp: FakeGCP) -> list[str]:
    return sorted(name.rsplit("/", 1)[1] for name in gcp.resources()["gke.nodePools"])


def test_spot_stocked_out_in_the_first_zone_moves_to_the_next(caplog: pytest.LogCaptureFixture) -> None:
    c = spec(capacity=("spot",), capacity_zones=("us-east1-b", "us-east1-c"))
    with FakeGCP() as gcp:
        gcp.stock.out("spot", zone="us-east1-b")
        b = backend(c)
        with caplog.at_level(logging.INFO, logger="rl_lustre.provision.capacity"):
            report = b.up(check=False)
        assert report.records["gpu-pool"].outcome == "created"
        assert "spot in us-east1-c" in (report.records["gpu-pool"].note or "")
        assert pools(gcp) == ["gpu-spot-c", "ray-head-pool"]
        lines = [r.getMessage() for r in caplog.records if r.name == "rl_lustre.provision.capacity"]
        assert any("asking for spot in us-east1-b" in x and "next: spot in us-east1-c" in x for x in lines)
        assert any("spot in us-east1-b: stockout" in x and "GCE_STOCKOUT" in x for x in lines)
        assert any("asking for spot in us-east1-c" in x and "reached across zones" in x for x in lines)
        b.down()
        assert gcp.leaked() == []


def test_a_reservation_that_fits_is_consumed_and_given_back() -> None:
    c = spec(reservation="my-res", capacity=("reservation", "spot"))
    with FakeGCP() as gcp:
        gcp.stock.reservation("my-res", zone="us-east1-b", free=2)
        b = backend(c)
        b.up(check=False)
        assert gcp.stock.free("my-res") == 0
        assert pools(gcp) == ["gpu-pool", "ray-head-pool"]
        b.down()
        assert gcp.stock.free("my-res") == 2


def test_a_full_reservation_falls_back_to_spot() -> None:
    c = spec(reservation="projects/other-proj/reservations/shared", capacity=("reservation", "spot"))
    with FakeGCP() as gcp:
        gcp.stock.reservation("shared", project="other-proj", zone="us-east1-b", free=1)
        b = backend(c)
        report = b.up(check=False)
        assert "spot in us-east1-b" in (report.records["gpu-pool"].note or "")
        assert pools(gcp) == ["gpu-spot-b", "ray-head-pool"]
        b.down()


@pytest.mark.parametrize("keep", ["storage", "nothing"])
def test_no_capacity_anywhere_keeps_what_the_option_says(keep: str) -> None:
    c = spec(capacity=("spot", "on-demand"), capacity_zones=("us-east1-b", "us-east1-c"), on_no_capacity=keep)
    with FakeGCP() as gcp:
        gcp.stock.out("spot")
        gcp.stock.out("on-demand")
        with pytest.raises(NoCapacityError) as info:
            backend(c).up(check=False)
        err = info.value
        assert [(a.label, a.outcome) for a in err.attempts] == [
            ("spot in us-east1-b", "stockout"),
            ("spot in us-east1-c", "stockout"),
            ("on-demand in us-east1-b", "stockout"),
            ("on-demand in us-east1-c", "stockout"),
        ]
        assert all("does not have enough resources" in a.reason for a in err.attempts)
        text = str(err)
        assert "no GPU capacity from any of the 4 lane(s)" in text
        assert f"on_no_capacity={keep!r}" in text
        left = gcp.leaked("demo")
        if keep == "storage":
            assert any(x.startswith("lustre.instances ") for x in left)
            assert not any(x.startswith(("gke.", "compute.subnetworks")) for x in left)
            assert any("lustre" in k for k in err.kept)
            # The next up() adopts the kept volume and network.
            gcp.stock.back("spot")
            report = backend(c).up(check=False)
            assert report.records["lustre"].outcome == "adopted"
            backend(c).down()
        assert gcp.leaked() == []


def test_a_failure_that_is_not_capacity_still_rolls_back() -> None:
    c = spec(capacity=("spot", "flex-start"))
    with FakeGCP() as gcp:
        gcp.faults.fail_operation("gke.CreateNodePool", grpc.StatusCode.INTERNAL, message="internal error", after=0)
        with pytest.raises(ProvisioningError) as info:
            backend(c).up(check=False)
        assert not isinstance(info.value, NoCapacityError)
        assert gcp.leaked() == []


def test_region_without_zone_discovery_is_refused_before_any_call() -> None:
    c = spec(capacity=("spot",), capacity_zones="region")
    with FakeGCP() as gcp:
        try:
            import rl_lustre.gcp.zones  # noqa: F401
        except ImportError:
            with pytest.raises(ConfigError, match="capacity_zones"):
                backend(c).up(check=False)
            assert not gcp.request_counts("gke.")
        seen = []
        b = backend(c, zones=lambda s: seen.append(s) or ("us-east1-c", "us-east1-b"))
        gcp.stock.out("spot", zone="us-east1-b")
        report = b.up(check=False)
        assert "us-east1-c" in (report.records["gpu-pool"].note or "")
        assert seen
        b.down()


def test_flex_start_nodes_granted_give_every_job_a_save_by_deadline() -> None:
    import time

    from rl_lustre import Capacity, GRPOJob
    from rl_lustre.backends.submission import prepare
    from rl_lustre.nemo_rl.deadline import DEADLINE_KEY, SAVE_MARGIN_SECONDS, save_by_text
    from rl_lustre.testing import KubeFake

    c = spec(
        capacity=("spot", Capacity("flex-start", max_run_duration=6 * 3600)),
        prepull_image=False,
        prefetch_models=(),
        secrets=(),
    )
    with KubeFake() as kube, FakeGCP(kube=kube, time_scale=0.01) as gcp:
        gcp.stock.out("spot")
        gcp.stock.flex_start(after=60.0)
        b = GKEBackend(c, backoff=FAST_BACKOFF, retry=FAST_RETRY, time_scale=0.01)
        before = time.time()
        b.up()  # the check first, then spot (out), then flex-start
        after = time.time()
        deadline = b.capacity_deadline()
        assert deadline is not None
        assert before + 6 * 3600 <= deadline.end <= after + 6 * 3600
        sub = prepare(c, GRPOJob(name="run-1", recipe="grpo_math_1B", max_num_steps=4), deadline=deadline, now=after)
        left = deadline.end - SAVE_MARGIN_SECONDS - after
        assert f"{DEADLINE_KEY}={save_by_text(left)}" in sub.entrypoint
        # The flex-start pools (the lane granted, the standby pool beside Spot) name their nodes'
        # prefix from their instance groups: every GPU node the lane brought has one, and the
        # supervisor is given them with their max_run_duration, to work the value out again
        # before every attempt.
        lifetimes = b.capacity_lifetimes()
        assert lifetimes
        assert {seconds for _, seconds in lifetimes} == {6 * 3600.0}
        gpu_nodes = [
            n["metadata"]["name"]
            for n in kube.objects("Node")
            if n["metadata"]["labels"].get("cloud.google.com/gke-nodepool", "").startswith("gpu")
        ]
        assert gpu_nodes
        assert all(any(n.startswith(p) for p, _ in lifetimes) for n in gpu_nodes), (gpu_nodes, lifetimes)
        flagged = prepare(
            c,
            GRPOJob(name="run-1", recipe="grpo_math_1B", max_num_steps=4),
            deadline=deadline,
            lifetimes=lifetimes,
            now=after,
        )
        words = shlex.split(flagged.entrypoint)
        assert [w for w in words if w.startswith("--lifetime=")] == [f"--lifetime={p}={6 * 3600}" for p, _ in lifetimes]
        assert words[words.index("--capacity-end") + 1] == str(round(deadline.end, 3))
        assert words[words.index("--save-margin") + 1] == str(int(SAVE_MARGIN_SECONDS))
        assert flagged.base_id == sub.base_id
        b.down()
        assert gcp.leaked() == []
    # Spot granted: capacity that does not end, no deadline, no lifetimes.
    with FakeGCP() as gcp:
        b = backend(spec(capacity=("spot",)))
        b.up(check=False)
        assert b.capacity_deadline() is None
        assert b.capacity_lifetimes() == ()
        b.down()


@pytest.mark.parametrize(
    "fault", ["next-lane-create-call", "next-lane-operation", "failed-lane-delete", "interrupted-delete-then-rollback"]
)
def test_a_fault_in_a_fallback_step_leaves_nothing_behind_but_the_kept_storage(fault: str) -> None:
    c = spec(capacity=("spot",), capacity_zones=("us-east1-b", "us-east1-c"), on_no_capacity="storage")
    with FakeGCP() as gcp:
        gcp.stock.out("spot", zone="us-east1-b")
        if fault == "next-lane-create-call":
            gcp.faults.fail_call("gke.CreateNodePool", grpc.StatusCode.PERMISSION_DENIED, after=1)
        elif fault == "next-lane-operation":
            gcp.faults.fail_operation("gke.CreateNodePool", grpc.StatusCode.INTERNAL, message="internal error", after=1)
        elif fault == "failed-lane-delete":
            gcp.faults.fail_operation("gke.DeleteNodePool", grpc.StatusCode.INTERNAL, message="internal error")
        else:
            gcp.faults.fail_call("gke.DeleteNodePool", grpc.StatusCode.PERMISSION_DENIED)
        with pytest.raises(ProvisioningError) as info:
            backend(c).up(check=False)
        assert not isinstance(info.value, NoCapacityError)  # not a capacity failure: the whole up() is undone
        gcp.settle()
        # The rollback removed everything, the stocked-out lane's pool included.
        assert gcp.leaked("demo") == []
        assert not info.value.left
        backend(c).down()
        assert gcp.leaked() == []
