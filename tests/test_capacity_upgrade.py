"""``up()`` on a deployment made before the ComputeClass (issue 34, point 1): its fixed-size
Spot ``gpu-pool``, whose nodes carry no class label or taint, is brought to the class's
shape in place (GKE's ``UpdateNodePool`` and ``SetNodePoolAutoscaling``), its running nodes
kept; what GKE cannot change on a pool is refused, naming the pool and what to do."""

from __future__ import annotations

import pytest
from google.cloud import container_v1
from helpers.specs import SMALL

from rl_lustre import Cluster
from rl_lustre.backends.gke import GKEBackend
from rl_lustre.catalog import COMPUTE_CLASS_LABEL, GKE_NODEPOOL_LABEL
from rl_lustre.errors import ProvisioningError
from rl_lustre.testing import FAST_BACKOFF, FAST_RETRY, FakeGCP, KubeFake

BASE: dict[str, object] = {**SMALL, "prepull_image": False, "prefetch_models": (), "secrets": ()}
POOL = "projects/my-project/locations/us-east1/clusters/demo/nodePools/gpu-pool"


def backend(cluster: Cluster) -> GKEBackend:
    return GKEBackend(cluster, backoff=FAST_BACKOFF, retry=FAST_RETRY)


def gpu_nodes(kube: KubeFake) -> dict[str, dict[str, str]]:
    return {
        n["metadata"]["name"]: n["metadata"]["labels"]
        for n in kube.objects("Node")
        if n["metadata"]["labels"].get(GKE_NODEPOOL_LABEL) == "gpu-pool"
    }


def make_it_old(gcp: FakeGCP, kube: KubeFake, *, spot: bool = True) -> None:
    """What an older rl_lustre left: a fixed-size pool of 2 nodes, no class label or taint."""
    _, pool = gcp._gke._pool(POOL)
    pool.config.labels.clear()
    gpu_taints = [t for t in pool.config.taints if t.key != COMPUTE_CLASS_LABEL]
    del pool.config.taints[:]
    pool.config.taints.extend(gpu_taints)
    pool.config.spot = spot
    pool.autoscaling = container_v1.NodePoolAutoscaling(enabled=False)
    pool.initial_node_count = 2
    kube.node_pool_updated(pool)  # the nodes' taints as the pool's
    from kubernetes import client

    core = client.CoreV1Api(kube.api_client())
    for name in gpu_nodes(kube):
        core.patch_node(name, {"metadata": {"labels": {COMPUTE_CLASS_LABEL: None, "rl-lustre/capacity": None}}})


def test_an_older_fixed_size_spot_pool_is_brought_to_the_class_in_place() -> None:
    cluster = Cluster(**BASE)
    with KubeFake() as kube, FakeGCP(kube=kube) as gcp:
        backend(cluster).up()
        make_it_old(gcp, kube)
        before = set(gpu_nodes(kube))
        assert len(before) == 2
        assert not any(COMPUTE_CLASS_LABEL in labels for labels in gpu_nodes(kube).values())
        sent = len(gcp.requests)

        report = backend(cluster).up()

        note = report.get("gpu-pool").note
        assert "gpu-pool brought to the ComputeClass's shape" in note
        assert "autoscaling from 0 to 2 nodes" in note
        methods = [r.method for r in gcp.requests[sent:] if r.method.startswith("gke.")]
        assert "gke.UpdateNodePool" in methods
        assert "gke.SetNodePoolAutoscaling" in methods
        assert "gke.CreateNodePool" not in methods
        assert "gke.DeleteNodePool" not in methods
        _, pool = gcp._gke._pool(POOL)
        assert dict(pool.config.labels) == {COMPUTE_CLASS_LABEL: "demo-gpus", "rl-lustre/capacity": "spot"}
        assert (COMPUTE_CLASS_LABEL, "demo-gpus") in {(t.key, t.value) for t in pool.config.taints}
        assert (pool.autoscaling.enabled, pool.autoscaling.total_max_node_count) == (True, 2)
        # The same nodes, now of the class: the workers (which select it) run on them.
        nodes = gpu_nodes(kube)
        assert set(nodes) == before
        assert {labels[COMPUTE_CLASS_LABEL] for labels in nodes.values()} == {"demo-gpus"}
        assert report.get("raycluster").outcome in ("created", "adopted")
        # A third up() finds nothing to change.
        sent = len(gcp.requests)
        backend(cluster).up()
        assert not [r for r in gcp.requests[sent:] if r.method in ("gke.UpdateNodePool", "gke.SetNodePoolAutoscaling")]


def test_what_gke_cannot_change_on_a_pool_is_refused_naming_the_pool_and_what_to_do() -> None:
    cluster = Cluster(**BASE)
    with KubeFake() as kube, FakeGCP(kube=kube) as gcp:
        backend(cluster).up()
        make_it_old(gcp, kube, spot=False)  # an on-demand pool where the policy's is Spot
        sent = len(gcp.requests)
        with pytest.raises(ProvisioningError) as refused:
            backend(cluster).up()
        text = str(refused.value)
        assert "up() failed at gpu-pool: Cluster.capacity='spot'" in text
        assert "gpu-pool exists as on-demand or reserved a4-highgpu-8g nodes" in text
        assert "policy's pool of that name is Spot" in text
        assert "down(keys=['gpu-pool'])" in text
        # Nothing was changed or deleted (what up() made before is kept): the pool is the user's to replace.
        assert "cleaned up: nothing" in text
        assert not [r for r in gcp.requests[sent:] if r.method.startswith("gke.") and "Get" not in r.method]
        assert gcp._gke._pool(POOL)[1].config.spot is False
