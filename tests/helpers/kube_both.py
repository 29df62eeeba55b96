"""Scenarios that run twice: against the real control plane and against KubeFake.

A test that takes the ``kube`` fixture runs once with the real control plane
(``kube_plane.py``; marked ``kube``, so in ``nox -s tests-kube`` only) and once with a
:class:`~rl_lustre.testing.KubeFake` (in the default run): the same steps and the same
assertions, so that the fake is held to the real thing. Both have ``api_client()``,
``write_log``, ``evict`` and ``preempt``; :mod:`kube_kubelet` has what else differs
(Job pods held running or failing).

Registered as a pytest plugin from ``conftest.py``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from rl_lustre import Cluster
from rl_lustre.testing import KubeFake, kube_schema_validator

from .specs import GKE

SPEC: dict[str, Any] = {
    **GKE,
    "name": "kr",
    "num_nodes": 2,
    "image": "rayproject/ray:2.60.0",
    "mount_path": "/lustre",
    "secrets": ["RAY_AUTH_TOKEN"],
    "preload_image": False,
}


def core(kube: Any) -> Any:
    """A ``CoreV1Api`` on ``kube``."""
    from kubernetes import client

    return client.CoreV1Api(kube.api_client())


def wait(what: str, check: Any, timeout: float = 60.0, poll: float = 0.2) -> Any:
    """``check()``'s first true value, polled until ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(poll)


def is_real(kube: Any) -> bool:
    return not isinstance(kube, KubeFake)


def pool_requests(spec: dict[str, Any]) -> dict[str, Any]:
    """The GKE node pool requests (``container_v1.NodePool``) our code sends for ``spec``."""
    from rl_lustre.gcp.container_requests import node_pool_request

    plan = Cluster(**spec).plan()
    pools = {key: node_pool_request(plan, key) for key in ("cpu-pool", "gpu-pool")}
    # The GPU pool starts empty (0..num_nodes, a rule of the ComputeClass): its nodes here are
    # those the cluster autoscaler brought for the workers by the end of up().
    gpu = pools["gpu-pool"]
    if gpu.autoscaling.enabled:
        gpu.initial_node_count = gpu.autoscaling.total_max_node_count
    return pools


def register_nodes(kube: Any, spec: dict[str, Any]) -> None:
    """Register the Nodes GKE registers for ``spec``'s node pools, on either kind of API server."""
    for pool in pool_requests(spec).values():
        pool.self_link = (
            f"https://container.googleapis.com/v1/projects/{spec['project']}/locations/"
            f"{spec['region']}/clusters/{spec['name']}/nodePools/{pool.name}"
        )
        pool.locations = [spec["zone"]]
        kube.node_pool_ready(pool)


@pytest.fixture
def nodes(kube_plane: Any) -> Iterator[dict[str, list[str]]]:
    """The Nodes GKE registers for ``SPEC``'s node pools (the CPU pool, 2 A4 Spot nodes), Ready."""
    cluster = Cluster(**SPEC)
    names = {
        key: kube_plane.add_pool_nodes(pool, cluster=cluster.name, zone=SPEC["zone"])
        for key, pool in pool_requests(SPEC).items()
    }
    kube_plane.wait_nodes_ready()
    yield names
    kube_plane.release_raylets()
    for pool in pool_requests(SPEC).values():
        kube_plane.remove_pool_nodes(pool.name)
    wait("the nodes to go", lambda: not core(kube_plane).list_node().items)


@pytest.fixture(params=[pytest.param("real", marks=pytest.mark.kube), "fake"])
def kube(request: pytest.FixtureRequest) -> Iterator[Any]:
    """The real control plane with ``SPEC``'s nodes, or a KubeFake with the same nodes."""
    if request.param == "real":
        request.getfixturevalue("nodes")
        yield request.getfixturevalue("kube_plane")
    else:
        # Validating what it receives against the real schemas, as a real server does.
        with KubeFake(validate=kube_schema_validator()) as fake:
            register_nodes(fake, SPEC)
            yield fake


@pytest.fixture
def deployed(kube: Any) -> Iterator[tuple[Cluster, list[dict[str, Any]]]]:
    """``SPEC``'s objects applied by our code (volume, claim, Secret, networks, RayCluster) and
    deleted by our code afterwards; nothing of them is left."""
    from rl_lustre.kube.apply import apply_manifests, delete_manifests
    from rl_lustre.kube.manifests import build_manifests

    cluster = Cluster(**SPEC)
    cluster.volume._live.mount_point = "10.90.1.4@tcp:/lustrefs"
    manifests = build_manifests(cluster, secret_values={"RAY_AUTH_TOKEN": "t0k3n"}, redact=False)
    api = kube.api_client()
    applied = apply_manifests(api, manifests, deployment=cluster.name)
    assert {a.action for a in applied} == {"created"}
    yield cluster, manifests
    delete_manifests(api, manifests, deployment=cluster.name, timeout=120)
    # The operator's pods and Service went with the RayCluster (garbage collector, foreground).
    assert not core(kube).list_namespaced_pod("default").items
    assert [
        s.metadata.name for s in core(kube).list_namespaced_service("default").items if s.metadata.name != "kubernetes"
    ] == []
