"""up() on FakeGCP + KubeFake with flex-start lanes without queued provisioning: the pool is
autoscaled from 0, so up() has the cluster autoscaler bring its nodes (capacity probes) and
ends the lane on the autoscaler's FailedScaleUp or the lane's wait."""

from __future__ import annotations

import logging
import time

import pytest
from helpers.specs import SMALL

from rl_lustre import Capacity, Cluster
from rl_lustre.backends.gke import GKEBackend
from rl_lustre.catalog import GKE_NODEPOOL_LABEL
from rl_lustre.provision.scaleup import PROBE_COMPONENT
from rl_lustre.testing import FAST_BACKOFF, FAST_RETRY, FakeGCP, KubeFake

BASE: dict[str, object] = {
    **SMALL,
    "prepull_image": False,
    "prefetch_models": (),
    "secrets": (),
}


def _backend(c: Cluster) -> GKEBackend:
    return GKEBackend(c, backoff=FAST_BACKOFF, retry=FAST_RETRY)


def _lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name in ("rl_lustre.provision.capacity", "rl_lustre.gcp.wait")]


def _probes(kube: KubeFake) -> list[str]:
    return [
        p["metadata"]["name"]
        for p in kube.objects("Pod")
        if (p["metadata"].get("labels") or {}).get("app.kubernetes.io/component") == PROBE_COMPONENT
    ]


def test_failed_scale_up_is_a_stockout_and_up_moves_to_the_next_zone(caplog: pytest.LogCaptureFixture) -> None:
    c = Cluster(
        **BASE,
        capacity=(Capacity("flex-start", queued=False),),  # type: ignore[arg-type]
        capacity_zones=("us-east1-b", "us-east1-c"),
    )
    with KubeFake() as kube, FakeGCP(kube=kube) as gcp:
        gcp.stock.flex_start(zone="us-east1-b", fail="out of stock")  # the autoscaler: FailedScaleUp
        gcp.stock.flex_start(zone="us-east1-c", after=0.0)
        b = _backend(c)
        with caplog.at_level(logging.DEBUG):
            report = b.up(check=False)
        assert "in us-east1-c" in (report.records["gpu-pool"].note or "")
        assert report.records["raycluster"].outcome == "created"
        lines = _lines(caplog)
        ended = [x for x in lines if "in us-east1-b: stockout" in x]
        assert ended
        assert "FailedScaleUp" in ended[0]
        assert "GCE out of resources" in ended[0]
        # Within 2 minutes of the signal (fake seconds): the first failed scale-up to the next pool's request.
        failed = min(e.at for e in gcp.stock.events if e.what == "failed" and e.zone == "us-east1-b")
        creates = [r.time for r in gcp.requests if r.method == "gke.CreateNodePool" and r.time >= failed]
        assert creates
        assert creates[0] - failed < 120
        nodes = {n["metadata"]["labels"].get(GKE_NODEPOOL_LABEL) for n in kube.objects("Node")}
        assert "gpu-flex-c" in nodes
        assert "gpu-pool" not in nodes
        assert _probes(kube) == []  # the probes are gone
        b.down()
        assert gcp.leaked() == []


def test_unqueued_flex_start_waits_for_its_nodes_and_a_timeout_is_a_failed_attempt(
    caplog: pytest.LogCaptureFixture,
) -> None:
    flex = Capacity("flex-start", queued=False, wait=1.5)
    c = Cluster(**BASE, capacity=(flex, "on-demand"))  # type: ignore[arg-type]
    with KubeFake() as kube, FakeGCP(kube=kube) as gcp:
        # The autoscaler has asked for the nodes (no FailedScaleUp), and they never come.
        kube.autoscaling = lambda pool, count, asked_at: ("wait", "Waiting for resources.", [])
        b = _backend(c)
        with caplog.at_level(logging.DEBUG):
            report = b.up(check=False)
        assert "on-demand in us-east1-b" in (report.records["gpu-pool"].note or "")
        lines = _lines(caplog)
        assert any(
            "0/2 nodes Ready, waiting since" in x and "cluster autoscaler to scale up pool gpu-pool" in x for x in lines
        )
        assert any(
            "flex-start (7d) in us-east1-b: timeout" in x and "0 of 2 nodes within its wait of 1.5s" in x for x in lines
        )
        assert _probes(kube) == []
        b.down()
        assert gcp.leaked() == []


def test_unqueued_flex_start_granted_after_a_delay_is_waited_for(caplog: pytest.LogCaptureFixture) -> None:
    c = Cluster(**BASE, capacity=(Capacity("flex-start", queued=False),))  # type: ignore[arg-type]
    with KubeFake() as kube, FakeGCP(kube=kube) as gcp:
        grant, asked = kube.autoscaling, time.monotonic()
        # The scale-up is in flight for a second (no FailedScaleUp), then the nodes come.
        kube.autoscaling = lambda pool, count, at: (
            grant(pool, count, at) if time.monotonic() - asked > 1.0 else ("wait", "Waiting for resources.", [])
        )
        b = _backend(c)
        with caplog.at_level(logging.DEBUG):
            report = b.up(check=False)
        pool = report.records["gpu-pool"]
        # gpu-pool ended only once its nodes were Ready: it took the second the scale-up did.
        assert pool.outcome == "created"
        assert pool.finished - pool.started >= 0.5
        assert any("0/2 nodes Ready, waiting since" in x for x in _lines(caplog))
        assert (
            len([n for n in kube.objects("Node") if n["metadata"]["labels"].get(GKE_NODEPOOL_LABEL) == "gpu-pool"]) == 2
        )
        b.down()
        assert gcp.leaked() == []


def test_a_busy_fake_google_cloud_is_no_stockout_of_the_flex_start_lane(caplog: pytest.LogCaptureFixture) -> None:
    """While a GKE change holds FakeGCP's lock, the autoscaler's question about flex-start capacity
    gets no answer (the fake never blocks its Kubernetes loop on that lock): it says nothing and
    asks again. It used to write FailedScaleUp "GCE out of resources" on the probes, a stock-out
    the fake's stock (granting at once) never had, and up() left the lane for on-demand."""
    import threading

    c = Cluster(**BASE, capacity=(Capacity("flex-start", queued=False), "on-demand"))  # type: ignore[arg-type]
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
        b = _backend(c)
        with caplog.at_level(logging.DEBUG):
            report = b.up(check=False)
        assert contended == ["gpu-pool"] * 3
        assert report.records["gpu-pool"].outcome == "created"
        assert "on-demand" not in (report.records["gpu-pool"].note or "")
        assert not [x for x in _lines(caplog) if ": stockout" in x]
        assert not [e for e in kube.objects("Event") if e.get("reason") == "FailedScaleUp"]
        assert (
            len([n for n in kube.objects("Node") if n["metadata"]["labels"].get(GKE_NODEPOOL_LABEL) == "gpu-pool"]) == 2
        )
        b.down()
        assert gcp.leaked() == []
