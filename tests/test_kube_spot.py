"""A Spot node taken away mid-run on the real control plane, and our recovery resuming (issue 20, point 3).

The GKE backend, unchanged, deploys on the real plane of ``helpers/kube_plane.py`` (FakeGCP for
Google's APIs, as in ``test_kube_gke``). The RayCluster's head pod reaches a local Ray head
that offers no CPU and no GPU to tasks, as a RayCluster head does (``num-cpus: 0``,
``num-gpus: 0``); every worker pod the KubeRay operator makes is backed by a real raylet
with the CPUs and GPUs the operator's own ``ray start`` gives that pod
(``kube_kubelet.operator_ray_start_resources``), so the run's placement groups and per-node actors
(the rehearsal's ``--place-workers``, as NeMo-RL places its workers) land on the worker.

Then GKE takes the Spot node away (``KubeletSim.preempt``): the impending-termination taint,
the kubelet's graceful shutdown marking the pod ``Failed`` (``Terminated``,
``DisruptionTarget``), the raylet killed with the VM, the Node object deleted. The real
operator makes the replacement worker pod; a replacement Node registers (the pool's managed
instance group bringing a VM back), the real scheduler binds the pod to it, kwok runs it and
a raylet joins. Our supervisor, on the head, records the restart and the run resumes from
its checkpoint and ends with the checkpoints an uninterrupted run ends with. With recovery
off (``max_restarts=0``) the same loss ends the run FAILED.

Only on the real plane: the KubeFake's twin of this scenario is
``test_preemption.test_on_the_gke_fakes_a_preempted_spot_node_is_recovered_on_the_cluster``,
with the same Ray head (``spot_gke.spot_head``).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
from helpers.kube_both import core, wait
from helpers.kube_gke import IMAGE, World, world_on
from helpers.preemption_job import checkpoint_tree
from helpers.specs import GKE
from helpers.spot_gke import STEP_SECONDS, SpotHead, kube_job, nemo_rl_dir

from rl_lustre import naming
from rl_lustre.errors import JobFailedError

pytestmark = pytest.mark.kube

JOB = kube_job("spot")


@pytest.fixture(params=[pytest.param("real", marks=pytest.mark.kube)])
def world(
    request: pytest.FixtureRequest, spot_head: SpotHead, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[World]:
    """FakeGCP reporting the real plane as the GKE cluster; the head pod reaches ``spot_head``
    (no CPU, no GPU for tasks, as a RayCluster head); worker pods are backed by raylets joined to it."""
    monkeypatch.setenv("RAY_AUTH_TOKEN", spot_head.token)
    monkeypatch.setenv("HF_TOKEN", "hf_ks_" + uuid.uuid4().hex)
    host, port = spot_head.head.dashboard_url.removeprefix("http://").rsplit(":", 1)
    spec = {
        **GKE,
        "name": "ks",
        "num_nodes": 1,
        "image": IMAGE,
        "mount_path": str(tmp_path / "lustre"),
        "secrets": ["HF_TOKEN", "RAY_AUTH_TOKEN"],
        "preload_image": False,
    }
    # Each raylet named as the pod's --node-name=$RL_LUSTRE_NODE_NAME names it: after its Node.
    yield from world_on(request, spec, (host, int(port)), raylets=spot_head.raylet)


def _workers(world: World, name: str) -> list[Any]:
    return (
        core(world.kube)
        .list_namespaced_pod("default", label_selector=f"ray.io/cluster={name},ray.io/node-type=worker")
        .items
    )


def test_a_spot_node_taken_away_is_replaced_by_the_operator_and_the_run_resumes_from_its_checkpoint(
    world: World, tmp_path: Path
) -> None:
    from rl_lustre.nemo_rl.checkpoints import list_checkpoints

    plane = world.kube
    cluster = world.cluster()
    name = naming.raycluster_name(cluster)
    nemo = str(nemo_rl_dir(tmp_path, STEP_SECONDS))
    steady = attrs.evolve(JOB, name="steady", nemo_rl_dir=nemo)
    spot = attrs.evolve(JOB, name="spot", nemo_rl_dir=nemo)
    off = attrs.evolve(JOB, name="spot-off", nemo_rl_dir=nemo, max_restarts=0)
    with cluster:
        [worker] = _workers(world, name)
        wait("the worker pod's raylet", lambda: plane.raylet_ready(worker.metadata.name), timeout=120)

        # Uninterrupted: what the run's checkpoints are without a loss.
        run = cluster.submit(steady)
        assert run.wait(timeout=300) == "SUCCEEDED"
        assert run.restarts() == []
        expected = checkpoint_tree(steady.checkpoint_dir(cluster))
        assert sorted({k.split("/", 1)[0] for k in expected}) == ["step_6", "step_9"]

        # Taken away once a checkpoint is saved.
        run = cluster.submit(spot)
        wait(
            "the run's first checkpoint", lambda: list_checkpoints(spot.checkpoint_dir(cluster)), timeout=180, poll=0.1
        )
        [victim] = _workers(world, name)
        node = core(plane).read_node(victim.spec.node_name)
        gone = plane.preempt(name, nodes=1, back_after=2.0)
        saved = max(c.step for c in list_checkpoints(spot.checkpoint_dir(cluster)))
        assert gone.nodes == (victim.metadata.name,)
        assert not [n for n in core(plane).list_node().items if n.metadata.uid == node.metadata.uid]

        [replacement] = gone.wait(timeout=300)
        replaced_after = time.time() - gone.at
        assert replacement != victim.metadata.name
        pod = core(plane).read_namespaced_pod(replacement, "default")
        assert [o.kind for o in pod.metadata.owner_references] == ["RayCluster"]  # the operator's
        new_node = core(plane).read_node(pod.spec.node_name)
        assert new_node.metadata.uid != node.metadata.uid
        assert new_node.metadata.labels["cloud.google.com/gke-spot"] == "true"

        assert run.wait(timeout=300) == "SUCCEEDED"
        [restart] = run.restarts()
        assert restart.resumed_from_step == saved
        assert restart.first_step == saved + 1
        assert restart.seconds_lost is not None
        assert checkpoint_tree(spot.checkpoint_dir(cluster)) == expected
        print(
            f"\nSpot node taken away at step {restart.last_step}, resumed from step_{saved}: "
            f"replacement raylet up {replaced_after:.1f} s after the loss, "
            f"{restart.seconds_lost:.1f} s lost (capacity wait {restart.capacity_seconds or 0:.1f} s)"
        )

        # Recovery off: the same loss ends the run.
        run = cluster.submit(off)
        wait("the run's first checkpoint", lambda: list_checkpoints(off.checkpoint_dir(cluster)), timeout=180, poll=0.1)
        gone = plane.preempt(name, nodes=1, back_after=2.0)
        with pytest.raises(JobFailedError):
            run.wait(timeout=300)
        assert run.restarts() == []
        assert "recovery is off (max_restarts=0): not restarted" in run.logs()
        gone.wait(timeout=300)
