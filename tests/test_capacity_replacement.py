"""After a preemption: lost Spot nodes that do not come back are replaced from the policy's
flex-start standby pool, so the Ray workers (and the run's supervisor) have GPUs again."""

from __future__ import annotations

import time

from helpers.specs import SMALL

from rl_lustre import Cluster, naming
from rl_lustre.backends.gke import GKEBackend
from rl_lustre.catalog import GKE_NODEPOOL_LABEL, GKE_SPOT_LABEL
from rl_lustre.testing import FAST_BACKOFF, FAST_RETRY, FakeGCP, KubeFake


def _workers_on(kube: KubeFake, raycluster: str) -> dict[str, str]:
    """Ready worker pods -> the pool of their node."""
    pools = {n["metadata"]["name"]: n["metadata"]["labels"].get(GKE_NODEPOOL_LABEL) for n in kube.objects("Node")}
    out = {}
    for p in kube.objects("Pod"):
        labels = p["metadata"].get("labels") or {}
        ready = any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in (p.get("status") or {}).get("conditions") or []
        )
        if labels.get("ray.io/cluster") == raycluster and labels.get("ray.io/node-type") == "worker" and ready:
            out[p["metadata"]["name"]] = pools.get(p["spec"].get("nodeName", ""), "")
    return out


def test_lost_spot_nodes_are_replaced_from_the_flex_start_standby_pool() -> None:
    c = Cluster(
        **SMALL,
        prepull_image=False,
        prefetch_models=(),
        secrets=(),
        capacity=("spot", "flex-start"),
    )
    assert [r.key for r in c.plan() if r.key.startswith("gpu-")] == ["gpu-pool", "gpu-standby"]
    with KubeFake() as kube, FakeGCP(kube=kube) as gcp:
        gcp.stock.flex_start(after=0.2)
        backend = GKEBackend(c, backoff=FAST_BACKOFF, retry=FAST_RETRY)
        report = backend.up(check=False)
        assert report.records["gpu-standby"].outcome == "created"
        name = naming.raycluster_name(c)
        # Both workers on the Spot pool; the standby pool has no node (it costs nothing).
        assert sorted(_workers_on(kube, name).values()) == ["gpu-pool", "gpu-pool"]
        assert not [n for n in kube.objects("Node") if n["metadata"]["labels"].get(GKE_NODEPOOL_LABEL) == "gpu-standby"]
        kube.preempt(name, nodes=2, back_after=None)  # Spot does not come back
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            on = _workers_on(kube, name)
            if len(on) == 2 and set(on.values()) == {"gpu-standby"}:
                break
            time.sleep(0.2)
        assert sorted(_workers_on(kube, name).values()) == ["gpu-standby", "gpu-standby"]
        standby = [n for n in kube.objects("Node") if n["metadata"]["labels"].get(GKE_NODEPOOL_LABEL) == "gpu-standby"]
        assert len(standby) == 2
        assert not any(GKE_SPOT_LABEL in n["metadata"]["labels"] for n in standby)
        events = [e for e in kube.objects("Event") if e.get("reason") == "TriggeredScaleUp"]
        assert events
        assert "gpu-standby" in events[0]["message"]
        assert [e for e in gcp.stock.events if e.kind == "flex-start" and e.what == "granted"]
        backend.down()
        assert gcp.leaked() == []
