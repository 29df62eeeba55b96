"""The Ray head pod deleted mid-run on the real control plane, and the runs brought back (issue 31, point 6).

The GKE backend, unchanged, deploys on the real plane of ``kube_plane.py`` (FakeGCP for
Google's APIs, as in ``test_kube_spot``): the RayCluster, and beside it the keeper's
Deployment, ServiceAccount, Role and RoleBinding, which the real kube-controller-manager turns
into a ReplicaSet and a pod. kwok runs no containers, so the keeper's pod gets a stand-in
process running the real keeper module from the pod's ConfigMap, with its service account's
token from the TokenRequest API: the API server's RBAC is the Role's
(``kube_kubelet.KubeletSim._run_programs``). The head pod's life is tied to a real Ray head
(``spot_gke.SpotHead``): deleting the pod kills that head's processes; the real KubeRay
operator makes a new head pod, a fresh Ray head serves it, and the worker raylets, which exit
once their GCS is gone, restart and join it (``KubeletSim.lose_head``).

The keeper notices the new head, resubmits both runs in their queue order, and the first
resumes from its checkpoint and ends with the checkpoints of an uninterrupted run; the queued
one keeps its place.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
from helpers.kube_both import core, wait
from helpers.kube_gke import IMAGE, World, world_on
from helpers.preemption_job import checkpoint_tree
from helpers.spot_gke import STEP_SECONDS, SpotHead, kube_job, nemo_rl_dir

from rl_lustre import naming

pytestmark = pytest.mark.kube

JOB = kube_job("hl")


@pytest.fixture(params=[pytest.param("real", marks=pytest.mark.kube)])
def world(
    request: pytest.FixtureRequest, spot_head: SpotHead, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[World]:
    monkeypatch.setenv("RAY_AUTH_TOKEN", spot_head.token)
    host, port = spot_head.head.dashboard_url.removeprefix("http://").rsplit(":", 1)
    spec = {
        "name": "kh",
        "project": "my-project",
        "region": "us-east1",
        "zone": "us-east1-b",
        "num_nodes": 1,
        "image": IMAGE,
        "mount_path": str(tmp_path / "lustre"),
        "secrets": ["RAY_AUTH_TOKEN"],
        "preload_image": False,
    }
    plane = request.getfixturevalue("kube_plane")
    plane.ray_heads, plane.programs = spot_head, True
    try:
        yield from world_on(request, spec, (host, int(port)), raylets=spot_head.raylet)
    finally:
        plane.ray_heads, plane.programs = None, False


def _pods(world: World, name: str, kind: str) -> list[Any]:
    return (
        core(world.kube)
        .list_namespaced_pod("default", label_selector=f"ray.io/cluster={name},ray.io/node-type={kind}")
        .items
    )


def test_the_head_pod_deleted_mid_run_the_keeper_resubmits_and_the_runs_end_as_without_the_loss(
    world: World, tmp_path: Path, preemption_report: list[str]
) -> None:
    from rl_lustre.nemo_rl.checkpoints import list_checkpoints

    plane = world.kube
    cluster = world.cluster()
    name = naming.raycluster_name(cluster)
    nemo = str(nemo_rl_dir(tmp_path, STEP_SECONDS))
    tag = uuid.uuid4().hex[:6]
    steady = attrs.evolve(JOB, name=f"steady-{tag}", nemo_rl_dir=nemo)
    main = attrs.evolve(JOB, name=f"main-{tag}", nemo_rl_dir=nemo)
    queued = attrs.evolve(JOB, name=f"queued-{tag}", nemo_rl_dir=nemo, max_num_steps=3)
    with cluster:
        [worker] = _pods(world, name, "worker")
        wait("the worker pod's raylet", lambda: plane.raylet_ready(worker.metadata.name), timeout=120)
        keeper = core(plane).list_namespaced_pod("default", label_selector="rl-lustre-component=keeper").items
        assert len(keeper) == 1
        assert keeper[0].spec.service_account_name == naming.keeper_name(cluster)
        wait("the keeper's process", lambda: any("keeping the runs of kh" in log for log in plane.program_logs()))

        run = cluster.submit(steady)
        assert run.wait(timeout=300) == "SUCCEEDED"
        expected = checkpoint_tree(steady.checkpoint_dir(cluster))

        run, behind = cluster.submit(main), cluster.submit(queued)
        wait(
            "the run's first checkpoint", lambda: list_checkpoints(main.checkpoint_dir(cluster)), timeout=180, poll=0.1
        )
        assert behind.status() == "QUEUED"
        [head] = _pods(world, name, "head")
        loss = plane.lose_head(name, back_after=2.0)
        ready_at = loss.wait(timeout=300)
        [new_head] = wait("KubeRay's new head pod", lambda: _pods(world, name, "head"), timeout=120)
        assert new_head.metadata.uid != head.metadata.uid
        assert [o.kind for o in new_head.metadata.owner_references] == ["RayCluster"]

        assert run.wait(timeout=600) == "SUCCEEDED"
        [restart] = run.restarts()
        assert restart.cause == "head-lost"
        assert restart.nodes[0].name == head.metadata.name
        assert restart.resumed_from_step is not None
        assert restart.first_step_at is not None
        assert ready_at is not None
        back = restart.first_step_at - ready_at
        assert back < 120
        assert checkpoint_tree(main.checkpoint_dir(cluster)) == expected
        preemption_report.append(
            f"real plane, head pod deleted: new head ready {ready_at - loss.at:.1f}s after, "
            f"training again {back:.1f}s later, resumed from step_{restart.resumed_from_step}"
        )

        assert behind.wait(timeout=600) == "SUCCEEDED"
        timeline = behind.timeline()
        assert timeline is not None
        assert timeline.admissions[0][0] >= (run.info().end_time or 0) - 1
        assert any("resubmitted" in log for log in plane.program_logs())
