"""The GKE fakes with Spot GPU workers backed by real raylets, for the tests that run the
production GKE backend end to end through a preemption (``test_preemption``,
``test_goodput_preemption``).

FakeGCP answers Google's APIs and reports a :class:`~rl_lustre.testing.KubeFake` as the GKE
cluster; the fake's head service forwards to a real local Ray head (:func:`spot_head`, one
per test module), and every RayCluster worker pod is backed by a real local raylet joined
to it, declaring what KubeRay's ``ray start`` would from the pod (:meth:`SpotHead.raylet`).
The head is shaped like a RayCluster head (``num-cpus=0``, ``num-gpus=0``, see
:mod:`rl_lustre.kube.raycluster`): NeMo-RL's placement groups ({CPU 2, GPU 1} per GPU) can
only land on the Spot workers, so a worker's loss is the run's.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import attrs
import pytest

from rl_lustre import Cluster, GRPOJob
from rl_lustre.ray.head import LocalHead
from rl_lustre.ray.workers import LocalWorker
from rl_lustre.testing import FAST_BACKOFF, FAST_RETRY, FakeGCP, KubeFake

from .kube_gke import IMAGE, image
from .ray_fixtures import image_tools
from .specs import GKE


@attrs.define
class SpotHead:
    """The module's Ray head, and the environment of the raylets that join it; the Ray heads
    behind the head pod of a KubeFake or of the real plane (``kill``, ``start_head``)."""

    head: LocalHead
    env: dict[str, str]
    raylets: list[LocalWorker] = attrs.Factory(list)

    def raylet(self, pod: str, name: str, resources: dict[str, int]) -> LocalWorker:
        """KubeFake's raylet behind worker pod ``pod``: named ``name``, declaring ``resources``
        (the pod's CPUs, GPUs and memory, as its ``ray start`` would)."""
        from rl_lustre.ray.workers import start_local_worker

        worker = start_local_worker(
            self.head,
            num_cpus=resources.get("CPU", 1),
            num_gpus=resources.get("GPU", 0),
            memory=resources.get("memory"),
            env=self.env,
            name=name,
        )
        self.raylets.append(worker)
        return worker

    def kill(self) -> str:
        """The head's processes killed at once, as its pod's deletion takes them (the raylets
        behind worker pods are other pods: they stay)."""
        from rl_lustre.ray.processes import kill_head_processes

        head = self.head
        kill_head_processes(head.temp_dir, spare_sessions={w.pid for w in self.raylets if w.alive()})
        if head._process is not None:
            head._process.wait()
        return f"pid {head.pid}"

    def start_head(self) -> tuple[str, int]:
        """A new head in the old one's place (same token: the cluster's Secret holds it)."""
        from rl_lustre.ray.head import start_local_head
        from rl_lustre.ray.nodes import TOKEN_FILE
        from rl_lustre.ray.workers import WORKERS_FILE

        self.head = start_local_head(
            self.head.temp_dir, num_cpus=0, num_gpus=0, env=self.env, auth="token", keep=(TOKEN_FILE, WORKERS_FILE)
        )
        host, port = self.head.dashboard_url.removeprefix("http://").rsplit(":", 1)
        return host, int(port)

    @property
    def token(self) -> str:
        token = self.head.headers().get("Authorization", "").removeprefix("Bearer ")
        if not token:
            pytest.skip("the Ray head does not run in token mode")
        return token


@pytest.fixture(scope="module")
def spot_head(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SpotHead]:
    """A real local Ray head in token mode that offers no CPU and no GPU to tasks, as a
    RayCluster head; job drivers run on it with the NeMo-RL image's ``uv`` on their PATH."""
    from rl_lustre.backends.local import LocalBackend
    from rl_lustre.ray.head import head_dir, start_local_head

    if not Path("/proc/self/environ").exists():
        pytest.skip("the local Ray head reads the process table from /proc (Linux)")
    tools = image_tools(tmp_path_factory.mktemp("spot-image-tools"))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PATH", f"{tools}{os.pathsep}{os.environ['PATH']}")
        # The environment the local backend gives a head (rl_lustre importable, no stray secrets).
        env = LocalBackend(
            Cluster.local(f"rll-spot-{os.getpid()}", volume_dir=tmp_path_factory.mktemp("spot-volume"))
        )._head_env()
    head = start_local_head(
        head_dir(f"rll-spot-{os.getpid()}-{tmp_path_factory.getbasetemp().name}"),
        num_cpus=0,
        num_gpus=0,
        env=env,
        auth="token",
    )
    spot = SpotHead(head, env)
    try:
        yield spot
    finally:
        spot.head.stop()  # (the newest: a test may have lost the first)


def spot_spec(name: str, root: Path, num_nodes: int) -> dict[str, Any]:
    """A GKE cluster of ``num_nodes`` Spot A4 nodes whose Ray runs in token mode, its volume under ``root``."""
    return {
        **GKE,
        "name": name,
        "num_nodes": num_nodes,
        "image": IMAGE,
        "mount_path": str(root / "lustre"),
        "secrets": ["RAY_AUTH_TOKEN"],
        "preload_image": False,
    }


def nemo_rl_dir(root: Path, step_seconds: float) -> Path:
    """The NeMo-RL image directory (under ``root``) whose ``run_grpo_math.py`` runs the
    rehearsal, its per-node actors placed on the workers (``--place-workers``), ``step_seconds`` a step."""
    return image(root / "nemo-rl", "--step-seconds", str(step_seconds), "--place-workers")


@contextmanager
def spot_gke(
    head: SpotHead, spec: dict[str, Any], gcp_setup: Callable[[FakeGCP], None] | None = None
) -> Iterator[tuple[Cluster, KubeFake]]:
    """``Cluster(**spec)`` up on the GKE fakes (the production GKE backend), its worker pods
    backed by raylets joined to ``head``; down again, and the fakes stopped, on leaving.
    ``gcp_setup`` shapes the fake Google Cloud first (its capacity: ``gcp.stock``)."""
    from rl_lustre.backends.gke import GKEBackend

    host, port = head.head.dashboard_url.removeprefix("http://").rsplit(":", 1)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RAY_AUTH_TOKEN", head.token)
        with (
            KubeFake(head_target=(host, int(port)), raylets=head.raylet, ray_heads=head, programs=True) as kube,
            FakeGCP(kube=kube) as gcp,
        ):
            if gcp_setup is not None:
                gcp_setup(gcp)
            cluster = Cluster(**spec)
            cluster.use_backend(GKEBackend(cluster, backoff=FAST_BACKOFF, retry=FAST_RETRY))
            with cluster:
                yield cluster, kube


STEP_SECONDS = 1.0  # a rehearsal step of the jobs below, on the real control plane's raylets


def kube_job(name: str) -> GRPOJob:
    """The 9-step job the real-plane recovery tests run: a checkpoint every 3 steps, the last two kept,
    sized for one 8-GPU worker node."""
    return GRPOJob(
        name=name,
        recipe="grpo_math_1B",
        model="Qwen/Qwen2.5-1.5B",
        dataset="OpenMathInstruct-2",
        num_prompts_per_step=4,
        num_generations_per_prompt=8,
        train_global_batch_size=32,
        max_num_steps=9,
        save_period=3,
        keep_top_k=2,
    )
