"""Whatever pool the GPU nodes come from, the deployment works (issue 34, point 3): what
selects GPU nodes (the image pre-pull DaemonSet, the RayCluster's workers, ...) selects
them by what every GPU pool carries, never by one pool's name."""

from __future__ import annotations

import threading
import time

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


@pytest.mark.xfail(strict=True, reason="issue 34: the pre-pull DaemonSet selects the GPU pool by name (gpu-pool)")
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
