"""up() on the fakes when GPUs are not there: every pool of the policy made, the first nodes
from the ComputeClass's rules in order (GKE's cluster autoscaler falling back on a
stock-out), a queued flex-start kind asked through a ProvisioningRequest between them, what
is kept when nothing delivers, and nothing of a failed attempt left behind."""

from __future__ import annotations

import logging
import shlex
import threading
import time

import grpc
import pytest
from helpers.specs import SMALL

from rl_lustre import Capacity, Cluster
from rl_lustre.backends.gke import GKEBackend
from rl_lustre.catalog import COMPUTE_CLASS_LABEL, GKE_NODEPOOL_LABEL, GKE_TERMINATION_ANNOTATION
from rl_lustre.errors import ConfigError, NoCapacityError, ProvisioningError
from rl_lustre.kube.readiness import termination_end
from rl_lustre.provision.scaleup import PROBE_COMPONENT
from rl_lustre.testing import FAST_BACKOFF, FAST_RETRY, FakeGCP, KubeFake
from rl_lustre.testing.kube import KubeTimings

BASE: dict[str, object] = {**SMALL, "prepull_image": False, "prefetch_models": (), "secrets": ()}


def spec(**kw: object) -> Cluster:
    return Cluster(**{**BASE, **kw})  # type: ignore[arg-type]


def backend(cluster: Cluster, **kw: object) -> GKEBackend:
    return GKEBackend(cluster, backoff=FAST_BACKOFF, retry=FAST_RETRY, **kw)  # type: ignore[arg-type]


def pools(gcp: FakeGCP) -> list[str]:
    return sorted(name.rsplit("/", 1)[1] for name in gcp.resources()["gke.nodePools"])


def gpu_nodes(kube: KubeFake) -> dict[str, str]:
    """GPU node -> its pool."""
    return {
        n["metadata"]["name"]: n["metadata"]["labels"][GKE_NODEPOOL_LABEL]
        for n in kube.objects("Node")
        if COMPUTE_CLASS_LABEL in n["metadata"]["labels"]
    }


def lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name in ("rl_lustre.provision.capacity", "rl_lustre.gcp.wait")]


def probes(kube: KubeFake) -> list[str]:
    return [
        p["metadata"]["name"]
        for p in kube.objects("Pod")
        if (p["metadata"].get("labels") or {}).get("app.kubernetes.io/component") == PROBE_COMPONENT
    ]


def test_spot_out_in_the_first_zone_the_class_brings_the_next(caplog: pytest.LogCaptureFixture) -> None:
    c = spec(capacity=("spot",), capacity_zones=("us-east1-b", "us-east1-c"))
    with KubeFake() as kube, FakeGCP(kube=kube) as gcp:
        gcp.stock.out("spot", zone="us-east1-b")
        b = backend(c)
        with caplog.at_level(logging.INFO):
            report = b.up(check=False)
        assert report.records["gpu-pool"].outcome == "created"
        assert (report.records["gpu-pool"].note or "").startswith("spot in us-east1-c")
        # Every pool of the policy exists (each a rule of the class); the nodes came from the second.
        assert pools(gcp) == ["gpu-pool", "gpu-spot-c", "ray-head-pool"]
        assert set(gpu_nodes(kube).values()) == {"gpu-spot-c"}
        [cc] = kube.objects("ComputeClass")
        assert [r["nodepools"] for r in cc["spec"]["priorities"]] == [["gpu-pool"], ["gpu-spot-c"]]
        # GKE moved on at once: the stock-out is the autoscaler's FailedScaleUp on a probe.
        assert any(
            "GCE out of resources" in e["message"] for e in kube.objects("Event") if e["reason"] == "FailedScaleUp"
        )
        said = lines(caplog)
        assert any(
            "asking the cluster autoscaler for 2 nodes from spot in us-east1-b, spot in us-east1-c" in x for x in said
        )
        assert any("got 2 nodes: spot in us-east1-c" in x for x in said)
        # The Ray workers took the probes' nodes.
        assert probes(kube) == []
        b.down()
        assert gcp.leaked() == []
        assert kube.objects("ComputeClass") == []


def test_a_reservation_that_fits_holds_its_nodes_and_gives_them_back() -> None:
    c = spec(reservation="my-res", capacity=("reservation", "spot"))
    with KubeFake() as kube, FakeGCP(kube=kube) as gcp:
        gcp.stock.reservation("my-res", zone="us-east1-b", free=2)
        b = backend(c)
        report = b.up(check=False)
        assert (report.records["gpu-pool"].note or "").startswith("reservation my-res in us-east1-b")
        assert gcp.stock.free("my-res") == 0
        assert pools(gcp) == ["gpu-pool", "gpu-spot-b", "ray-head-pool"]
        assert set(gpu_nodes(kube).values()) == {"gpu-pool"}
        b.down()
        assert gcp.stock.free("my-res") == 2


def test_a_full_reservation_is_dropped_and_spot_comes(caplog: pytest.LogCaptureFixture) -> None:
    c = spec(reservation="projects/other-proj/reservations/shared", capacity=("reservation", "spot"))
    with KubeFake() as kube, FakeGCP(kube=kube) as gcp:
        gcp.stock.reservation("shared", project="other-proj", zone="us-east1-b", free=1)
        b = backend(c)
        with caplog.at_level(logging.INFO):
            report = b.up(check=False)
        assert (report.records["gpu-pool"].note or "").startswith("spot in us-east1-b")
        # The reservation's pool could not hold its nodes: an attempt, and the pool is gone.
        assert pools(gcp) == ["gpu-spot-b", "ray-head-pool"]
        assert any(
            "reservation projects/other-proj/reservations/shared in us-east1-b: reservation" in x for x in lines(caplog)
        )
        assert set(gpu_nodes(kube).values()) == {"gpu-spot-b"}
        b.down()
        assert gcp.leaked() == []


@pytest.mark.parametrize("keep", ["storage", "nothing"])
def test_no_capacity_anywhere_keeps_what_the_option_says(keep: str) -> None:
    c = spec(capacity=("spot", "on-demand"), capacity_zones=("us-east1-b", "us-east1-c"), on_no_capacity=keep)
    with KubeFake() as kube, FakeGCP(kube=kube) as gcp:
        gcp.stock.out("spot")
        gcp.stock.out("on-demand")
        started = time.monotonic()
        with pytest.raises(NoCapacityError) as info:
            backend(c).up(check=False)
        # Not the 4 x 900 s of the policy's waits: the autoscaler said it had nothing left to try.
        assert time.monotonic() - started < 60
        err = info.value
        [attempt] = err.attempts
        assert attempt.label == (
            "ComputeClass demo-gpus: spot in us-east1-b, spot in us-east1-c, on-demand in us-east1-b, "
            "on-demand in us-east1-c"
        )
        assert attempt.outcome == "backoff"
        assert "in backoff after failed scale-up" in attempt.reason
        text = str(err)
        assert "no GPU capacity from the 4 pool(s) of the policy" in text
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


def test_a_queued_flex_start_kind_is_asked_between_the_rules_before_and_after_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    c = spec(capacity=("spot", "flex-start", "on-demand"))
    with KubeFake() as kube, FakeGCP(kube=kube) as gcp:
        gcp.stock.out("spot")
        b = backend(c)
        with caplog.at_level(logging.INFO):
            report = b.up(check=False)
        # Spot out: every node at once through the request, on the queued pool beside the class;
        # on-demand (after flex-start in the policy) was never asked.
        assert (report.records["gpu-pool"].note or "").startswith("flex-start (queued, 7d) in us-east1-b")
        assert set(gpu_nodes(kube).values()) == {"gpu-flex-b-q"}
        assert not [e for e in gcp.stock.events if e.kind == "on-demand"]
        assert "gpu-flex-b-q" in pools(gcp)
        [pr] = kube.objects("ProvisioningRequest")
        assert pr["spec"]["podSets"][0]["count"] == 2
        # Once up() is through, the whole policy is the class's: the flex-start kind's rule is
        # the autoscaler's flex-start (node by node), then on-demand.
        [cc] = kube.objects("ComputeClass")
        assert [r["nodepools"] for r in cc["spec"]["priorities"]] == [["gpu-pool"], ["gpu-flex-b"], ["gpu-ondemand-b"]]
        b.down()
        assert gcp.leaked() == []
    with KubeFake() as kube, FakeGCP(kube=kube) as gcp:
        gcp.stock.out("spot")
        gcp.stock.flex_start(fail="Resize request failed: out of stock")
        b = backend(c)
        with caplog.at_level(logging.INFO):
            report = b.up(check=False)
        # The request failed: its pool is gone, and the rules after flex-start join the class.
        assert (report.records["gpu-pool"].note or "").startswith("on-demand in us-east1-b")
        assert set(gpu_nodes(kube).values()) == {"gpu-ondemand-b"}
        assert "gpu-flex-b-q" not in pools(gcp)
        assert kube.objects("ProvisioningRequest") == []
        b.down()
        assert gcp.leaked() == []


def test_unqueued_flex_start_waits_for_gke_then_the_next_rule() -> None:
    c = spec(capacity=(Capacity("flex-start", queued=False, wait=120), "on-demand"))
    # A second of the fakes' is 0.01 s: the autoscaler's minute is 0.6 s.
    with KubeFake(timings=KubeTimings(minute=0.6)) as kube, FakeGCP(kube=kube, time_scale=0.01) as gcp:
        gcp.stock.flex_start(after=None)  # Dynamic Workload Scheduler never finds it
        b = backend(c, time_scale=0.01)
        report = b.up(check=False)
        # GKE waited capacityCheckWaitTimeSeconds (the kind's wait) in flex-start's queue, then on-demand.
        assert (report.records["gpu-pool"].note or "").startswith("on-demand in us-east1-b")
        [cc] = kube.objects("ComputeClass")
        assert cc["spec"]["priorities"][0] == {"nodepools": ["gpu-pool"], "capacityCheckWaitTimeSeconds": 120}
        b.down()


def test_a_busy_fake_google_cloud_is_no_stockout(caplog: pytest.LogCaptureFixture) -> None:
    """While a GKE change holds FakeGCP's lock, the autoscaler's question about capacity gets no
    answer (the fake never blocks its Kubernetes loop on that lock): it says nothing and asks
    again, never a FailedScaleUp for a stock-out the fake's stock never had."""
    c = spec(capacity=(Capacity("flex-start", queued=False), "on-demand"))
    with KubeFake() as kube, FakeGCP(kube=kube) as gcp:
        real, contended = kube.autoscaling, []

        def busy_at_first(pool: str, count: int, asked_at: float) -> object:
            if len(contended) >= 3:
                return real(pool, count, asked_at)
            contended.append(pool)
            held, done = threading.Event(), threading.Event()

            def hold() -> None:
                with gcp._core.lock:
                    held.set()
                    done.wait(5)

            holder = threading.Thread(target=hold)
            holder.start()
            held.wait(5)
            try:
                return real(pool, count, asked_at)
            finally:
                done.set()
                holder.join()

        kube.autoscaling = busy_at_first
        b = backend(c)
        report = b.up(check=False)
        assert contended == ["gpu-pool"] * 3
        assert (report.records["gpu-pool"].note or "").startswith("flex-start (7d) in us-east1-b")
        assert not [e for e in kube.objects("Event") if e.get("reason") == "FailedScaleUp"]
        b.down()
        assert gcp.leaked() == []


def test_a_failure_that_is_not_capacity_still_rolls_back() -> None:
    c = spec(capacity=("spot", "flex-start"), capacity_zones=("us-east1-b", "us-east1-c"))
    with KubeFake() as kube, FakeGCP(kube=kube) as gcp:
        # One of the four pools made in parallel fails to be created.
        gcp.faults.fail_operation("gke.CreateNodePool", grpc.StatusCode.INTERNAL, message="internal error", after=2)
        with pytest.raises(ProvisioningError) as info:
            backend(c).up(check=False)
        assert not isinstance(info.value, NoCapacityError)
        gcp.settle()
        assert gcp.leaked() == []


def test_region_without_zone_discovery_is_refused_before_any_call() -> None:
    c = spec(capacity=("spot",), capacity_zones="region")
    with KubeFake() as kube, FakeGCP(kube=kube) as gcp:
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
        # The class applied names the pools of the zones found at up().
        [cc] = kube.objects("ComputeClass")
        assert [r["nodepools"] for r in cc["spec"]["priorities"]] == [["gpu-pool"], ["gpu-spot-c"]]
        b.down()


def test_without_the_kubernetes_part_only_the_pools_are_made() -> None:
    c = spec(capacity=("spot", "on-demand"))
    with FakeGCP() as gcp:
        b = GKEBackend(c, gcp_only=True, backoff=FAST_BACKOFF, retry=FAST_RETRY)
        report = b.up(check=False)
        assert pools(gcp) == ["gpu-ondemand-b", "gpu-pool", "ray-head-pool"]
        assert "the cluster autoscaler brings nodes when pods ask for them" in (report.records["gpu-pool"].note or "")
        b.down()
        assert gcp.leaked() == []


def test_flex_start_nodes_granted_give_every_job_a_save_by_deadline() -> None:
    from rl_lustre import GRPOJob
    from rl_lustre.backends.submission import prepare
    from rl_lustre.nemo_rl.deadline import DEADLINE_KEY, SAVE_MARGIN_SECONDS, save_by_text

    c = spec(capacity=("spot", Capacity("flex-start", max_run_duration=6 * 3600)))
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
        # Read from the nodes where GKE gives it (their termination annotation, whole seconds),
        # not computed from when up() saw them arrive.
        flex = [n for n in kube.objects("Node") if n["metadata"]["name"] in gpu_nodes(kube)]
        assert all(GKE_TERMINATION_ANNOTATION in n["metadata"].get("annotations", {}) for n in flex)
        assert deadline.end == termination_end(flex)
        sub = prepare(c, GRPOJob(name="run-1", recipe="grpo_math_1B", max_num_steps=4), deadline=deadline, now=after)
        left = deadline.end - SAVE_MARGIN_SECONDS - after
        assert f"{DEADLINE_KEY}={save_by_text(left)}" in sub.entrypoint
        # The flex-start pools (the class's rule, the queued pool) name their nodes' prefix from
        # their instance groups: every GPU node up() brought has one, and the supervisor is given
        # them with their max_run_duration, to work the value out again before every attempt.
        lifetimes = b.capacity_lifetimes()
        assert lifetimes
        assert {seconds for _, seconds in lifetimes} == {6 * 3600.0}
        nodes = list(gpu_nodes(kube))
        assert nodes
        assert all(any(n.startswith(p) for p, _ in lifetimes) for n in nodes), (nodes, lifetimes)
        flagged = prepare(
            c,
            GRPOJob(name="run-1", recipe="grpo_math_1B", max_num_steps=4),
            deadline=deadline,
            lifetimes=lifetimes,
            now=after,
        )
        words = shlex.split(flagged.entrypoint)
        assert [w for w in words if w.startswith("--lifetime=")] == [f"--lifetime={p}={6 * 3600}" for p, _ in lifetimes]
        assert float(words[words.index("--capacity-end") + 1]) == round(deadline.end, 3)
        assert words[words.index("--save-margin") + 1] == str(int(SAVE_MARGIN_SECONDS))
        assert flagged.base_id == sub.base_id
        b.down()
        assert gcp.leaked() == []
    # Spot granted: capacity that does not end, no deadline, no lifetimes.
    with KubeFake() as kube, FakeGCP(kube=kube) as gcp:
        b = backend(spec(capacity=("spot",)))
        b.up(check=False)
        assert b.capacity_deadline() is None
        assert b.capacity_lifetimes() == ()
        b.down()
