"""``up()`` on a deployment made before the ComputeClass that still has its ``gpu-standby``
flex-start pool beside Spot (issue 34, point 1): the ComputeClass's flex-start rule does that
pool's job now, so ``up()`` deletes it when no node runs in it, keeps it while one does, and
never deletes a ``gpu-standby`` pool rl_lustre did not make (``retire_standby``)."""

from __future__ import annotations

import datetime

import pytest
from google.cloud import container_v1
from helpers.specs import SMALL

from rl_lustre import Cluster
from rl_lustre.backends.gke import GKEBackend
from rl_lustre.errors import OwnershipError, ProvisioningError
from rl_lustre.testing import FAST_BACKOFF, FAST_RETRY, FakeGCP, KubeFake

BASE: dict[str, object] = {**SMALL, "prepull_image": False, "prefetch_models": (), "secrets": ()}
CLUSTER = "projects/my-project/locations/us-east1/clusters/demo"


def backend(cluster: Cluster) -> GKEBackend:
    return GKEBackend(cluster, backoff=FAST_BACKOFF, retry=FAST_RETRY)


def add_pool(gcp: FakeGCP, name: str, *, owned: bool) -> container_v1.NodePool:
    """A flex-start pool beside the deployment's, as an older rl_lustre left its standby pool
    (``owned``: with the deployment's labels) or as a user made one (no labels of ours)."""
    cluster, gpu = gcp._gke._pool(f"{CLUSTER}/nodePools/gpu-pool")
    pool = container_v1.NodePool(gpu)
    pool.name = name
    pool.self_link = f"https://container.googleapis.com/v1/{CLUSTER}/nodePools/{name}"
    pool.config.spot = False
    pool.config.flex_start = True
    pool.config.max_run_duration = datetime.timedelta(days=7)
    pool.autoscaling = container_v1.NodePoolAutoscaling(enabled=True, total_min_node_count=0, total_max_node_count=2)
    pool.initial_node_count = 0
    if not owned:
        pool.config.resource_labels.clear()
        pool.config.resource_labels["team"] = "mine"
    cluster.node_pools.append(pool)
    return pool


def pools(gcp: FakeGCP) -> set[str]:
    return {p.name for p in gcp._gke._cluster(CLUSTER).node_pools}


def deleted(gcp: FakeGCP, since: int) -> list[str]:
    return [r.target for r in gcp.requests[since:] if r.method == "gke.DeleteNodePool"]


def test_an_idle_standby_pool_of_an_older_version_is_deleted_and_nothing_else() -> None:
    cluster = Cluster(**BASE)
    with KubeFake() as kube, FakeGCP(kube=kube) as gcp:
        backend(cluster).up()
        add_pool(gcp, "gpu-standby", owned=True)
        add_pool(gcp, "my-flex", owned=False)  # the user's: never touched
        before = pools(gcp)
        sent = len(gcp.requests)

        report = backend(cluster).up()

        assert deleted(gcp, sent) == [f"{CLUSTER}/nodePools/gpu-standby"]
        assert pools(gcp) == before - {"gpu-standby"}
        assert "deleted gpu-standby, the standby pool of an older rl_lustre" in report.get("gpu-pool").note


def test_a_standby_pool_with_a_node_is_kept_until_it_is_idle() -> None:
    cluster = Cluster(**BASE)
    with KubeFake() as kube, FakeGCP(kube=kube) as gcp:
        backend(cluster).up()
        add_pool(gcp, "gpu-standby", owned=True)
        kube.add_nodes("gpu-standby", 1)  # a run may be on it
        sent = len(gcp.requests)

        report = backend(cluster).up()

        assert deleted(gcp, sent) == []
        assert "gpu-standby" in pools(gcp)
        assert (
            "kept gpu-standby, the standby pool of an older rl_lustre: 1 node(s) of it" in report.get("gpu-pool").note
        )

        kube.remove_nodes("gpu-standby")  # the run moved on: the next up() retires it
        sent = len(gcp.requests)
        backend(cluster).up()
        assert deleted(gcp, sent) == [f"{CLUSTER}/nodePools/gpu-standby"]


def test_a_gpu_standby_pool_the_user_made_is_never_deleted() -> None:
    cluster = Cluster(**BASE)
    with KubeFake() as kube, FakeGCP(kube=kube) as gcp:
        backend(cluster).up()
        add_pool(gcp, "gpu-standby", owned=False)
        sent = len(gcp.requests)

        with pytest.raises((OwnershipError, ProvisioningError)) as refused:
            backend(cluster).up()

        assert "gpu-standby" in str(refused.value)
        assert "was not created by rl_lustre" in str(refused.value)
        assert deleted(gcp, sent) == []
        assert "gpu-standby" in pools(gcp)
