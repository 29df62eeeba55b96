"""Whatever pool the GPU nodes come from, the deployment works (issue 34, point 3): what
selects GPU nodes (the image pre-pull DaemonSet, the RayCluster's workers, ...) selects
them by what every GPU pool carries, never by one pool's name."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from rl_lustre import Cluster
from rl_lustre.backends.gke import GKEBackend
from rl_lustre.gcp import Backoff, RetryPolicy
from rl_lustre.testing import FakeGCP, KubeFake

FAST = Backoff(initial=0.005, maximum=0.05, multiplier=1.5)
RETRY = RetryPolicy(attempts=3, initial=0.005, maximum=0.01)
# Far longer than up() takes on the fakes (a few seconds), far shorter than its own
# Kubernetes timeout (30 minutes): an up() still running by then is stuck.
PATIENCE = 60.0


def test_spot_granted_in_another_zone_of_the_region_and_up_finishes() -> None:
    """As a user tried it: Spot out in the cluster's zone, the GPUs come up in the next zone of
    the region (another pool than ``gpu-pool``), and ``up()`` must still finish."""
    c = Cluster(
        name="demo",
        project="my-project",
        region="us-east1",
        zone="us-east1-b",
        num_nodes=2,
        capacity=("spot",),
        capacity_zones="region",
        fabric="tcp",
        preload_image=False,
        prefetch_models=(),
        secrets=(),
    )
    with KubeFake() as kube, FakeGCP(kube=kube) as gcp:
        gcp.stock.out("spot", zone="us-east1-b")
        backend = GKEBackend(c, backoff=FAST, retry=RETRY, zones=lambda spec: ("us-east1-b", "us-east1-c"))
        outcome: dict[str, object] = {}

        def up() -> None:
            try:
                outcome["report"] = backend.up(check=False)
            except BaseException as exc:  # reported below
                outcome["error"] = exc

        thread = threading.Thread(target=up, daemon=True)
        started = time.monotonic()
        thread.start()
        thread.join(PATIENCE)
        assert not thread.is_alive(), f"up() still running after {time.monotonic() - started:.0f}s"
        assert "error" not in outcome, outcome.get("error")
        gpu_nodes = [n for n in kube.objects("Node") if "nvidia.com/gpu" in n["status"]["allocatable"]]
        assert {n["metadata"]["labels"]["topology.kubernetes.io/zone"] for n in gpu_nodes} == {"us-east1-c"}
        backend.down()
        assert gcp.leaked() == []


def _reservation(gcp: FakeGCP) -> None:
    gcp.stock.reservation("r", zone="us-east1-b", free=2)


def _spot_out_in_b(gcp: FakeGCP) -> None:
    gcp.stock.out("spot", zone="us-east1-b")


def _spot_out(gcp: FakeGCP) -> None:
    gcp.stock.out("spot")


def _spot_out_on_demand_out_in_b(gcp: FakeGCP) -> None:
    gcp.stock.out("spot")
    gcp.stock.out("on-demand", zone="us-east1-b")


@pytest.mark.parametrize(
    ("policy", "stock", "kind", "zone", "preload"),
    [
        (("reservation", "spot"), _reservation, "reservation", "us-east1-b", True),
        (("spot", "on-demand"), _spot_out_in_b, "spot", "us-east1-c", True),
        (("spot", "flex-start"), _spot_out, "flex-start", "us-east1-b", False),
        (("spot", "on-demand"), _spot_out_on_demand_out_in_b, "on-demand", "us-east1-c", True),
    ],
    ids=["reservation-b-preload", "spot-c-preload", "flex-start-b", "on-demand-c-preload"],
)
def test_the_gpus_of_each_kind_and_zone_run_the_workers_and_up_finishes(
    policy: tuple[str, ...], stock: Any, kind: str, zone: str, preload: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """Whichever kind and zone of the policy brings the GPUs, with the image preloaded on them
    or pulled (the pre-pull DaemonSet then), ``up()`` finishes and the Ray workers run there."""
    c = Cluster(
        name="demo",
        project="my-project",
        region="us-east1",
        zone="us-east1-b",
        num_nodes=2,
        capacity=policy,
        capacity_zones=("us-east1-b", "us-east1-c"),
        reservation="r" if "reservation" in policy else None,
        fabric="tcp",
        preload_image=preload,
        prefetch_models=(),
        secrets=(),
    )
    with KubeFake() as kube, FakeGCP(kube=kube) as gcp:
        stock(gcp)
        backend = GKEBackend(c, backoff=FAST, retry=RETRY)
        report = backend.up(check=False)
        assert report.get("gpu-pool").note.startswith(kind)
        nodes = {n["metadata"]["name"]: n["metadata"]["labels"] for n in kube.objects("Node")}
        workers = [
            p["spec"]["nodeName"]
            for p in kube.objects("Pod")
            if p["metadata"].get("labels", {}).get("ray.io/node-type") == "worker" and p["spec"].get("nodeName")
        ]
        assert len(workers) == 2
        assert {nodes[w]["rl-lustre/capacity"] for w in workers} == {kind}
        assert {nodes[w]["topology.kubernetes.io/zone"] for w in workers} == {zone}
        assert {nodes[w]["cloud.google.com/compute-class"] for w in workers} == {"demo-gpus"}
        # The costliest fallback is said loudly.
        loud = [r for r in caplog.records if "ON-DEMAND FALLBACK" in r.getMessage() and r.levelname == "WARNING"]
        assert bool(loud) == (kind == "on-demand")
        backend.down()
        assert gcp.leaked() == []
