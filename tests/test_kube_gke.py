"""The GKE backend, unchanged, end to end on a real Kubernetes control plane (issue 20, point 3).

The Google APIs are :class:`~rl_lustre.testing.FakeGCP`; the GKE cluster it reports (endpoint,
CA, and the Nodes its node pools register) is the real control plane of ``helpers/kube_plane.py``:
kube-apiserver with token auth, the controller-manager, the scheduler, the KubeRay operator
and kwok playing the nodes. Readiness is the operator's own status; the Jobs API is reached
through a port-forward the API server hands to kwok, which forwards it to the session's real
local Ray head, where the job runs.

Each test runs twice (point 4): on the real plane (marked ``kube``: ``nox -s tests-kube``) and
on a :class:`~rl_lustre.testing.KubeFake` in its place (the slow set: it needs the session's
Ray head), with the same steps and assertions; where the fake cannot do what the real plane
does, the test says so.
"""

from __future__ import annotations

import copy
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
from helpers import kube_both
from helpers.kube_both import is_real, wait
from helpers.kube_gke import IMAGE, JOB, WORLDS, World, image, ray_token, world_on
from helpers.kube_inventory import inventory
from helpers.specs import GKE

from rl_lustre import Cluster, naming
from rl_lustre.backends.gke import GKEBackend

STEP = re.compile(r"={3,} Step (\d+)/(\d+) ={3,}")


@pytest.fixture(params=WORLDS)
def world(
    request: pytest.FixtureRequest, local_cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[World]:
    """The fakes of Google's APIs reporting the real plane (or a KubeFake) as the GKE cluster;
    head pods' dashboard port reaches the session's Ray head, whose token is the cluster's."""
    head = local_cluster._backend().head  # type: ignore[attr-defined]
    monkeypatch.setenv("RAY_AUTH_TOKEN", ray_token(head))
    monkeypatch.setenv("HF_TOKEN", "hf_kg_" + uuid.uuid4().hex)
    host, port = head.dashboard_url.removeprefix("http://").rsplit(":", 1)
    spec = {
        **GKE,
        "name": "kg",
        # One A4 node: the job runs on the session head, which has one node's 8 GPUs.
        "num_nodes": 1,
        "image": IMAGE,
        "mount_path": str(tmp_path / "lustre"),
        "secrets": ["HF_TOKEN", "RAY_AUTH_TOKEN"],
        "preload_image": False,
        "prefetch_models": ("Qwen/Qwen2.5-0.5B",),
    }
    yield from world_on(request, spec, (host, int(port)))


def _users_objects(world: World, cluster: Cluster, manifests: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """What a user adds to the cluster next to ours: a Secret in the same namespace, a
    PersistentVolume and a fabric network of their own (cluster-scoped)."""
    from rl_lustre.kube.client import ResourceClient

    ns = cluster.namespace
    theirs = {
        "Secret": {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "users-secret", "namespace": ns},
            "stringData": {"key": "value"},
        },
        "PersistentVolume": {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": "users-pv"},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": "",
                "hostPath": {"path": "/data"},
            },
        },
    }
    netparams = copy.deepcopy(next(m for m in manifests if m["kind"] == "GKENetworkParamSet"))
    netparams["metadata"] = {"name": "users-net"}
    theirs["GKENetworkParamSet"] = netparams
    api = world.api()
    for obj in theirs.values():
        ResourceClient(api, obj["kind"], obj["metadata"].get("namespace")).create(obj)
    return theirs


def test_up_submit_logs_wait_and_down_on_gke_through_the_operators_status_and_a_port_forward(
    world: World, tmp_path: Path
) -> None:
    from rl_lustre.kube.client import ResourceClient
    from rl_lustre.kube.manifests import build_manifests
    from rl_lustre.nemo_rl.checkpoints import list_checkpoints
    from rl_lustre.provision.kube_drivers import kube_keys

    cluster = world.cluster()
    backend = cluster._backend()
    assert isinstance(backend, GKEBackend)
    api = world.api()
    name = naming.raycluster_name(cluster)
    before = inventory(api)
    job = attrs.evolve(JOB, nemo_rl_dir=str(image(tmp_path / "nemo-rl", "--step-seconds", "0.25")))
    try:
        report = cluster.up()._backend().last_report
        assert report is not None
        assert sorted(report.keys("created")) == sorted(r.key for r in cluster.plan() if r.action == "create")

        # Ready by the operator's own status: its state, and a ready worker per node.
        rc = ResourceClient(api, "RayCluster", cluster.namespace).get(name)
        assert rc is not None
        status = rc["status"]
        assert status["state"] == "ready", status
        assert status["readyWorkerReplicas"] == status["desiredWorkerReplicas"] == cluster.num_nodes
        pods = (
            kube_both.core(world.kube)
            .list_namespaced_pod(cluster.namespace, label_selector=f"ray.io/cluster={name}")
            .items
        )
        assert sorted(p.metadata.labels["ray.io/node-type"] for p in pods) == ["head"] + ["worker"] * cluster.num_nodes
        if is_real(world.kube):
            # The real operator's pods: its generated `ray start`, handed to by our command.
            head = next(p for p in pods if p.metadata.labels["ray.io/node-type"] == "head")
            env = {e.name: e.value for e in head.spec.containers[0].env}
            assert env["KUBERAY_GEN_RAY_START_CMD"].startswith("ray start --head")

        # The fabric's objects (networking.gke.io/v1, from our vendored schemas) are stored
        # as we sent them: nothing of them was pruned or refused.
        manifests = build_manifests(cluster, secret_values={"HF_TOKEN": "x", "RAY_AUTH_TOKEN": "x"})
        networking = [m for m in manifests if m["apiVersion"] == "networking.gke.io/v1"]
        assert {m["kind"] for m in networking} == {"GKENetworkParamSet", "Network"}
        for m in networking:
            stored = ResourceClient(api, m["kind"], None).get(m["metadata"]["name"])
            assert stored is not None, m["metadata"]["name"]
            assert stored["spec"] == m["spec"]
            assert stored["metadata"]["labels"] == m["metadata"]["labels"]

        theirs = _users_objects(world, cluster, manifests)

        run = cluster.submit(job)
        forward = backend._forward
        assert forward is not None
        assert forward.connections >= 1  # the Jobs API, through the API server's port-forward
        followed = list(run.logs(follow=True))
        assert run.wait(timeout=120) == "SUCCEEDED"
        steps = [(int(m[1]), int(m[2])) for line in followed if (m := STEP.search(line))]
        assert steps == [(k, 4) for k in range(1, 5)]
        assert "rl_lustre_oncluster.supervisor" in run.info().entrypoint
        # The checkpoints, listed by a helper job on the head (the Jobs API again).
        assert (
            [c.step for c in run.checkpoints()]
            == [c.step for c in list_checkpoints(job.checkpoint_dir(cluster))]
            == [2, 4]
        )

        # down() of the Kubernetes half (the GKE cluster stays): nothing we made is left, of
        # any kind the API server serves; what the user made is kept.
        backend.down(keys=list(kube_keys(cluster.plan())))
        users = {(o["kind"], o["metadata"]["name"]) for o in theirs.values()}

        def left() -> list[str]:
            return sorted(str(i) for i in inventory(api) - before if (i.kind, i.name) not in users)

        try:
            wait("what we made to go", lambda: not left(), timeout=60)
        except AssertionError:
            raise AssertionError(f"left after down(): {left()}") from None
        kept = {(i.kind, i.name) for i in inventory(api) - before}
        assert kept == users
    finally:
        # The RayCluster went first, so its runs' results are known only to be on the volume:
        # without a destination only the explicit word deletes it.
        cluster.down(discard_results=True)

    # The whole down(): nothing of ours at Google; the GKE cluster went, and its objects with it.
    world.gcp.settle()
    assert world.gcp.leaked(cluster.name) == []
    wait(
        "its Nodes to go",
        lambda: (
            not [
                n
                for n in kube_both.core(world.kube).list_node().items
                if n.metadata.name.startswith(f"gke-{cluster.name}-")
            ]
        ),
        timeout=60,
    )
    wait("the GKE cluster's objects to go with it", lambda: inventory(api) - before == set(), timeout=60)
    if is_real(world.kube):
        assert world.kube.deleted_clusters[-1] == cluster.name


def test_the_fabric_objects_are_accepted_as_sent_and_a_malformed_one_is_refused_by_the_servers_schema(
    kube: Any,
) -> None:
    """The networking.gke.io/v1 CRDs the plane installs come from the schemas we vendor
    (``rl_lustre/kube/crds``): our objects are stored unchanged; one outside the schema is
    refused by the server too (422, naming the field), as it is by our check before sending."""
    from kubernetes.client.exceptions import ApiException

    from rl_lustre.errors import ConfigError
    from rl_lustre.kube.apply import apply_manifests, delete_manifests
    from rl_lustre.kube.client import ResourceClient
    from rl_lustre.kube.fabric import fabric_manifests, validate_networking
    from rl_lustre.kube.labels import deployment_labels

    cluster = Cluster(**{**kube_both.SPEC, "name": "kn"})
    networking = [
        m for m in fabric_manifests(cluster, deployment_labels(cluster)) if m["apiVersion"] == "networking.gke.io/v1"
    ]
    api = kube.api_client()
    applied = apply_manifests(api, networking, deployment=cluster.name)
    assert {a.action for a in applied} == {"created"}
    try:
        for m in networking:
            stored = ResourceClient(api, m["kind"], None).get(m["metadata"]["name"])
            assert stored is not None
            assert (stored["spec"], stored["metadata"]["labels"]) == (m["spec"], m["metadata"]["labels"])
        bad = copy.deepcopy(next(m for m in networking if m["kind"] == "GKENetworkParamSet"))
        bad["metadata"] = {"name": "bad-mode"}
        bad["spec"]["deviceMode"] = "RMDA"
        with pytest.raises(ConfigError, match="deviceMode"):
            validate_networking(bad)
        with pytest.raises(ApiException) as info:
            ResourceClient(api, "GKENetworkParamSet", None).create(bad)
        assert info.value.status == 422
        assert "spec.deviceMode" in str(info.value.body)
        assert ResourceClient(api, "GKENetworkParamSet", None).get("bad-mode") is None
    finally:
        delete_manifests(api, networking, deployment=cluster.name, timeout=60)
    for m in networking:
        assert ResourceClient(api, m["kind"], None).get(m["metadata"]["name"]) is None
